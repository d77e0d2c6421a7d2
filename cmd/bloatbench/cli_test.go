package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/datafile"
)

// Usage errors exit 2 with a short usage on stderr, nothing on stdout, and a
// suggestion for a near miss; an unknown verb no longer exits 3, the code of a
// batch's regression.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"sumary", "x.bb.json.gz"}, `unknown verb "sumary"; did you mean "summary"?`},
		{[]string{"sumary", "--format", "json", "x.bb.json.gz"}, `unknown verb "sumary"; did you mean "summary"?`},
		{[]string{"help", "sumary"}, `did you mean "summary"?`},
		{[]string{"testbed", "upp"}, `unknown verb "testbed upp"; did you mean "testbed up"?`},
		{[]string{"testbed", "--help", "upp"}, `unknown verb "testbed upp"`},
		{[]string{"hosts", "chek"}, `did you mean "hosts check"?`},
		{[]string{"completion", "tcsh"}, `unknown verb "completion tcsh"`},
		{[]string{"help", "--bogus"}, "unknown flag --bogus for help"},
		{[]string{"testbed", "help", "--bogus"}, "unknown flag --bogus for testbed help"},
		{[]string{"help", "testbed", "upp"}, `unknown verb "testbed upp"`},
		{[]string{"xyzzy"}, `unknown verb "xyzzy"`},
		{[]string{"summary", "--fromat", "json", "x.bb.json.gz"}, "unknown flag --fromat for summary; did you mean --format?"},
		{[]string{"summary", "x.bb.json.gz", "--p98"}, "did you mean --p99?"},
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"testbed", "up", "--routr"}, "unknown flag --routr for testbed up; did you mean --router?"},
		{[]string{"summary", "x.bb.json.gz", "--format"}, "--format needs a value"},
		{[]string{"summary"}, "summary needs data files"},
		{[]string{"run", "tcp_4down"}, "run needs --hosts (-H)"},
		{[]string{"run", "-H", "local", "--repeat", "many", "tcp_4down"}, `--repeat "many": not a number`},
		{[]string{"run", "-H", "local"}, "run needs one test"},
		{[]string{"run", "-H", "local", "--test-ip", "10.0.0.2", "tcp_4down"}, "--test-ip and --bottleneck go with -H HOST"},
		{[]string{"run", "-H", "10.0.0.2", "--bottleneck", "router:eth1", "tcp_4down"}, `--bottleneck "router:eth1": write HOST:DEV`},
		{[]string{"run", "-H", "10.0.0.2", "--test-ip", "ten", "tcp_4down"}, `--test-ip "ten" is not an IP address`},
		{[]string{"run", "-H", "local", "--te", "nokey", "tcp_4down"}, `--te "nokey": write KEY=VALUE`},
		{[]string{"run", "-H", "local", "--no-sampler", "cpu", "tcp_4down"}, `--no-sampler "cpu": the run has no such sampler; it runs qdisc, sojourn`},
		{[]string{"summary", "--cut", "5", "x.bb.json.gz"}, `--cut "5"`},
		{[]string{"summary", "--flows", "some", "x.bb.json.gz"}, `--flows "some"`},
		{[]string{"summary", "--format", "yaml", "x.bb.json.gz"}, `unknown format "yaml"`},
		{[]string{"summary", "--meta", "--format", "csv", "x.bb.json.gz"}, "--meta prints text or json"},
		{[]string{"tests", "--format", "yaml"}, `--format "yaml": use text or json`},
		{[]string{"setups", "--format", "csv"}, `--format "csv": use text or json`},
		{[]string{"setups", "--commands", "fq_codel", "--queues", "0"}, "--queues 0"},
		{[]string{"export", "x.bb.json.gz"}, "export needs a format: --flent"},
		{[]string{"batch"}, "batch needs one batch file"},
		{[]string{"plot"}, "plot needs data files"},
		{[]string{"plot", "-p", "all_scaeld", "--png", "x.bb.json.gz"}, `-p "all_scaeld": no such layout`},
		{[]string{"plot", "-p", "totals", "x.bb.json.gz"}, "-p draws image files: add --png or --svg"},
		{[]string{"plot", "-o", "a.png", "-p", "all", "-p", "totals", "x.bb.json.gz"}, "-o a.png is one image, of one layout"},
		{[]string{"plot", "--width", "-5", "x.bb.json.gz"}, "--width -5"},
		{[]string{"history"}, "history needs batch folders"},
		{[]string{"testbed", "up", "--kernel", "x.deb"}, "--kernel is for the VM lab: add --vm"},
		{[]string{"testbed", "up", "--vm", "--user", "bench"}, "--user is for the local lab"},
	} {
		name := strings.Join(c.args, " ")
		stdout, stderr, code := runApp(c.args...)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d\n%s", name, code, exitUsage, stderr)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%s: stderr does not say %q:\n%s", name, c.want, stderr)
		}
		if stdout != "" {
			t.Errorf("%s: stdout has %q; a usage error writes on stderr only", name, stdout)
		}
		// Short: the error, the usage (up to two lines), the verbs, where to read more.
		if n := strings.Count(stderr, "\n"); n > 5 || strings.Contains(stderr, "OPTIONS:") || !strings.Contains(stderr, "usage: bloatbench") {
			t.Errorf("%s: stderr is not a short usage (%d lines):\n%s", name, n, stderr)
		}
	}
}

// The process's own exit codes, as the root's help tells them.
func TestExitCodes(t *testing.T) {
	_, stderr, code := runBinary(t, "sumary")
	if code != 2 || !strings.Contains(stderr, `did you mean "summary"?`) {
		t.Errorf("sumary: exit %d, want 2:\n%s", code, stderr)
	}
	_, stderr, code = runBinary(t, "summary", filepath.Join(t.TempDir(), "missing.bb.json.gz"))
	if code != 1 || !strings.Contains(stderr, "missing.bb.json.gz") {
		t.Errorf("summary of a missing file: exit %d, want 1:\n%s", code, stderr)
	}
	stdout, _, code := runBinary(t, "--help")
	if code != 0 {
		t.Errorf("--help: exit %d", code)
	}
	for _, want := range []string{"Exit codes:", "0    ok", "1    an error", "2    a usage error", "3    batch: a regression against --baseline",
		"4    batch: runs failed, or the batch was interrupted", "130  an offline verb"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--help does not say %q:\n%s", want, stdout)
		}
	}
	if stdout, _, code := runBinary(t); code != 0 || !strings.Contains(stdout, "COMMANDS:") {
		t.Errorf("no verb: exit %d, want the help and 0:\n%s", code, stdout)
	}
	if stdout, _, code := runBinary(t, "version"); code != 0 || strings.TrimSpace(stdout) == "" {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
	if stdout, _, code := runBinary(t, "--version"); code != 0 || !strings.HasPrefix(stdout, "bloatbench version ") {
		t.Errorf("--version: exit %d, %q", code, stdout)
	}
}

// Help is help, wherever --help stands: after a verb's arguments too, and help VERB.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"summary", "--help"}, {"summary", "x.bb.json.gz", "--help"}, {"summary", "--help", "x.bb.json.gz"}, {"help", "summary"}, {"summary", "-h"}} {
		stdout, stderr, code := runApp(args...)
		if code != 0 || !strings.Contains(stdout, "bloatbench summary - print the summary table") || !strings.Contains(stdout, "--format FORMAT") {
			t.Errorf("%v: exit %d:\n%s\n%s", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"help", "testbed", "up"}, {"testbed", "help", "up"}, {"testbed", "up", "--help"}, {"h", "testbed", "up"}} {
		stdout, stderr, code := runApp(args...)
		if code != 0 || !strings.Contains(stdout, "bloatbench testbed up - create a client") {
			t.Errorf("%v: exit %d:\n%s\n%s", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"testbed"}, {"testbed", "--help"}, {"help", "testbed"}, {"testbed", "help"}} {
		stdout, stderr, code := runApp(args...)
		if code != 0 || !strings.Contains(stdout, "up ") || !strings.Contains(stdout, "down ") {
			t.Errorf("%v: exit %d:\n%s\n%s", args, code, stdout, stderr)
		}
	}
}

// Every flag of every verb is taken before the verb's arguments and after them:
// bloatbench summary FILE --format markdown is summary --format markdown FILE.
func TestFlagsBeforeOrAfterArguments(t *testing.T) {
	// recording is a tree whose verbs record what they were given.
	type seen struct {
		args []string
		set  bool
	}
	recording := func(flag string, got *seen) *cli.Command {
		app := newApp()
		_ = app.Walk(func(c *cli.Command) error {
			if len(c.Commands) == 0 {
				c.Action = func(_ context.Context, cmd *cli.Command) error {
					*got = seen{cmd.Args().Slice(), cmd.IsSet(flag)}
					return nil
				}
			}
			return nil
		})
		app.Writer, app.ErrWriter = &strings.Builder{}, &strings.Builder{}
		return app
	}
	// The verbs, with their paths: a tree not yet run has no parents to ask.
	var leaves []*cli.Command
	paths := map[*cli.Command][]string{}
	var walk func(c *cli.Command, path []string)
	walk = func(c *cli.Command, path []string) {
		if len(c.Commands) == 0 && c.Name != "agent" {
			leaves, paths[c] = append(leaves, c), path
		}
		for _, sub := range c.Commands {
			walk(sub, append(slices.Clip(path), sub.Name))
		}
	}
	walk(newApp(), nil)
	n := 0
	for _, leaf := range leaves {
		path := paths[leaf]
		for _, f := range leaf.Flags {
			var value []string
			switch f.(type) {
			case *cli.BoolFlag:
			case *cli.IntFlag:
				value = []string{"3"}
			case *cli.DurationFlag:
				value = []string{"50ms"}
			default:
				value = []string{"x"}
			}
			var required []string
			for _, r := range leaf.Flags {
				if rf, ok := r.(cli.RequiredFlag); ok && rf.IsRequired() && r != f {
					required = append(required, "--"+r.Names()[0], "local")
				}
			}
			for _, name := range f.Names() {
				flag := append([]string{dashed(name)}, value...)
				for _, args := range [][]string{
					slices.Concat(path, required, flag, []string{"ARG1", "ARG2"}),
					slices.Concat(path, []string{"ARG1", "ARG2"}, required, flag),
					slices.Concat(path, []string{"ARG1"}, flag, required, []string{"ARG2"}),
				} {
					var got seen
					err := recording(f.Names()[0], &got).Run(context.Background(), append([]string{"bloatbench"}, args...))
					if err != nil || !got.set || !slices.Equal(got.args, []string{"ARG1", "ARG2"}) {
						t.Errorf("bloatbench %s: %v; flag set %v, arguments %q", strings.Join(args, " "), err, got.set, got.args)
					}
					n++
				}
			}
		}
	}
	if n < 100 {
		t.Errorf("only %d command lines tried", n)
	}
}

// The completion verb prints a script that completes verbs, sub-verbs and flags in
// a real bash, with or without the bash-completion package.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	bin := binary(t)
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"bloatbench", "su"}, "summary"},
		{[]string{"bloatbench", "te"}, "tests testbed"},
		{[]string{"bloatbench", "testbed", "d"}, "down"},
		{[]string{"bloatbench", "summary", "--fo"}, "--format"},
		{[]string{"bloatbench", "run", "--cu"}, "--cut"},
		{[]string{"bloatbench", "testbed", "up", "--ro"}, "--router"},
		{[]string{"bloatbench", "comp"}, "compare completion"},
	} {
		line := strings.Join(c.words, " ")
		script := fmt.Sprintf(`source <(%q completion bash) || exit 1
COMP_WORDS=(%s); COMP_CWORD=%d; COMP_LINE=%q; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9
__bloatbench_bash_autocomplete
echo "${COMPREPLY[@]}"`, bin, line, len(c.words)-1, line)
		cmd := exec.CommandContext(t.Context(), bash, "--norc", "--noprofile", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		if got := strings.Join(strings.Fields(string(out)), " "); got != c.want {
			t.Errorf("completing %q: %q, want %q", line, got, c.want)
		}
	}
	for _, sh := range []string{"zsh", "fish", "pwsh"} {
		if stdout, stderr, code := runApp("completion", sh); code != 0 || !strings.Contains(stdout, "bloatbench") && sh != "pwsh" || stdout == "" {
			t.Errorf("completion %s: exit %d\n%s\n%s", sh, code, stdout, stderr)
		}
	}
}

// A repeatable flag's value is one value, commas and all: the tests' cc parameter is
// a comma-separated list.
func TestRepeatableFlagsKeepCommas(t *testing.T) {
	var te, setups []string
	app := newApp()
	app.Command("run").Action = func(_ context.Context, c *cli.Command) error {
		te, setups = stringSlice(c, "te"), stringSlice(c, "setup")
		return nil
	}
	err := app.Run(context.Background(), []string{"bloatbench", "run", "-H", "local", "--te", "cc=cubic,bbr", "--test-parameter", "download_streams=2",
		"--setup", "fq_codel", "--setup", " cake ", "tcp_ndown"})
	if err != nil || !slices.Equal(te, []string{"cc=cubic,bbr", "download_streams=2"}) || !slices.Equal(setups, []string{"fq_codel", "cake"}) {
		t.Errorf("%v: --te %q, --setup %q", err, te, setups)
	}
}

// flent's spellings of the flags it shares are aliases.
func TestFlentSpellings(t *testing.T) {
	tree := setupTree(t)
	for verb, aliases := range map[string][][2]string{
		"run":     {{"cut", "data-cutoff"}, {"te", "test-parameter"}, {"step", "step-size"}, {"title", "title-extra"}, {"output", "data-dir"}},
		"summary": {{"cut", "data-cutoff"}},
		"compare": {{"cut", "data-cutoff"}},
		"batch":   {{"dry-run", "batch-dry-run"}, {"resume", "batch-resume"}},
	} {
		cmd := tree.Command(verb)
		for _, a := range aliases {
			var f cli.Flag
			for _, fl := range cmd.Flags {
				if fl.Names()[0] == a[0] {
					f = fl
				}
			}
			if f == nil || !slices.Contains(f.Names(), a[1]) {
				t.Errorf("%s: --%s has no alias --%s", verb, a[0], a[1])
			}
		}
	}
	// Taken as the flag it names: a cut that cannot be is refused naming it.
	_, stderr, code := runApp("summary", "--data-cutoff", "9,3", "x.bb.json.gz")
	if code != exitUsage || !strings.Contains(stderr, "--cut") {
		t.Errorf("--data-cutoff 9,3: exit %d\n%s", code, stderr)
	}
}

var placeholderOK = regexp.MustCompile(`^[A-Z][A-Z0-9_=,.@\[\]|:]*$|^off$`)

// A flag's value is named in the help by its usage's backquoted word: a value
// name, not a type's name (string, int) or a phrase.
func TestHelpPlaceholders(t *testing.T) {
	tree := setupTree(t)
	_ = tree.Walk(func(c *cli.Command) error {
		for _, f := range c.VisibleFlags() {
			df, ok := f.(cli.DocGenerationFlag)
			if !ok || !df.TakesValue() {
				continue
			}
			usage := df.GetUsage()
			i := strings.IndexByte(usage, '`')
			j := strings.IndexByte(usage[i+1:], '`')
			if i < 0 || j < 0 {
				t.Errorf("%s --%s: no `PLACEHOLDER` in its usage %q", c.FullName(), f.Names()[0], usage)
				continue
			}
			if p := usage[i+1 : i+1+j]; !placeholderOK.MatchString(p) {
				t.Errorf("%s --%s: placeholder %q is not a value's name", c.FullName(), f.Names()[0], p)
			}
		}
		return nil
	})
}

// A verb's usage line names every flag it has (or says [options]): testbed up's
// lists --router, --rtt and --loss with the others.
func TestUsageListsEveryFlag(t *testing.T) {
	tree := setupTree(t)
	_ = tree.Walk(func(c *cli.Command) error {
		if c.UsageText == "" || c.Hidden {
			return nil
		}
		syn, _, _ := strings.Cut(c.UsageText, "\n\n")
		if strings.Contains(syn, "[options]") {
			return nil
		}
		words := strings.FieldsFunc(syn, func(r rune) bool { return strings.ContainsRune(" []|.", r) })
		for _, f := range c.VisibleFlags() {
			if f.Names()[0] == "help" || f.Names()[0] == "version" {
				continue
			}
			found := false
			for _, n := range f.Names() {
				found = found || slices.Contains(words, dashed(n))
			}
			if !found {
				t.Errorf("%s: usage %q does not name --%s", c.FullName(), syn, f.Names()[0])
			}
		}
		return nil
	})
}

// A cut past a run's end is refused naming the run's length, not summarised as
// rows of N/A: by summary, compare, and run before it connects to anything.
func TestCutBeyondTheRunsEnd(t *testing.T) {
	dir := t.TempDir()
	short := writeRun(t, dir, "short", 10, 2) // 14 s
	long := writeRun(t, dir, "long", 30, 2)   // 34 s
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"summary", "--cut", "2,12", short}, true},
		{[]string{"summary", "--cut", "2,-2", short}, true},
		{[]string{"summary", short, "--data-cutoff", "0,14"}, true},
		{[]string{"summary", "--cut", "20,30", short}, false},
		{[]string{"summary", "--cut", "14,0", short}, false},
		{[]string{"summary", "--cut", "2,20", short}, false},
		{[]string{"summary", "--cut", "10,-5", short}, false},
		{[]string{"summary", "--cut", "5,25", long, short}, false},
		{[]string{"compare", "--cut", "5,25", long, short}, false},
		{[]string{"compare", "--cut", "5,12", long, short}, true},
	} {
		name := strings.Join(c.args, " ")
		stdout, stderr, code := runApp(c.args...)
		switch {
		case c.ok && (code != 0 || !strings.Contains(stdout, "TCP download::1  ") && !strings.Contains(stdout, "TCP download::1 :")):
			t.Errorf("%s: exit %d\n%s\n%s", name, code, stdout, stderr)
		case !c.ok && (code == 0 || !strings.Contains(stderr, "short.bb.json.gz is a run of 14s") || stdout != ""):
			t.Errorf("%s: exit %d; want a warning naming the run's 14s, an exit not 0 and no table\n%s\n%s", name, code, stdout, stderr)
		}
	}
	// run knows its length before it starts: nothing is connected to (the inventory
	// does not exist) and the cut is refused.
	_, stderr, code := runApp("run", "-H", "/nonexistent/hosts.yaml", "-l", "10", "-d", "2", "--cut", "20,30", "tcp_4down")
	if code != exitUsage || !strings.Contains(stderr, "the run is 14s long") {
		t.Errorf("run --cut past its end: exit %d\n%s", code, stderr)
	}
}

// summary --meta --format json is JSON: each file's metadata.
func TestMetaJSON(t *testing.T) {
	dir := t.TempDir()
	a, b := writeRun(t, dir, "a", 10, 2), writeRun(t, dir, "b", 30, 2)
	stdout, stderr, code := runApp("summary", a, b, "--meta", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var got []struct {
		File     string `json:"file"`
		Metadata struct {
			Test        string  `json:"test"`
			TotalLength float64 `json:"total_length"`
			Note        string  `json:"note"`
			Hosts       []struct {
				Name string `json:"name"`
			} `json:"hosts"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if len(got) != 2 || got[0].File != a || got[1].Metadata.TotalLength != 34 || got[0].Metadata.Note != "a <note> & more" || len(got[0].Metadata.Hosts) != 1 {
		t.Errorf("%+v", got)
	}
	if stdout, _, code := runApp("summary", "--meta", a); code != 0 || !strings.Contains(stdout, "test tcp_1down") {
		t.Errorf("--meta text: exit %d\n%s", code, stdout)
	}
}

// tests and setups list as JSON too; text stays the default.
func TestListsAsJSON(t *testing.T) {
	stdout, stderr, code := runApp("tests", "--format", "json")
	if code != 0 {
		t.Fatalf("tests --format json: exit %d\n%s", code, stderr)
	}
	var ts []testJSON
	if err := json.Unmarshal([]byte(stdout), &ts); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	i := slices.IndexFunc(ts, func(x testJSON) bool { return x.Name == "tcp_ndown" })
	if i < 0 || ts[i].Description == "" || ts[i].Source == "" ||
		!slices.ContainsFunc(ts[i].Parameters, func(p parameterJSON) bool { return p.Name == "download_streams" && p.Default != "" }) {
		t.Errorf("tcp_ndown: %+v", ts)
	}
	if stdout, _, _ := runApp("tests", "tcp_ndown"); !strings.Contains(stdout, "--te download_streams=") {
		t.Errorf("tests: text by default:\n%s", stdout)
	}
	stdout, stderr, code = runApp("setups", "--format", "json")
	if code != 0 {
		t.Fatalf("setups --format json: exit %d\n%s", code, stderr)
	}
	var ss []setupJSON
	if err := json.Unmarshal([]byte(stdout), &ss); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	i = slices.IndexFunc(ss, func(x setupJSON) bool { return x.Name == "fq_codel" })
	if i < 0 || ss[i].Title == "" || !slices.Contains(ss[i].Qdiscs, "fq_codel") || !ss[i].Builtin || ss[i].Source != "built-in" {
		t.Errorf("fq_codel: %+v", ss)
	}
	if !slices.ContainsFunc(ss, func(x setupJSON) bool { return x.NeedsRate && x.Rate == "" }) {
		t.Errorf("no setup that needs a rate: %+v", ss)
	}
	stdout, stderr, code = runApp("setups", "--commands", "fq_codel", "--dev", "eth1", "--format", "json")
	var sc setupCommandsJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &sc) != nil || sc.Dev != "eth1" || len(sc.Commands) == 0 || !strings.Contains(sc.Commands[0], "eth1") {
		t.Errorf("setups --commands --format json: exit %d %+v\n%s\n%s", code, sc, stdout, stderr)
	}
	if stdout, _, _ := runApp("setups"); !strings.HasPrefix(stdout, "SETUP") {
		t.Errorf("setups: text by default:\n%s", stdout)
	}
}

// export --flent given a flent file, by its name or under a bloatbench file's,
// says it is one and what reads it, where reading it as a bloatbench file said
// "record 1: unexpected end of JSON input"; and writes nothing.
func TestExportOfAFlentFile(t *testing.T) {
	dir := t.TempDir()
	flentPath := filepath.Join(dir, "old.flent.gz")
	if _, stderr, code := runApp("export", "--flent", "-o", flentPath, writeRun(t, dir, "run", 4, 1)); code != 0 {
		t.Fatalf("export of a data file: exit %d\n%s", code, stderr)
	}
	data, err := os.ReadFile(flentPath)
	if err != nil {
		t.Fatal(err)
	}
	misnamed := filepath.Join(dir, "misnamed"+datafile.Ext)
	if err := os.WriteFile(misnamed, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{flentPath, misnamed} {
		out := filepath.Join(dir, "again.flent.gz")
		_, stderr, code := runApp("export", "--flent", "-o", out, in)
		if code != 1 {
			t.Errorf("export --flent %s: exit %d, want 1\n%s", in, code, stderr)
		}
		for _, want := range []string{in + " is a flent data file already", "flent -i " + in + " -f summary", "export --flent converts bloatbench's data files"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("export --flent %s: stderr does not say %q:\n%s", in, want, stderr)
			}
		}
		if strings.Contains(stderr, "JSON") {
			t.Errorf("export --flent %s: stderr speaks of JSON:\n%s", in, stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("export --flent %s wrote %s", in, out)
		}
	}
}
