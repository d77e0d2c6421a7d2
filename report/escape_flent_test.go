// An external test: flentfile imports report, so reading a flent file in a test of
// report needs a package of its own.
package report_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	extast "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/text"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/flentfile"
	"github.com/bloatbench/bloatbench/report"
)

const hostileTitle = "a|b\nc <img src=x onerror=alert(1)>"

// hostileFlentFile writes a flent file, as flentfile exports one, whose TITLE holds
// a |, a line break and an HTML element with a script.
func hostileFlentFile(t *testing.T) string {
	t.Helper()
	start := time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	t0 := datafile.Unix(start)
	run := &datafile.Run{Metadata: datafile.Metadata{Test: "tcp_1down", Title: "x", StartTime: start, T0: t0,
		Length: 4, Delay: 1, Step: 0.2, TotalLength: 6}, Samples: map[string][]datafile.Sample{}}
	se := datafile.Series{Name: "TCP download::1", Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client", Direction: "download", Flow: 1}
	ping := datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms", Host: "client"}
	run.Series = []datafile.Series{ping, se}
	for k := 1; k <= 25; k++ {
		end := t0 + 1 + float64(k)*0.2
		run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: end, Dur: 0.2, V: 20, Bytes: 500000})
		run.Samples[ping.Name] = append(run.Samples[ping.Name], datafile.Sample{T: end + 0.01, V: 10, Seq: k})
	}
	dir := t.TempDir()
	path, err := flentfile.Export(run, filepath.Join(dir, "x"+flentfile.Ext))
	if err != nil {
		t.Fatal(err)
	}
	// Flent's own writer puts the title there; ours is rewritten to the hostile one.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.NewDecoder(zr).Decode(&d); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d["metadata"].(map[string]any)["TITLE"] = hostileTitle
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if err := json.NewEncoder(zw).Encode(d); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The acceptance of inert markdown: --format markdown of a flent file whose title
// holds |, a line break and <img onerror=...> is one heading and a well-formed table,
// as a real markdown parser (goldmark with GFM tables) reads it.
func TestMarkdownOfHostileFlentTitle(t *testing.T) {
	run, err := flentfile.Read(hostileFlentFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if run.Metadata.Title != hostileTitle {
		t.Fatalf("the flent file's title reads as %q", run.Metadata.Title)
	}
	s := report.Summarize(run)
	var b bytes.Buffer
	if err := report.Write(&b, "markdown", []report.Summary{s}, report.Columns{P99: true}); err != nil {
		t.Fatal(err)
	}
	src := b.Bytes()

	md := goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough),
		// Unsafe renders raw HTML as it is, as GitHub's sanitizer would let some through:
		// only escaping keeps the <img> out.
		goldmark.WithRendererOptions(html.WithUnsafe()))
	doc := md.Parser().Parse(text.NewReader(src))
	var tables, rows, headings int
	var cellsPerRow []int
	err = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n.Kind() {
		case extast.KindTable:
			tables++
		case extast.KindTableHeader, extast.KindTableRow:
			rows++
			cellsPerRow = append(cellsPerRow, n.ChildCount())
		case ast.KindRawHTML, ast.KindHTMLBlock:
			t.Errorf("raw HTML in the markdown:\n%s", src)
		case ast.KindText:
			if txt := n.(*ast.Text); txt.SoftLineBreak() || txt.HardLineBreak() {
				t.Errorf("a line break after %q: the title split a line", txt.Value(src))
			}
		case ast.KindParagraph:
			if n.Parent() == doc && strings.Contains(string(n.Lines().Value(src)), "Summary of") {
				headings++
			}
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tables != 1 || headings != 1 {
		t.Errorf("%d tables and %d headings, want one of each:\n%s", tables, headings, src)
	}
	if want := len(s.Rows) + 1; rows != want {
		t.Errorf("%d table rows, want %d (the header and a row per series):\n%s", rows, want, src)
	}
	for i, n := range cellsPerRow {
		if n != 6 {
			t.Errorf("row %d has %d cells, want 6:\n%s", i, n, src)
		}
	}
	var out bytes.Buffer
	if err := md.Convert(src, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "<img") || !strings.Contains(out.String(), "&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("the title's HTML is not inert text:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "a|b c") {
		t.Errorf("the title's | and line break do not read as text:\n%s", out.String())
	}
}
