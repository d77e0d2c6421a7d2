package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	extast "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"

	"github.com/bloatbench/bloatbench/datafile"
)

// markdownTableRows parses src as GitHub's markdown does (GFM tables) and returns
// how many table rows (headers included) it holds, and how many of its lines are
// table lines (start with |): the two differ when a line after a table (a legend, a
// note) is taken into it as a row.
func markdownTableRows(t *testing.T, src []byte) (rows, pipeLines, tables int) {
	t.Helper()
	doc := goldmark.New(goldmark.WithExtensions(extension.Table)).Parser().Parse(text.NewReader(src))
	ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n.Kind() {
		case extast.KindTable:
			tables++
		case extast.KindTableHeader, extast.KindTableRow:
			rows++
		}
		return ast.WalkContinue, nil
	})
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, "|") && !strings.HasPrefix(l, "|---") {
			pipeLines++
		}
	}
	return rows, pipeLines, tables
}

// Compare's markdown, with one run a setup and with repetitions (the deltas table
// and its legend of setup letters, the notes): every table renders as a table, and
// nothing after one is read into it.
func TestCompareMarkdownRendersAsTables(t *testing.T) {
	var reps []*datafile.Run
	for rep := 0; rep < 6; rep++ {
		reps = append(reps, setupRun("PFIFO", 40, []float64{25, 25, 25, 25}, 8, rep), setupRun("DUALPI2", 2, []float64{30, 20, 25, 25}, 0, rep))
	}
	for name, cs := range map[string][]Comparison{
		"single":   Compare(compared(setupRun("FQ_CODEL", 1.2, []float64{235, 235}, 0, 0), setupRun("CAKE", 1.3, []float64{233, 236}, 0, 0)), "1gigE"),
		"repeated": Compare(compared(reps...), "htb 100mbit"),
	} {
		var b bytes.Buffer
		if err := WriteCompare(&b, "markdown", cs, Columns{}); err != nil {
			t.Fatal(err)
		}
		rows, lines, tables := markdownTableRows(t, b.Bytes())
		if tables < 3 || rows != lines {
			t.Errorf("%s: %d tables, %d rows parsed from %d table lines:\n%s", name, tables, rows, lines, b.String())
		}
	}
}
