package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

func formatFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "output format: " + strings.Join(report.Formats, ", ")}
}

// reportFlags are the flags of every verb that prints tables.
func reportFlags() []cli.Flag {
	return []cli.Flag{
		formatFlag(),
		&cli.StringFlag{Name: "cut", Usage: "summarise only START,END seconds into each run, as flent's --data-cutoff: ends excluded, an END of 0 or less counts back from the run's end; e.g. 5,25 or 5,-5"},
		&cli.BoolFlag{Name: "p99", Usage: "add the 99th percentile column"},
		&cli.StringFlag{Name: "flows", Value: "all", Usage: "all: a row per TCP flow; summary: one row per direction over the flows (their averages' mean and median, the flows as points)"},
	}
}

// maxCut bounds --cut's END: three weeks, longer than any run (--length and
// --delay are at most a week).
const maxCut = 3 * 7 * 24 * 3600.0

// reportOptions reads reportFlags.
func reportOptions(c *cli.Context) (report.Options, report.Columns, error) {
	var o report.Options
	if v := c.String("cut"); v != "" {
		a, b, ok := strings.Cut(v, ",")
		start, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
		end, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
		// !(x <= max) also refuses NaN, which every comparison lets through. An END of
		// 0 or less counts back from the run's end, as flent's --data-cutoff does.
		if !ok || err1 != nil || err2 != nil || !(start >= 0) || !(start <= maxCut) || !(math.Abs(end) <= maxCut) || end > 0 && !(end > start) {
			return o, report.Columns{}, fmt.Errorf("--cut %q: write START,END in seconds into the run, 0 <= START < END <= %.0f, or END <= 0 for seconds before the run's end (as flent's --data-cutoff), e.g. --cut 5,25 or --cut 5,-5", v, maxCut)
		}
		o.Cut = &[2]float64{start, end}
	}
	if err := report.CheckFormat(c.String("format")); err != nil {
		return o, report.Columns{}, err
	}
	switch c.String("flows") {
	case "all":
	case "summary":
		o.FoldFlows = true
	default:
		return o, report.Columns{}, fmt.Errorf("--flows %q: use all (a row per flow) or summary (one row per direction)", c.String("flows"))
	}
	return o, report.Columns{P99: c.Bool("p99")}, nil
}

func summaryCommand() *cli.Command {
	return &cli.Command{
		Name:      "summary",
		Usage:     "print the summary table of data files (bloatbench's, or flent's .flent.gz)",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench summary [--format text|json|markdown|csv] [--cut START,END] [--p99] FILE...\n\nExample:\n" +
			"   bloatbench summary results/tcp_4down-*.bb.json.gz\n   bloatbench summary --format markdown --p99 --cut 5,25 results/*.bb.json.gz old-run.flent.gz",
		Flags: append(reportFlags(), &cli.BoolFlag{Name: "meta", Usage: "print each run's metadata instead: hosts (kernel, command line, CPU, sysctls, modules, devices as found), setup, note"}),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return fmt.Errorf("summary needs data files: bloatbench summary results/*%s", datafile.Ext)
			}
			o, cols, err := reportOptions(c)
			if err != nil {
				return err
			}
			var sums []report.Summary
			for _, p := range c.Args().Slice() {
				run, err := readRun(c.Context, p)
				if err != nil {
					// The error can quote the file: escaped, as the tables are.
					return report.EscapeError(err)
				}
				if c.Bool("meta") {
					report.WriteMeta(c.App.Writer, p, run)
					continue
				}
				sums = append(sums, report.SummarizeWith(run, o))
			}
			if c.Bool("meta") {
				return nil
			}
			return report.Write(c.App.Writer, c.String("format"), sums, cols)
		},
	}
}

func compareCommand() *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "compare setups: a cover letter's summary blocks per setup, the setups side by side, and with repetitions medians, intervals and A/B deltas with their significance",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench compare [--heading TEXT] [--format text|json|markdown|csv] [--cut START,END] [--p99] FILE...\n\nExample:\n" +
			"   bloatbench compare --heading 'Unshaped 1gigE' results/tcp_4down-*.bb.json.gz\n" +
			"   bloatbench compare --format markdown results/*.bb.json.gz baseline.flent.gz",
		Flags: append(reportFlags(), &cli.StringFlag{Name: "heading", Usage: "the condition, as in \"Unshaped 1gigE\" (default: the test's name)"}),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return fmt.Errorf("compare needs data files: bloatbench compare results/*%s", datafile.Ext)
			}
			o, cols, err := reportOptions(c)
			if err != nil {
				return err
			}
			return compareFiles(c, c.Args().Slice(), o, cols)
		},
	}
}

func compareFiles(c *cli.Context, paths []string, o report.Options, cols report.Columns) error {
	var in []report.Compared
	var runs []*datafile.Run
	for _, p := range paths {
		run, err := readRun(c.Context, p)
		if err != nil {
			return report.EscapeError(err) // it can quote the file, as in summary
		}
		in = append(in, report.CompareInput(run, o))
		runs = append(runs, run)
	}
	if err := report.WriteCompare(c.App.Writer, c.String("format"), report.Compare(in, c.String("heading")), cols); err != nil {
		return err
	}
	// "md" is markdown too: its fact list must be markdown, not text in a markdown page.
	if f := c.String("format"); f == "text" || f == "markdown" || f == "md" {
		report.WriteFactDiffs(c.App.Writer, runs, f != "text")
	}
	return nil
}
