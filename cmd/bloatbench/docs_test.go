package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/urfave/cli/v3"
)

// docLine is a bloatbench command line in the documentation's code.
type docLine struct {
	file string
	line int
	text string // from "bloatbench", prompt and sudo taken off, continuations joined
}

// docCommandLines are the command lines in the code blocks (fenced, or indented by
// four spaces after a blank line) of a markdown file that start with bloatbench,
// $ bloatbench or sudo bloatbench.
func docCommandLines(t *testing.T, path string) []docLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docLine
	var fence string  // the open fence's marker, "" outside one
	indented := false // in an indented code block
	prevBlank := true // the line before was blank (or the file's start)
	var cont *docLine // a line ending in \ goes on
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		trimmed := strings.TrimSpace(raw)
		if fence == "" {
			for _, m := range []string{"```", "~~~"} {
				if strings.HasPrefix(trimmed, m) {
					fence = m
				}
			}
			if fence != "" {
				indented, prevBlank = false, false
				continue
			}
		} else if strings.HasPrefix(trimmed, fence) {
			fence, prevBlank = "", false
			continue
		}
		code := fence != ""
		if !code {
			isIndented := strings.HasPrefix(raw, "    ") || strings.HasPrefix(raw, "\t")
			switch {
			case trimmed == "":
				// A blank line neither starts nor ends an indented block.
			case isIndented && (indented || prevBlank):
				indented = true
			default:
				indented = false
			}
			code = indented && trimmed != ""
		}
		prevBlank = trimmed == ""
		if !code {
			cont = nil
			continue
		}
		if cont != nil {
			cont.text += " " + strings.TrimSuffix(trimmed, `\`)
			if !strings.HasSuffix(trimmed, `\`) {
				out, cont = append(out, *cont), nil
			}
			continue
		}
		cmd := strings.TrimPrefix(trimmed, "$ ")
		cmd = strings.TrimPrefix(cmd, "sudo -E ")
		cmd = strings.TrimPrefix(cmd, "sudo ")
		cmd = strings.TrimPrefix(cmd, "./")
		if !strings.HasPrefix(cmd, "bloatbench ") && cmd != "bloatbench" {
			continue
		}
		l := docLine{file: path, line: n, text: strings.TrimSuffix(cmd, `\`)}
		if strings.HasSuffix(cmd, `\`) {
			cont = &l
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// shellWords splits a command line as a shell would, enough for documentation:
// quotes, backslashes, a # comment; it ends at a pipe, ;, && or || standing alone
// outside a synopsis' brackets, and leaves redirections out.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else if r == '\\' && quote == '"' && i+1 < len(rs) {
				i++
				cur.WriteRune(rs[i])
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			inWord = true
		case unicode.IsSpace(r):
			flush()
		case r == '#' && !inWord:
			flush()
			return stopAtOperators(words)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return stopAtOperators(words)
}

// stopAtOperators cuts words at the first operator that ends the command, outside
// brackets ([-H lab.yaml | --name bb0]), and drops redirections (> file, 2>&1).
func stopAtOperators(words []string) []string {
	var out []string
	depth := 0
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case depth == 0 && (w == "|" || w == "||" || w == "&&" || w == ";" || w == "&"):
			return out
		case w == ">" || w == ">>" || w == "<" || w == "2>":
			i++ // and its target
			continue
		case strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") || strings.HasPrefix(w, "<"):
			continue
		}
		depth += strings.Count(w, "[") - strings.Count(w, "]")
		out = append(out, w)
	}
	return out
}

// bare is a synopsis word without its brackets and ellipsis: "[--rtt" -> "--rtt",
// "KO]..." -> "KO".
func bare(w string) string {
	w = strings.TrimSuffix(w, "...")
	w = strings.TrimLeft(w, "[")
	w = strings.TrimRight(w, "]")
	return strings.TrimSuffix(w, "...")
}

// isPlaceholder says whether a word is a placeholder in caps (FILE, VERB, HOST).
func isPlaceholder(w string) bool {
	return w != "" && strings.ToUpper(w) == w && strings.IndexFunc(w, unicode.IsLetter) >= 0
}

// checkCommandLine parses a documented command line against the command tree: the
// verb and sub-verb exist, and every flag given is one of the verb's. It returns
// what is wrong, "" when nothing is.
func checkCommandLine(tree *cli.Command, line string) string {
	words := shellWords(line)
	if len(words) == 0 || words[0] != "bloatbench" {
		return ""
	}
	cmd := tree
	for i := 1; i < len(words); i++ {
		w := bare(words[i])
		switch {
		case w == "" || w == "|":
			continue
		case w == "--":
			return ""
		case len(w) > 1 && w[0] == '-' && strings.IndexFunc(w, unicode.IsLetter) > 0:
			name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			f := flagOf(cmd, name)
			if f == nil {
				return fmt.Sprintf("%s has no flag %s", commandName(cmd), dashed(name))
			}
			if df, ok := f.(cli.DocGenerationFlag); ok && df.TakesValue() && !hasValue {
				if i+1 >= len(words) {
					return fmt.Sprintf("%s %s needs a value", commandName(cmd), dashed(name))
				}
				i++
			}
		case len(cmd.Commands) > 0:
			if isPlaceholder(w) {
				return "" // bloatbench VERB --help: the verb is the reader's
			}
			sub := cmd.Command(w)
			if sub == nil {
				return fmt.Sprintf("%s has no verb %q", commandName(cmd), w)
			}
			cmd = sub
		}
		// Otherwise an argument: a file, a test, a placeholder.
	}
	return ""
}

func commandName(cmd *cli.Command) string {
	return strings.Join(cmd.Path(), " ")
}

// flagOf is cmd's flag of that name or alias, or nil.
func flagOf(cmd *cli.Command, name string) cli.Flag {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// The checker itself: what it must find, and the synopses it must take.
func TestCheckCommandLine(t *testing.T) {
	tree := setupTree(t)
	for line, want := range map[string]string{
		"bloatbench summary --format markdown results/*.bb.json.gz":        "",
		"bloatbench summary results/*.bb.json.gz --format markdown | head": "",
		"bloatbench sumary FILE":           `bloatbench has no verb "sumary"`,
		"bloatbench summary --bogus FILE":  "bloatbench summary has no flag --bogus",
		"bloatbench summary FILE --format": "bloatbench summary --format needs a value",
		"bloatbench testbed upp":           `bloatbench testbed has no verb "upp"`,
		"bloatbench testbed up --vm --out vmlab.yaml --rate 10mbit [--router [--rtt 50ms] [--loss 0.1%]] [--module KO]...": "",
		"bloatbench testbed up --rtt=50ms --vm --router":                                                                   "",
		"bloatbench testbed down [-H lab.yaml | --name bb0 | --vm]":                                                        "",
		"bloatbench run -H hosts.yaml -t 'MQ + FQ_CODEL' --te download_streams=8 tcp_ndown   # a comment --bogus":          "",
		"bloatbench run -H local tcp_4down > out.txt 2>&1":                                                                 "",
		"bloatbench run -H local --bogus=1 tcp_4down":                                                                      "bloatbench run has no flag --bogus",
		"bloatbench VERB --help":     "",
		"bloatbench completion bash": "",
		"bloatbench help summary":    "",
		"bloatbench --version":       "",
		`bloatbench testbed up --vm --module "$(bloatbench testbed image)/sch_dualpi2.ko"`: "",
	} {
		if got := checkCommandLine(tree, line); got != want {
			t.Errorf("%s: %q, want %q", line, got, want)
		}
	}
}

// Every bloatbench command line in README.md and docs/*.md parses against the
// command tree: its verbs exist, and so does every flag it gives them.
func TestDocsCommandLines(t *testing.T) {
	tree := setupTree(t)
	files := []string{filepath.Join("..", "..", "README.md")}
	more, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	files = append(files, more...)
	n := 0
	for _, f := range files {
		for _, l := range docCommandLines(t, f) {
			n++
			if problem := checkCommandLine(tree, l.text); problem != "" {
				t.Errorf("%s:%d: %s\n\t%s", filepath.ToSlash(strings.TrimPrefix(l.file, filepath.Join("..", "..")+string(filepath.Separator))), l.line, problem, l.text)
			}
		}
	}
	t.Logf("%d command lines in %d files", n, len(files))
	if n < 10 {
		t.Errorf("only %d bloatbench command lines found in %v: is the reading of their code blocks broken?", n, files)
	}
}
