package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/urfave/cli/v3"

	docs "github.com/urfave/cli-docs/v3"
)

var updateMan = flag.Bool("update-man", false, "write docs/man/bloatbench.1 from the command tree (make man)")

// manPath is the committed man page, from this package's folder.
var manPath = filepath.Join("..", "..", "docs", "man", "bloatbench.1")

// manPage is the man page of the command tree, section 1: urfave/cli-docs' markdown
// of every verb, with its usage, examples and flags, made roff by go-md2man as
// cli-docs' own ToMan does. Before that, the markdown is made to say what the help
// says: a flag's value by its name (cli-docs writes ="" for every one), switches
// without "(default: false)", and the help verbs and --help flags, which every verb
// has, left to the description's one line about them.
func manPage(t *testing.T) string {
	t.Helper()
	tree := setupTree(t)
	placeholders := map[string]string{} // "**--cut, --data-cutoff**" -> "START,END"
	_ = tree.Walk(func(c *cli.Command) error {
		if c.Name == "help" {
			c.Hidden = true
		}
		for _, f := range c.Flags {
			if b, ok := f.(*cli.BoolFlag); ok && b.Name == "help" && c.Root() != c {
				b.Hidden = true
			}
			df, ok := f.(cli.DocGenerationFlag)
			if !ok || !df.TakesValue() {
				continue
			}
			var names []string
			for _, n := range f.Names() {
				names = append(names, dashed(n))
			}
			usage := df.GetUsage()
			if i := strings.IndexByte(usage, '`'); i >= 0 {
				if j := strings.IndexByte(usage[i+1:], '`'); j >= 0 {
					placeholders["**"+strings.Join(names, ", ")+"**"] = usage[i+1 : i+1+j]
				}
			}
		}
		return nil
	})
	md, err := docs.ToMarkdown(tree)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		names, rest, ok := strings.Cut(l, `=""`)
		if p := placeholders[names]; ok && p != "" {
			l = names + "=" + p + rest
		}
		lines[i] = strings.Replace(l, " (default: false)", "", 1)
	}
	return string(md2man.Render([]byte("% bloatbench 1\n\n" + strings.Join(lines, "\n"))))
}

// The committed man page is the command tree's: a verb or flag changed without
// make man fails here. With -update-man (make man) the test writes it.
func TestManPage(t *testing.T) {
	got := manPage(t)
	if *updateMan {
		if err := os.MkdirAll(filepath.Dir(manPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(manPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatalf("%v: run make man", err)
	}
	if string(want) != got {
		t.Fatalf("%s is not the command tree's man page (a verb, flag or usage changed since it was written): run make man", manPath)
	}
}
