package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteCompare writes comparisons in the named format. Text is the cover letter's:
// a heading per test and condition, one summary block per setup, then the setups
// side by side and, with repetitions, the A/B deltas with their significance. It has
// no tabs and stays within 78 columns where the setups' names allow. What the files
// say (setup and series names, headings, notes) is escaped for the format, as in
// WriteText and WriteMarkdown.
func WriteCompare(w io.Writer, format string, cs []Comparison, cols Columns) error {
	if err := CheckFormat(format); err != nil {
		return err
	}
	switch format {
	case "json":
		return writeCompareJSON(w, cs)
	case "csv":
		return writeCompareCSV(w, cs)
	}
	md := format == "markdown" || format == "md"
	esc := escaperFor(md)
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		if md {
			fmt.Fprintf(&b, "### %s\n\n", esc(c.Heading))
		} else {
			fmt.Fprintf(&b, "%s\n", esc(c.Heading))
		}
		for _, s := range c.Setups {
			var blk strings.Builder
			if md {
				if err := WriteMarkdown(&blk, s.Runs[0], cols); err != nil {
					return err
				}
				b.WriteString(blk.String())
			} else {
				if err := WriteText(&blk, s.Runs[0], cols); err != nil {
					return err
				}
				lines := strings.Split(strings.TrimRight(blk.String(), "\n"), "\n")
				fmt.Fprintf(&b, " - %s\n", lines[0])
				for _, l := range lines[1:] {
					fmt.Fprintf(&b, "   %s\n", l)
				}
			}
			if len(s.Runs) > 1 {
				// In markdown a paragraph of its own: a line right under a table is
				// one more of its rows to GitHub.
				// The other runs' warnings are said to be there, as the
				// summary's own are printed in each format.
				later := laterWarnings(s.Runs)
				if md {
					fmt.Fprintf(&b, "\n(run 1 of %d; the tables below use all %d)\n", len(s.Runs), len(s.Runs))
					if later != "" {
						fmt.Fprintf(&b, "\n_Warning: %s_\n", later)
					}
				} else {
					fmt.Fprintf(&b, "   (run 1 of %d; the tables below use all %d)\n", len(s.Runs), len(s.Runs))
					if later != "" {
						fmt.Fprintf(&b, "   Warning: %s\n", later)
					}
				}
			}
			b.WriteString("\n")
		}
		var n notes
		sideBySide(&b, c, &n, md)
		if c.Repeated() && len(c.Pairs) > 0 {
			b.WriteString("\n")
			deltas(&b, c, &n, md)
		}
		if len(n.list) > 0 {
			b.WriteString("\n")
			for k, note := range n.list {
				fmt.Fprintf(&b, "[%d] %s\n", k+1, esc(note))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// laterWarnings says which of a setup's runs after the first, whose summary
// is the only one printed, have warnings of their own: a window-limited flow or
// a misplaced queue in run 4 moves the medians the tables show as much as in
// run 1. Only numbers: nothing of a file's to escape. "" when none has.
func laterWarnings(runs []Summary) string {
	var with []string
	for i, r := range runs[1:] {
		if len(r.Warnings) > 0 {
			with = append(with, fmt.Sprint(i+2))
		}
	}
	if len(with) == 0 {
		return ""
	}
	if len(with) == 1 {
		return "run " + with[0] + " has warnings of its own (bloatbench summary prints them)"
	}
	return "runs " + strings.Join(with[:len(with)-1], ", ") + " and " + with[len(with)-1] + " have warnings of their own (bloatbench summary prints them)"
}

func metricLabel(m Metric) string {
	// A metric named for a flent row may carry its units already: "Ping (ms) ICMP".
	if m.Units == "" || strings.Contains(m.Name, "("+m.Units+")") {
		return m.Name
	}
	return m.Name + " (" + m.Units + ")"
}

// cellText is a cell as printed: the value, or with repetitions the median of the
// runs and its 95% interval as a percentage of it.
func cellText(c Cell, decimals int, repeated bool, n *notes) string {
	if len(c.Values) == 0 {
		return "N/A"
	}
	v := fmt.Sprintf("%.*f", decimals, c.Center)
	if !repeated {
		return v
	}
	r := c.PctRangeString()
	return fmt.Sprintf("%s ±%s%s", v, r, n.mark(c.Warnings))
}

// table lays out a header and rows, the first column left-aligned, the others right.
// Every cell is escaped here, where the names from the files become output; the
// text widths are of the escaped cells.
func table(b *strings.Builder, header []string, rows [][]string, md bool) {
	esc := escaperFor(md)
	escaped := func(r []string) []string {
		out := make([]string, len(r))
		for i, c := range r {
			out[i] = esc(c)
		}
		return out
	}
	header = escaped(header)
	for i, r := range rows {
		rows[i] = escaped(r)
	}
	if md {
		b.WriteString("| " + strings.Join(header, " | ") + " |\n|---|" + strings.Repeat("---:|", len(header)-1) + "\n")
		for _, r := range rows {
			b.WriteString("| " + strings.Join(r, " | ") + " |\n")
		}
		return
	}
	width := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(r []string) {
		var l strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i == 0 {
				l.WriteString(" " + c + pad)
			} else {
				l.WriteString("  " + pad + c)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
}

func sideBySide(b *strings.Builder, c Comparison, n *notes, md bool) {
	title := "Side by side"
	if c.Repeated() {
		title += fmt.Sprintf(" (median of the runs, ±%.0f%% confidence interval)", confidence*100)
	}
	if md {
		fmt.Fprintf(b, "**%s:**\n\n", title)
	} else {
		fmt.Fprintf(b, "%s:\n", title)
	}
	header := []string{"metric"}
	for _, s := range c.Setups {
		h := s.Name
		if c.Repeated() {
			h += fmt.Sprintf(" (n=%d)", len(s.Runs))
		}
		header = append(header, h)
	}
	var rows [][]string
	for i, m := range c.Metrics {
		r := []string{metricLabel(m)}
		for _, cell := range c.Cells[i] {
			r = append(r, cellText(cell, m.Decimals, c.Repeated(), n))
		}
		rows = append(rows, r)
	}
	table(b, header, rows, md)
}

func deltas(b *strings.Builder, c Comparison, n *notes, md bool) {
	title := fmt.Sprintf("A/B deltas (Mann-Whitney U test; ~ = no significant difference at alpha %.2f)", thresholds.CompareAlpha)
	if md {
		fmt.Fprintf(b, "**%s:**\n\n", title)
	} else {
		fmt.Fprintf(b, "%s:\n", title)
	}
	header := []string{"metric", "setups", "delta", "p", "runs"}
	var rows [][]string
	for i, m := range c.Metrics {
		for k, d := range c.Deltas[i] {
			label := ""
			if k == 0 {
				label = metricLabel(m)
			}
			pair := fmt.Sprintf("%s vs %s", letter(d.B), letter(d.A))
			if d.Text == "?" {
				rows = append(rows, []string{label, pair, "?", "", ""})
				continue
			}
			runs := fmt.Sprintf("%d+%d", d.N1, d.N2)
			rows = append(rows, []string{label, pair, d.Text, fmt.Sprintf("%.3f", d.P), runs + n.mark(d.Warnings)})
		}
	}
	table(b, header, rows, md)
	var key []string
	for i, s := range c.Setups {
		key = append(key, letter(i)+" = "+s.Name)
	}
	if md {
		b.WriteString("\n") // the legend is no row of the table above it
	}
	fmt.Fprintf(b, "%s\n", escaperFor(md)(strings.Join(key, ", ")))
}

// letter names setups in the deltas table, whose columns would not fit with names.
func letter(i int) string { return string(rune('A' + i%26)) }

func writeCompareCSV(w io.Writer, cs []Comparison) error {
	c := csv.NewWriter(w)
	writeCSVRow(c, "heading", "test", "metric", "units", "setup", "vs", "runs", "median", "lo", "hi", "delta", "p")
	for _, cmp := range cs {
		for i, m := range cmp.Metrics {
			for j, cell := range cmp.Cells[i] {
				writeCSVRow(c, cmp.Heading, cmp.Test, m.Name, m.Units, cmp.Setups[j].Name, "", fmt.Sprint(len(cell.Values)),
					csvNum(cell.Center), csvNum(finite(cell.Lo)), csvNum(finite(cell.Hi)), "", "")
			}
			if !cmp.Repeated() {
				continue
			}
			for _, d := range cmp.Deltas[i] {
				writeCSVRow(c, cmp.Heading, cmp.Test, m.Name, m.Units, cmp.Setups[d.B].Name, cmp.Setups[d.A].Name,
					fmt.Sprintf("%d+%d", d.N1, d.N2), "", "", "", d.Text, csvNum(d.P))
			}
		}
	}
	c.Flush()
	return c.Error()
}

func finite(x float64) float64 {
	if math.IsInf(x, 0) {
		return math.NaN()
	}
	return x
}

type jsonCell struct {
	Setup  string    `json:"setup"`
	Values []float64 `json:"values"`
	Median *float64  `json:"median"`
	Lo     *float64  `json:"lo"` // null when the runs are too few for an interval
	Hi     *float64  `json:"hi"`
}

type jsonDelta struct {
	Setup       string  `json:"setup"`
	Versus      string  `json:"versus"`
	Delta       string  `json:"delta"`
	P           float64 `json:"p"`
	N1          int     `json:"n1"`
	N2          int     `json:"n2"`
	Significant bool    `json:"significant"`
}

type jsonMetric struct {
	Metric string      `json:"metric"`
	Units  string      `json:"units"`
	Cells  []jsonCell  `json:"cells"`
	Deltas []jsonDelta `json:"deltas,omitempty"`
}

type jsonComparison struct {
	Heading string       `json:"heading"`
	Test    string       `json:"test"`
	Runs    []jsonRun    `json:"runs"`
	Metrics []jsonMetric `json:"metrics"`
}

func writeCompareJSON(w io.Writer, cs []Comparison) error {
	out := struct {
		Comparisons []jsonComparison `json:"comparisons"`
	}{Comparisons: []jsonComparison{}}
	for _, c := range cs {
		jc := jsonComparison{Heading: c.Heading, Test: c.Test, Runs: []jsonRun{}, Metrics: []jsonMetric{}}
		for _, s := range c.Setups {
			jc.Runs = append(jc.Runs, jsonRuns(s.Runs)...)
		}
		for i, m := range c.Metrics {
			jm := jsonMetric{Metric: m.Name, Units: m.Units}
			for j, cell := range c.Cells[i] {
				jm.Cells = append(jm.Cells, jsonCell{Setup: c.Setups[j].Name, Values: cell.Values,
					Median: ptr(cell.Center), Lo: ptr(finite(cell.Lo)), Hi: ptr(finite(cell.Hi))})
			}
			for _, d := range c.Deltas[i] {
				jm.Deltas = append(jm.Deltas, jsonDelta{Setup: c.Setups[d.B].Name, Versus: c.Setups[d.A].Name,
					Delta: d.Text, P: d.P, N1: d.N1, N2: d.N2, Significant: d.Significant()})
			}
			jc.Metrics = append(jc.Metrics, jm)
		}
		out.Comparisons = append(out.Comparisons, jc)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
