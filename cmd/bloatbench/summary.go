package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

func formatFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "output `FORMAT`: " + strings.Join(report.Formats, ", ")}
}

// reportFlags are the flags of every verb that prints tables.
func reportFlags() []cli.Flag {
	return []cli.Flag{
		formatFlag(),
		&cli.StringFlag{Name: "cut", Aliases: []string{"data-cutoff"}, Usage: "summarise only `START,END` seconds into each run, as flent's --data-cutoff: ends excluded, an END of 0 or less counts back from the run's end; e.g. 5,25 or 5,-5"},
		&cli.BoolFlag{Name: "p99", Usage: "add the 99th percentile column"},
		&cli.StringFlag{Name: "flows", Value: "all", Usage: "`MODE`: all, a row per TCP flow; summary, one row per direction over the flows (their averages' mean and median, the flows as points)"},
	}
}

// maxCut bounds --cut's END: three weeks, longer than any run (--length and
// --delay are at most a week).
const maxCut = 3 * 7 * 24 * 3600.0

// reportOptions reads reportFlags. Its errors are usage errors.
func reportOptions(c *cli.Command) (report.Options, report.Columns, error) {
	var o report.Options
	if v := c.String("cut"); v != "" {
		a, b, ok := strings.Cut(v, ",")
		start, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
		end, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
		// !(x <= max) also refuses NaN, which every comparison lets through. An END of
		// 0 or less counts back from the run's end, as flent's --data-cutoff does.
		if !ok || err1 != nil || err2 != nil || !(start >= 0) || !(start <= maxCut) || !(math.Abs(end) <= maxCut) || end > 0 && !(end > start) {
			return o, report.Columns{}, usagef(c, "--cut %q: write START,END in seconds into the run, 0 <= START < END <= %.0f, or END <= 0 for seconds before the run's end (as flent's --data-cutoff), e.g. --cut 5,25 or --cut 5,-5", v, maxCut)
		}
		o.Cut = &[2]float64{start, end}
	}
	if err := report.CheckFormat(c.String("format")); err != nil {
		return o, report.Columns{}, asUsage(c, fmt.Errorf("--format: %w", err))
	}
	switch c.String("flows") {
	case "all":
	case "summary":
		o.FoldFlows = true
	default:
		return o, report.Columns{}, usagef(c, "--flows %q: use all (a row per flow) or summary (one row per direction)", c.String("flows"))
	}
	return o, report.Columns{P99: c.Bool("p99")}, nil
}

// cutBeyond says how cut reaches past the end of a run of total seconds, or ""
// when it is within the run: a cut past the end would print N/A in every row, or
// rows over less than asked for.
func cutBeyond(cut *[2]float64, total float64) string {
	if cut == nil {
		return ""
	}
	start, end := cut[0], cut[1]
	if end <= 0 {
		end += total
	}
	const slack = 1e-9
	switch {
	case start >= total-slack:
		return fmt.Sprintf("it starts at %gs, at or after the run's end", start)
	case cut[1] > 0 && end > total+slack:
		return fmt.Sprintf("it ends at %gs, after the run's end", end)
	case end <= start:
		return fmt.Sprintf("it ends %gs before the run's end, at %gs, before it starts", -cut[1], end)
	}
	return ""
}

// cutFits says whether the cut is within the run read from path; when it reaches
// past the run's end it warns on stderr, naming the run's length.
func cutFits(c *cli.Command, o report.Options, path string, run *datafile.Run) bool {
	total := run.Metadata.TotalLength
	why := cutBeyond(o.Cut, total)
	if why == "" {
		return true
	}
	fmt.Fprintf(c.Root().ErrWriter, "bloatbench: warning: --cut %s: %s is a run of %gs: %s\n", c.String("cut"), report.EscapeText(path), total, why)
	return false
}

// errCutBeyond is the error of a cut past the end of n of the runs read.
func errCutBeyond(c *cli.Command, n, of int) error {
	return fmt.Errorf("--cut %s reaches past the end of %d of %d runs (above): give START and END within a run's length, or an END of 0 or less to count back from its end; nothing was printed", c.String("cut"), n, of)
}

func summaryCommand() *cli.Command {
	return &cli.Command{
		Name:      "summary",
		Usage:     "print the summary table of data files (bloatbench's, or flent's .flent.gz)",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench summary [--format text|json|markdown|csv] [--cut START,END] [--p99] [--flows all|summary] [--meta] FILE...\n\nExamples:\n" +
			"   bloatbench summary results/tcp_4down-*.bb.json.gz\n   bloatbench summary --format markdown --p99 --cut 5,25 results/*.bb.json.gz old-run.flent.gz\n" +
			"   bloatbench summary results/tcp_4down-*.bb.json.gz --meta --format json",
		Flags: append(reportFlags(), &cli.BoolFlag{Name: "meta", Usage: "print each run's metadata instead (text, or --format json): hosts (kernel, command line, CPU, sysctls, modules, devices as found), setup, note"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return usagef(c, "summary needs data files: bloatbench summary results/*%s", datafile.Ext)
			}
			o, cols, err := reportOptions(c)
			if err != nil {
				return err
			}
			meta := c.Bool("meta")
			if f := c.String("format"); meta && f != "text" && f != "json" {
				return usagef(c, "--meta --format %s: --meta prints text or json", f)
			}
			var sums []report.Summary
			var metas []metaJSON
			beyond := 0
			for _, p := range c.Args().Slice() {
				run, err := readRun(ctx, p)
				if err != nil {
					// The error can quote the file: escaped, as the tables are.
					return report.EscapeError(err)
				}
				switch {
				case meta && c.String("format") == "json":
					metas = append(metas, metaJSON{File: p, Incomplete: run.Incomplete, Error: run.Error, Metadata: run.Metadata})
				case meta:
					report.WriteMeta(c.Root().Writer, p, run)
				default:
					if !cutFits(c, o, p, run) {
						beyond++
						continue
					}
					sums = append(sums, report.SummarizeWith(run, o))
				}
			}
			switch {
			case meta && c.String("format") == "json":
				return writeJSON(c.Root().Writer, metas)
			case meta:
				return nil
			case beyond > 0:
				return errCutBeyond(c, beyond, c.NArg())
			}
			return report.Write(c.Root().Writer, c.String("format"), sums, cols)
		},
	}
}

// metaJSON is a run's metadata as summary --meta --format json prints it.
type metaJSON struct {
	File       string            `json:"file"`
	Incomplete bool              `json:"incomplete,omitempty"`
	Error      string            `json:"error,omitempty"`
	Metadata   datafile.Metadata `json:"metadata"`
}

// writeJSON writes v as indented JSON, its strings as they are (not HTML-escaped);
// the terminal writer makes their control characters inert.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func compareCommand() *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "compare setups: a cover letter's summary blocks per setup, the setups side by side, and with repetitions medians, intervals and A/B deltas with their significance",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench compare [--heading TEXT] [--format text|json|markdown|csv] [--cut START,END] [--p99] [--flows all|summary] FILE...\n\nExamples:\n" +
			"   bloatbench compare --heading 'Unshaped 1gigE' results/tcp_4down-*.bb.json.gz\n" +
			"   bloatbench compare --format markdown results/*.bb.json.gz baseline.flent.gz",
		Flags: append(reportFlags(), &cli.StringFlag{Name: "heading", Usage: "the condition `TEXT` in the heading, as in \"Unshaped 1gigE\" (default: the test's name)"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return usagef(c, "compare needs data files: bloatbench compare results/*%s", datafile.Ext)
			}
			o, cols, err := reportOptions(c)
			if err != nil {
				return err
			}
			return compareFiles(ctx, c, c.Args().Slice(), o, cols)
		},
	}
}

func compareFiles(ctx context.Context, c *cli.Command, paths []string, o report.Options, cols report.Columns) error {
	var in []report.Compared
	var runs []*datafile.Run
	beyond := 0
	for _, p := range paths {
		run, err := readRun(ctx, p)
		if err != nil {
			return report.EscapeError(err) // it can quote the file, as in summary
		}
		if !cutFits(c, o, p, run) {
			beyond++
			continue
		}
		in = append(in, report.CompareInput(run, o))
		runs = append(runs, run)
	}
	if beyond > 0 {
		return errCutBeyond(c, beyond, len(paths))
	}
	if err := report.WriteCompare(c.Root().Writer, c.String("format"), report.Compare(in, c.String("heading")), cols); err != nil {
		return err
	}
	// "md" is markdown too: its fact list must be markdown, not text in a markdown page.
	if f := c.String("format"); f == "text" || f == "markdown" || f == "md" {
		report.WriteFactDiffs(c.Root().Writer, runs, f != "text")
	}
	return nil
}
