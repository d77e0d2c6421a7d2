package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Formats a summary can be written in.
var Formats = []string{"text", "json", "markdown", "csv"}

// Columns chooses optional columns.
type Columns struct {
	P99 bool // the 99th percentile, after the median
}

// CheckFormat says whether format is one Write knows.
func CheckFormat(format string) error {
	switch format {
	case "text", "", "json", "markdown", "md", "csv":
		return nil
	}
	return fmt.Errorf("unknown format %q: use one of %s", format, strings.Join(Formats, ", "))
}

// Write writes summaries in the named format.
func Write(w io.Writer, format string, sums []Summary, cols Columns) error {
	if err := CheckFormat(format); err != nil {
		return err
	}
	switch format {
	case "json":
		return WriteJSON(w, sums)
	case "csv":
		return WriteCSV(w, sums)
	}
	for i, s := range sums {
		if i > 0 {
			fmt.Fprintln(w)
		}
		var err error
		if format == "markdown" || format == "md" {
			err = WriteMarkdown(w, s, cols)
		} else {
			err = WriteText(w, s, cols)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// heading is the table's first line, flent's words.
func heading(s Summary) string {
	h := fmt.Sprintf("Summary of %s run '%s'", s.Test, s.Title)
	if s.Time != "" {
		h += fmt.Sprintf(" (at %s)", s.Time)
	}
	switch {
	case s.Cut == nil:
	case s.Cut[1] == 0:
		h += fmt.Sprintf(" from %gs to the end", s.Cut[0])
	case s.Cut[1] < 0:
		h += fmt.Sprintf(" from %gs to %gs before the end", s.Cut[0], -s.Cut[1])
	default:
		h += fmt.Sprintf(" from %gs to %gs", s.Cut[0], s.Cut[1])
	}
	return h + ":"
}

func num(x float64) string {
	if math.IsNaN(x) {
		return "N/A"
	}
	return fmt.Sprintf("%.2f", x)
}

// WriteText writes the summary in the layout of flent's text summary, the one kernel
// patch cover letters carry: names padded to the longest, two-decimal avg and median,
// units, and the number of data points. What the file says (title, names, units,
// error, warnings) is escaped for the terminal.
func WriteText(w io.Writer, s Summary, cols Columns) error {
	var b strings.Builder
	b.WriteString(EscapeText(heading(s)) + "\n")
	if s.Incomplete {
		fmt.Fprintf(&b, " INCOMPLETE: %s\n", EscapeText(s.Error))
	}
	// Units take flent's seven columns, more where a row's are longer
	// ("transactions/s"), so that the counts stay in one column. Widths are of the
	// escaped names, in runes, as fmt pads.
	names, units := make([]string, len(s.Rows)), make([]string, len(s.Rows))
	width, unitsWidth := 0, 7
	for i, r := range s.Rows {
		names[i], units[i] = EscapeText(r.Name), EscapeText(r.Units)
		width = max(width, utf8.RuneCountInString(names[i]))
		unitsWidth = max(unitsWidth, utf8.RuneCountInString(units[i]))
	}
	p99Head := ""
	if cols.P99 {
		p99Head = "          p99"
	}
	fmt.Fprintf(&b, "%s%s       median%s%s# data pts\n", strings.Repeat(" ", width+11), "avg", p99Head, strings.Repeat(" ", unitsWidth))
	for i, r := range s.Rows {
		p99 := ""
		if cols.P99 {
			p99 = fmt.Sprintf(" %12s", num(r.P99))
		}
		fmt.Fprintf(&b, " %-*s : %10s %12s%s %-*s%8d\n", width, names[i], num(r.Avg), num(r.Median), p99, unitsWidth, units[i], r.Points)
	}
	if s.Delay != nil {
		fmt.Fprintf(&b, " %s\n", s.Delay.Text())
	}
	if q := QueuesText(s.Queues); q != "" {
		for _, line := range strings.Split(q, "\n") {
			fmt.Fprintf(&b, " %s\n", EscapeText(line))
		}
	}
	for _, warning := range s.Warnings {
		fmt.Fprintf(&b, " Warning: %s\n", EscapeText(warning))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the summary as a markdown table. What the file says is
// escaped as inline markdown: a title with a line break, a | or HTML in it still
// makes one heading line and a well-formed table, and no element.
func WriteMarkdown(w io.Writer, s Summary, cols Columns) error {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**\n\n", EscapeMarkdown(heading(s)))
	if s.Incomplete {
		fmt.Fprintf(&b, "_Incomplete: %s_\n\n", EscapeMarkdown(s.Error))
	}
	if cols.P99 {
		b.WriteString("| series | avg | median | p99 | units | # data pts |\n|---|---:|---:|---:|---|---:|\n")
	} else {
		b.WriteString("| series | avg | median | units | # data pts |\n|---|---:|---:|---|---:|\n")
	}
	for _, r := range s.Rows {
		p99 := ""
		if cols.P99 {
			p99 = " " + num(r.P99) + " |"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |%s %s | %d |\n", EscapeMarkdown(r.Name), num(r.Avg), num(r.Median), p99, EscapeMarkdown(r.Units), r.Points)
	}
	if s.Delay != nil {
		// After a blank line: a line right under a table is one of its rows.
		fmt.Fprintf(&b, "\n%s\n", EscapeMarkdown(s.Delay.Text()))
	}
	if q := QueuesText(s.Queues); q != "" {
		// A paragraph each: lines one under another would run together.
		for _, line := range strings.Split(q, "\n") {
			fmt.Fprintf(&b, "\n%s\n", EscapeMarkdown(line))
		}
	}
	if len(s.Warnings) > 0 {
		b.WriteString("\n")
		for _, warning := range s.Warnings {
			fmt.Fprintf(&b, "_Warning: %s_\n", EscapeMarkdown(warning))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCSV writes one line per row of every summary, with the run in front.
func WriteCSV(w io.Writer, sums []Summary) error {
	c := csv.NewWriter(w)
	writeCSVRow(c, "test", "title", "time", "incomplete", "series", "avg", "median", "p99", "units", "points")
	for _, s := range sums {
		for _, r := range s.Rows {
			writeCSVRow(c, s.Test, s.Title, s.rfc3339(), fmt.Sprint(s.Incomplete), r.Name,
				csvNum(r.Avg), csvNum(r.Median), csvNum(r.P99), r.Units, fmt.Sprint(r.Points))
		}
	}
	c.Flush()
	return c.Error()
}

// writeCSVRow writes one record with every cell through EscapeCSV, ours too: which
// cells a file fills is not worth tracking for the cost of missing one, and our
// numbers pass through unchanged. A write error is kept by c, which the writers
// check after Flush.
func writeCSVRow(c *csv.Writer, cells ...string) {
	for i, cell := range cells {
		cells[i] = EscapeCSV(cell)
	}
	c.Write(cells)
}

func csvNum(x float64) string {
	if math.IsNaN(x) {
		return ""
	}
	return fmt.Sprintf("%.6g", x)
}

type jsonRow struct {
	Name   string   `json:"name"`
	Avg    *float64 `json:"avg"`
	Median *float64 `json:"median"`
	P99    *float64 `json:"p99"`
	Points int      `json:"points"`
	Units  string   `json:"units"`
}

type jsonRun struct {
	Test       string    `json:"test"`
	Title      string    `json:"title"`
	Time       string    `json:"time"`
	File       string    `json:"file,omitempty"`
	Incomplete bool      `json:"incomplete"`
	Error      string    `json:"error,omitempty"`
	Cut        []float64 `json:"cut,omitempty"`
	Rows       []jsonRow `json:"rows"`
	Warnings   []string  `json:"warnings,omitempty"`
	// DelayAttribution is where the loaded ping's delay went.
	DelayAttribution *DelayAttribution `json:"delay_attribution,omitempty"`
	// Queues are the tx queues each probe and flow went through.
	Queues []QueueUse `json:"queues,omitempty"`
}

// WriteJSON writes {"runs":[...]}; a value with no data points is null.
func WriteJSON(w io.Writer, sums []Summary) error {
	out := struct {
		Runs []jsonRun `json:"runs"`
	}{Runs: jsonRuns(sums)}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func jsonRuns(sums []Summary) []jsonRun {
	runs := []jsonRun{}
	for _, s := range sums {
		jr := jsonRun{Test: s.Test, Title: s.Title, Time: s.rfc3339(), File: s.File, Incomplete: s.Incomplete, Error: s.Error, Rows: []jsonRow{}, Warnings: s.Warnings, DelayAttribution: s.Delay, Queues: s.Queues}
		if s.Cut != nil {
			jr.Cut = s.Cut[:]
		}
		for _, r := range s.Rows {
			jr.Rows = append(jr.Rows, jsonRow{Name: r.Name, Avg: ptr(r.Avg), Median: ptr(r.Median), P99: ptr(r.P99), Points: r.Points, Units: r.Units})
		}
		runs = append(runs, jr)
	}
	return runs
}

func ptr(x float64) *float64 {
	if math.IsNaN(x) {
		return nil
	}
	return &x
}

// rfc3339 is the run's start with its zone, "" when unknown.
func (s Summary) rfc3339() string {
	if s.Start.IsZero() {
		return ""
	}
	return s.Start.Format(time.RFC3339Nano)
}
