package report

import (
	"bytes"
	"encoding/csv"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/golden"
)

// osc52 writes "evil" to the clipboard of a terminal that prints it raw.
const osc52 = "\x1b]52;c;ZXZpbA==\x07"

func TestEscapeText(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "Ping (ms) ICMP", "Ping (ms) ICMP"},
		{"utf-8 kept", "débit ↓ 東京", "débit ↓ 東京"},
		{"backslash kept", `C:\tmp`, `C:\tmp`},
		{"tab is a space", "a\tb", "a b"},
		{"osc 52", "host" + osc52, `host\x1b]52;c;ZXZpbA==\x07`},
		{"csi", "\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`},
		{"line breaks", "a\nb\r\nc", `a\nb\r\nc`},
		{"backspace and del", "ab\bc\x7f", `ab\x08c\x7f`},
		{"nul", "a\x00b", `a\x00b`},
		{"c1 as utf-8", "a\u009b2Jb\u0085", `a\u009b2Jb\u0085`},
		{"lone c1 byte", "a\x9b2J", `a\x9b2J`},
		{"invalid utf-8", "a\xff\xfeb", `a\xff\xfeb`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`},
		{"bidi isolates", "\u2066x\u2069", `\u2066x\u2069`},
		{"bidi marks and separators", "\u200fa\u2028b", `\u200fa\u2028b`},
		{"zero width joiner kept", "👩\u200d💻", "👩\u200d💻"},
		{"markdown untouched", "a|b *c* <i>", "a|b *c* <i>"},
		{"idempotent", `\x1b`, `\x1b`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := EscapeText(c.in); got != c.want {
				t.Errorf("EscapeText(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestEscapeMarkdown(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "TCP download::1", "TCP download::1"},
		{"intraword underscore kept", "tcp_4down", "tcp_4down"},
		{"emphasis underscores", "_x_ __y__", `\_x\_ \_\_y\_\_`},
		{"pipe", "a|b", `a\|b`},
		{"escaped pipe stays escaped", `a\|b`, `a\\\|b`},
		{"line breaks are spaces", "a\nb\r\nc\rd", "a b  c d"},
		{"html", `<img src=x onerror=alert(1)>`, `&lt;img src=x onerror=alert(1)&gt;`},
		{"entities", "&lt; &amp;", "&amp;lt; &amp;amp;"},
		{"inline markup", "*b* `c` [l](u) ~s~ #h", "\\*b\\* \\`c\\` \\[l\\](u) \\~s\\~ \\#h"},
		{"controls", "a" + osc52 + "\u202e", `a\x1b\]52;c;ZXZpbA==\x07\u202e`},
		{"tab", "a\tb", "a b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := EscapeMarkdown(c.in); got != c.want {
				t.Errorf("EscapeMarkdown(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
	if got := escapeMarkdown("tcp_ecn", true); got != `tcp\_ecn` {
		t.Errorf("every underscore: %q", got)
	}
}

func TestEscapeCSV(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "TCP download::1", "TCP download::1"},
		{"empty", "", ""},
		{"formula", "=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"},
		{"plus", "+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"},
		{"minus", "-2+3", "'-2+3"},
		{"at", "@SUM(A1)", "'@SUM(A1)"},
		{"leading tab", "\t=1", "'\t=1"},
		{"leading cr", "\r=1", `'\r=1`},
		{"negative number", "-3.2", "-3.2"},
		{"signed exponent", "+1e5", "+1e5"},
		{"percentage", "-62.28%", "-62.28%"},
		{"number", "41.45", "41.45"},
		{"inf is not a plain number", "-Inf", "'-Inf"},
		{"hex is not a plain number", "-0x1p-2", "'-0x1p-2"},
		{"equals inside", "a=b", "a=b"},
		{"controls", "a" + osc52, `a\x1b]52;c;ZXZpbA==\x07`},
		{"newline kept for quoting", "a\nb", "a\nb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := EscapeCSV(c.in); got != c.want {
				t.Errorf("EscapeCSV(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestEscapeError(t *testing.T) {
	if EscapeError(nil) != nil {
		t.Error("EscapeError(nil) is not nil")
	}
	err := EscapeError(&fs.PathError{Op: "open", Path: "x" + osc52, Err: fs.ErrNotExist})
	if strings.ContainsAny(err.Error(), "\x1b\x07") || !strings.Contains(err.Error(), `\x1b]52`) {
		t.Errorf("message %q", err.Error())
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("the escaped error no longer wraps the original")
	}
}

// hostileRun is syntheticRun with a terminal escape in everything a host or a file
// fills: the host's names and facts, the title, a series' name and units, the error.
func hostileRun(facts string) *datafile.Run {
	run := syntheticRun(1, true)
	run.Metadata.Title = "a|b\nc <img src=x onerror=alert(1)>"
	run.Metadata.Note = "note" + osc52
	run.Metadata.Hosts = []datafile.Host{{Role: "server", Name: "server" + osc52, Hostname: "srv" + osc52,
		Kernel: "6.1\u202e", Facts: map[string]string{"kernel.release" + osc52: facts, "sysctl.x": "1"}}}
	run.Metadata.Setup = &datafile.Setup{Name: "fq" + osc52, Title: "FQ\x1b[2J", Source: "built-in",
		Devices: []datafile.SetupDevice{{Host: "server", Dev: "eth0", Commands: []string{"tc qdisc\x1b]0;title\x07"}}}}
	run.Error = "agent on host srv" + osc52 + ": connection lost"
	for i, se := range run.Series {
		if se.Name == "TCP download::1" {
			name := "=HYPERLINK(\"http://x\") | `x` *y*" + osc52
			run.Series[i].Name, run.Series[i].Units = name, "Mbits/s\x9b"
			run.Samples[name] = run.Samples[se.Name]
			delete(run.Samples, se.Name)
		}
	}
	return run
}

// noControls fails the test where out holds a byte a terminal would act on.
func noControls(t *testing.T, what string, out []byte) {
	t.Helper()
	for _, c := range []string{"\x1b", "\x07", "\x9b", "\u009b", "\u202e", "\r"} {
		if bytes.Contains(out, []byte(c)) {
			t.Errorf("%s holds %q raw:\n%s", what, c, out)
		}
	}
}

func TestTextOutputEscapesControls(t *testing.T) {
	run := hostileRun("6.1")
	var b bytes.Buffer
	if err := Write(&b, "text", []Summary{Summarize(run)}, Columns{P99: true}); err != nil {
		t.Fatal(err)
	}
	noControls(t, "summary", b.Bytes())
	if !bytes.Contains(b.Bytes(), []byte(`srv\x1b]52;c;ZXZpbA==\x07`)) {
		t.Errorf("the host name is not shown escaped:\n%s", b.Bytes())
	}
	golden.Check(t, "hostile.text.golden", b.Bytes())

	b.Reset()
	WriteMeta(&b, "x"+osc52+".bb.json.gz", run)
	noControls(t, "--meta", b.Bytes())
	if !bytes.Contains(b.Bytes(), []byte(`hostname srv\x1b]52;c;ZXZpbA==\x07,`)) {
		t.Errorf("the host name is not shown escaped:\n%s", b.Bytes())
	}
	golden.Check(t, "hostile.meta.golden", b.Bytes())

	b.Reset()
	WriteFactDiffs(&b, []*datafile.Run{run, hostileRun("7.3" + osc52)}, false)
	noControls(t, "fact differences", b.Bytes())
	if !strings.Contains(b.String(), `server\x1b]52;c;ZXZpbA==\x07: kernel.release\x1b]52`) {
		t.Errorf("fact differences:\n%s", b.Bytes())
	}

	b.Reset()
	cs := Compare([]Compared{CompareInput(run, Options{}), CompareInput(hostileRun("6.1"), Options{})}, "cond"+osc52)
	if err := WriteCompare(&b, "text", cs, Columns{}); err != nil {
		t.Fatal(err)
	}
	noControls(t, "compare", b.Bytes())
}

func TestMarkdownOutputIsInert(t *testing.T) {
	run := hostileRun("6.1")
	var b bytes.Buffer
	if err := Write(&b, "markdown", []Summary{Summarize(run)}, Columns{P99: true}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	noControls(t, "markdown summary", b.Bytes())
	checkMarkdownTable(t, out, 1)
	golden.Check(t, "hostile.markdown.golden", b.Bytes())

	b.Reset()
	cs := Compare([]Compared{CompareInput(run, Options{}), CompareInput(hostileRun("6.1"), Options{})}, "cond | <b>x</b>\n# h")
	if err := WriteCompare(&b, "markdown", cs, Columns{}); err != nil {
		t.Fatal(err)
	}
	noControls(t, "markdown compare", b.Bytes())
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "### cond \\| &lt;b&gt;x&lt;/b&gt; \\# h") {
			t.Errorf("a heading line the files made: %q", l)
		}
	}
	checkMarkdownTable(t, b.String(), -1)

	b.Reset()
	WriteFactDiffs(&b, []*datafile.Run{run, hostileRun("<img src=x onerror=alert(1)>|\n- item")}, true)
	if strings.Contains(b.String(), "<img") || strings.Count(b.String(), "\n- ") != 1 {
		t.Errorf("fact differences:\n%s", b.String())
	}
}

// checkMarkdownTable checks each table of out row by row: every row has as many
// unescaped | as the header, and the summary's heading is one line. With tables >= 0
// it also wants that many tables.
func checkMarkdownTable(t *testing.T, out string, tables int) {
	t.Helper()
	if strings.Contains(out, "<img") || strings.Contains(out, "<b>") {
		t.Errorf("raw HTML in the markdown:\n%s", out)
	}
	n, cells := 0, -1
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "|") {
			cells = -1
			continue
		}
		p := unescapedPipes(l)
		if cells < 0 {
			n++
			cells = p
		} else if p != cells {
			t.Errorf("row %q has %d cell borders, the header %d", l, p, cells)
		}
	}
	if tables >= 0 && n != tables {
		t.Errorf("%d tables, want %d:\n%s", n, tables, out)
	}
	if strings.HasPrefix(out, "**Summary of") && !strings.HasSuffix(strings.SplitN(out, "\n", 2)[0], ":**") {
		t.Errorf("the heading is not one line:\n%s", out)
	}
}

// unescapedPipes counts the | of a line not escaped by a backslash.
func unescapedPipes(l string) int {
	n, backslashes := 0, 0
	for i := 0; i < len(l); i++ {
		switch l[i] {
		case '\\':
			backslashes++
			continue
		case '|':
			if backslashes%2 == 0 {
				n++
			}
		}
		backslashes = 0
	}
	return n
}

func TestCSVOutputGuardsFormulas(t *testing.T) {
	run := hostileRun("6.1")
	var b bytes.Buffer
	if err := Write(&b, "csv", []Summary{Summarize(run)}, Columns{}); err != nil {
		t.Fatal(err)
	}
	noControls(t, "csv", b.Bytes())
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not read back: %v", err)
	}
	found := false
	for _, r := range recs[1:] {
		if len(r) != len(recs[0]) {
			t.Errorf("record %q has %d fields, the header %d", r, len(r), len(recs[0]))
		}
		if strings.Contains(r[4], "HYPERLINK") {
			found = true
			if !strings.HasPrefix(r[4], "'=HYPERLINK(") {
				t.Errorf("series cell %q is a formula", r[4])
			}
		}
		for _, c := range r {
			if c != "" && strings.ContainsRune("=+-@\t\r", rune(c[0])) {
				t.Errorf("cell %q starts a formula", c)
			}
		}
	}
	if !found {
		t.Error("no row of the renamed series")
	}

	// A number a file gives, a negative one, stays a number.
	b.Reset()
	neg := Summary{Test: "t", Title: "-3.2", Rows: []Row{{Name: "-3.2", Avg: -3.2, Median: -1e-7, P99: 1, Units: "+1e5", Points: 1}}}
	if err := Write(&b, "csv", []Summary{neg}, Columns{}); err != nil {
		t.Fatal(err)
	}
	if want := "t,-3.2,,false,-3.2,-3.2,-1e-07,1,+1e5,1\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("numbers changed:\n%s\nwant a last line %q", b.String(), want)
	}
}

func TestJSONOutputEscapes(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, "json", []Summary{Summarize(hostileRun("6.1"))}, Columns{}); err != nil {
		t.Fatal(err)
	}
	noControls(t, "json", b.Bytes())
	if bytes.Contains(b.Bytes(), []byte("<img")) || !bytes.Contains(b.Bytes(), []byte(`\u001b]52`)) {
		t.Errorf("json:\n%s", b.Bytes())
	}
}
