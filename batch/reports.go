package batch

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
	"github.com/google/renameio/v2"
)

// The reports a lab's other tools read, written as a batch ends, after its summary
// and verdict (--resume included): JUnit XML for the CI that runs the nightly job
// (Options.JUnit, junit.go) and the Prometheus text format for node_exporter's
// textfile collector (Options.Metrics, metrics.go). Both are made from the result
// and the verdict the batch prints (Result, Result.Checks) and from its records.

// reportInput is what both reports are made of.
type reportInput struct {
	Batch    string // the batch's name
	Dir      string
	Baseline string
	Version  string
	Started  time.Time // the plan's: when the batch (not its resume) started
	Ended    time.Time
	Result   *Result
	// Judged says Checks are a verdict against a baseline. Without a baseline (or
	// with one the batch could not read) Checks are the tests x setups x
	// thresholds there was nothing to judge against, their Note saying so.
	Judged bool
	Checks []Check
	// Runs are the plan's runs, in the batch file's order, as they ended.
	Runs []runOutcome
	// Err is what stopped the batch's end (the summary or the verdict not written).
	Err error
}

// runOutcome is a run of the plan as its records leave it.
type runOutcome struct {
	Run     Run
	Class   string // the test and setup, as the checks of its test and setup name them
	Status  string // ok, failed, interrupted, incomplete (recorded ok, its data unreadable), notrun
	Error   string
	Data    string // the data file, relative to the batch folder
	Started time.Time
	Elapsed time.Duration
}

// writeReports writes the files Options.JUnit and Options.Metrics name, if any.
// finishErr is finish's error: the reports are written all the same and say it.
func (o *Options) writeReports(plan *Plan, res *Result, finishErr error) error {
	if o.JUnit == "" && o.Metrics == "" {
		return nil
	}
	in, err := o.reportInput(plan, res, finishErr)
	if err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	// Each report replaces the last one whole (renameio: a synced temporary file
	// beside it, renamed over it), so the textfile collector, or a CI reading a
	// report as a batch ends, never reads a file half written. The temporary
	// file's name does not end in .prom, so the collector skips it.
	if o.JUnit != "" {
		raw, err := junitXML(in)
		if err == nil {
			err = renameio.WriteFile(o.JUnit, raw, 0o644, renameio.WithTempDir(filepath.Dir(o.JUnit)))
		}
		if err != nil {
			return fmt.Errorf("junit: %w", err)
		}
	}
	if o.Metrics != "" {
		if err := renameio.WriteFile(o.Metrics, promText(in), 0o644, renameio.WithTempDir(filepath.Dir(o.Metrics))); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// reportInput reads the batch's records (and, for the JUnit file, its runs' data
// files, to name each run's test and setup as the verdict groups them).
func (o *Options) reportInput(plan *Plan, res *Result, finishErr error) (*reportInput, error) {
	in := &reportInput{Batch: o.Batch.Name, Dir: o.Dir, Baseline: o.Baseline, Version: plan.Version, Started: plan.Started,
		Ended: o.now(), Result: res, Err: finishErr}
	in.Judged = o.Baseline != "" && (finishErr == nil || res.Checks != nil)
	if in.Judged {
		in.Checks = res.Checks
	}
	if o.JUnit == "" && in.Judged {
		return in, nil // the metrics need no more
	}
	records, err := readRecords(o.Dir)
	if err != nil {
		return nil, err
	}
	// As comparedRuns reads them: a run's first ok record whose data file is
	// complete is the run.
	var current []report.Compared
	good := map[string]Record{}
	class := map[string]string{}
	last := map[string]Record{}
	for _, r := range records {
		last[r.ID] = r
		if r.Status != "ok" {
			continue
		}
		if _, seen := good[r.ID]; seen {
			continue
		}
		run, err := datafile.ReadContext(context.Background(), filepath.Join(o.Dir, r.Data))
		if err != nil || run.Incomplete {
			continue
		}
		c := report.CompareInput(run, report.Options{})
		current = append(current, c)
		good[r.ID] = r
		class[r.ID] = className(c.Summary.Test, c.Streams, c.Setup)
	}
	if !in.Judged {
		in.Checks = Judge(nil, current, o.Batch.Limits)
		why := "not judged: the batch ran without a baseline"
		if o.Baseline != "" {
			why = "not judged: the baseline could not be read (" + o.Baseline + ")"
		}
		for i := range in.Checks {
			in.Checks[i].Note = why
		}
	}
	// A run with no data file is named after a repetition of it that has one, or
	// else after its test, parameters and setup.
	sibling := map[string]string{}
	for _, r := range plan.Runs {
		if c, ok := class[r.ID]; ok {
			sibling[repless(r)] = c
		}
	}
	for _, r := range plan.Runs {
		out := runOutcome{Run: r, Status: "notrun", Class: class[r.ID]}
		if out.Class == "" {
			out.Class = sibling[repless(r)]
		}
		if out.Class == "" {
			out.Class = className(r.Test, params(r.Parameters), o.setupTitle(r.Setup))
		}
		rec, ok := good[r.ID]
		if ok {
			out.Status = "ok"
		} else if rec, ok = last[r.ID]; ok {
			out.Status, out.Error = rec.Status, rec.Error
			if rec.Status == "ok" {
				out.Status = "incomplete"
			}
		}
		if ok {
			out.Data, out.Started = rec.Data, rec.Started
			out.Elapsed = max(0, rec.Ended.Sub(rec.Started))
		}
		in.Runs = append(in.Runs, out)
	}
	return in, nil
}

// repless is a run's ID without its repetition: the same for each repetition.
func repless(r Run) string {
	r.Repetition = 0
	return r.id()
}

func params(ps map[string]string) string {
	keys := make([]string, 0, len(ps))
	for k := range ps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + ps[k]
	}
	return strings.Join(keys, ", ")
}

// setupTitle is what a run of the setup named name calls its setup in its data
// file (report.CompareInput): the setup's title, or without a setup the batch's name.
func (o *Options) setupTitle(name string) string {
	if name == "" {
		return o.Batch.Name
	}
	for _, s := range o.Batch.Setups {
		if s != nil && s.Name == name {
			if s.Title != "" {
				return s.Title
			}
			return s.Name
		}
	}
	return name
}

// className is a test case's class: the test (with its streams, as the verdict
// table writes it) and the setup. Jenkins reads a class name up to its last dot
// as a package: the test is the package, the setup the class, so dots within
// either are written as '_'.
func className(test, streams, setup string) string {
	if streams != "" {
		test += " (" + streams + ")"
	}
	if setup == "" {
		setup = "no setup"
	}
	part := func(s string) string { return strings.NewReplacer(".", "_", "\n", " ", "\r", " ").Replace(s) }
	return part(test) + "." + part(setup)
}

// visible writes what a report may not carry as it is, as text: invalid UTF-8 and
// the control characters XML 1.0 forbids (all of C0 but tab, newline and carriage
// return; U+FFFE and U+FFFF), and those it discourages (DEL, C1), as \xNN or \uNNNN.
// A host's error text with a terminal's escape sequences in it stays readable, and
// the XML valid.
func visible(s string) string {
	clean := func(r rune) bool {
		return r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r < 0x7f) || (r > 0x9f && r != 0xfffe && r != 0xffff && r != utf8.RuneError)
	}
	ok := true
	for _, r := range s {
		if !clean(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case clean(r) || r == utf8.RuneError: // a real U+FFFD
			b.WriteString(s[i : i+n])
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04X`, r)
		}
		i += n
	}
	return b.String()
}

// checkValue writes one of a check's numbers with its metric's decimals and units.
func checkValue(c Check, v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	dec := 2
	if m, ok := report.LookupMetric(c.Metric); ok {
		dec = m.Decimals
	}
	s := fmt.Sprintf("%.*f", dec, v)
	if c.Units != "" {
		s += " " + c.Units
	}
	return s
}
