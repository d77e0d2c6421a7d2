package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/chart"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/flentfile"
	"github.com/bloatbench/bloatbench/htmlreport"
)

// readRun reads a bloatbench data file or a flent one, by its name. It stops when
// ctx is done (Ctrl-C): a bloatbench file as it reads; a flent file, which is read
// whole (128 MiB at most, a few seconds), before it starts.
func readRun(ctx context.Context, path string) (*datafile.Run, error) {
	if flentfile.Is(path) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return flentfile.Read(path)
	}
	return datafile.ReadContext(ctx, path)
}

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write data files in another tool's format: --flent writes a .flent.gz that flent 2.1.1 loads, summarises and plots",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench export --flent [-o OUT.flent.gz] FILE...\n\nExample:\n" +
			"   bloatbench export --flent results/tcp_4down-*.bb.json.gz\n   flent -i results/tcp_4down-2026-11-29T184147.MQ_DUALPI2.flent.gz -f summary",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "flent", Usage: "write flent's format (the only one so far; required)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the output `FILE`, with one input (default: beside the input, " + flentfile.Ext + ")"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if !c.Bool("flent") {
				return usagef(c, "export needs a format: --flent")
			}
			if c.NArg() == 0 {
				return usagef(c, "export needs data files: bloatbench export --flent results/*%s", datafile.Ext)
			}
			if c.String("output") != "" && c.NArg() > 1 {
				return usagef(c, "-o names one output file; give one input, or leave -o out to write beside each input")
			}
			for _, p := range c.Args().Slice() {
				if flentfile.Is(p) || flentfile.Holds(p) {
					// Read as a bloatbench file it failed on its first record
					// with a JSON error that said nothing of what it was.
					return fmt.Errorf("%s is a flent data file already: flent reads it as it is (flent -i %s -f summary), as do bloatbench summary, compare and plot under a name ending in %s; export --flent converts bloatbench's data files (*%s) to flent's", p, p, flentfile.Ext, datafile.Ext)
				}
				run, err := datafile.ReadContext(ctx, p)
				if err != nil {
					return err
				}
				out, err := flentfile.Export(run, c.String("output"))
				if err != nil {
					return err
				}
				fmt.Fprintln(c.Root().Writer, out)
			}
			return nil
		},
	}
}

func plotCommand() *cli.Command {
	return &cli.Command{
		Name:      "plot",
		Usage:     "draw runs as one self-contained HTML page (throughput and ping over time, the bottleneck's queue, and across runs ping CDFs, box plots, throughput and fairness per setup), and as PNG or SVG files in flent's layouts",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench plot [-o report.html|IMAGE.png|IMAGE.svg] [--png] [--svg] [-p LAYOUT ...] [--log-latency] [--flows] [--width PIXELS] [--height PIXELS] [--title TEXT] FILE...\n       bloatbench plot --list-plots\n\nExamples:\n" +
			"   bloatbench plot -o report.html results/tcp_4down-*.bb.json.gz\n" +
			"   bloatbench plot -o old-vs-new.html baseline.flent.gz results/*.bb.json.gz\n" +
			"   bloatbench plot --png -p all_scaled -p ping_cdf results/tcp_4down-*.bb.json.gz\n" +
			"   bloatbench plot -p ping_cdf --log-latency -o cdf.svg results/*.bb.json.gz\n" +
			"   bloatbench plot --list-plots",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "report.html", Usage: "the `FILE` to write: an HTML page, or with a .png or .svg name one image of the -p layout (all_scaled if none)"},
			&cli.StringFlag{Name: "title", Usage: "the page's or the images' title, `TEXT` (default: bloatbench report for the page, the tests and layout for an image)"},
			&cli.StringSliceFlag{Name: "plot", Aliases: []string{"p"}, Usage: "draw image files in layout `NAME` (repeatable; default every layout the runs have data for); --list-plots lists them"},
			&cli.BoolFlag{Name: "png", Usage: "also write each layout as a PNG file beside the page, named PAGE-LAYOUT.png"},
			&cli.BoolFlag{Name: "svg", Usage: "also write each layout as an SVG file beside the page, named PAGE-LAYOUT.svg"},
			&cli.BoolFlag{Name: "log-latency", Usage: "ping_cdf: the latency axis on a log scale"},
			&cli.BoolFlag{Name: "flows", Usage: "all and all_scaled: draw each TCP flow too, beside the sums"},
			&cli.IntFlag{Name: "width", Usage: "images' width in `PIXELS` (default 1100)"},
			&cli.IntFlag{Name: "height", Usage: "images' height in `PIXELS` (default: the layout's)"},
			&cli.BoolFlag{Name: "list-plots", Usage: "list the image layouts and what each draws, and exit"},
		},
		Action: plotAction,
	}
}

func plotAction(ctx context.Context, c *cli.Command) error {
	if c.Bool("list-plots") {
		for _, l := range chart.Layouts() {
			fmt.Fprintf(c.Root().Writer, "%-11s %s\n", l, chart.Describe(l))
		}
		return nil
	}
	if c.NArg() == 0 {
		return usagef(c, "plot needs data files: bloatbench plot -o report.html results/*%s", datafile.Ext)
	}
	layouts := stringSlice(c, "plot")
	for _, l := range layouts {
		if chart.Describe(l) == "" {
			return usagef(c, "-p %q: no such layout; there are %s (bloatbench plot --list-plots)", l, strings.Join(chart.Layouts(), ", "))
		}
	}
	for _, f := range []string{"width", "height"} {
		if v := c.Int(f); v < 0 || v > 20000 {
			return usagef(c, "--%s %d: give pixels from 1 to 20000", f, v)
		}
	}
	out := c.String("output")
	ext := strings.ToLower(filepath.Ext(out))
	image := ext == ".png" || ext == ".svg"
	if image && (len(layouts) > 1 || c.Bool("png") || c.Bool("svg")) {
		return usagef(c, "-o %s is one image, of one layout: give one -p (or none, for all_scaled), or -o PAGE.html with --png/--svg for a file per layout", out)
	}
	if !image && len(layouts) > 0 && !c.Bool("png") && !c.Bool("svg") {
		return usagef(c, "-p draws image files: add --png or --svg (or write one with -o FILE.png)")
	}
	var runs []*datafile.Run
	for _, p := range c.Args().Slice() {
		d, err := readRun(ctx, p)
		if err != nil {
			return err
		}
		runs = append(runs, d)
	}
	o := chart.Options{Width: c.Int("width"), Height: c.Int("height"), Title: c.String("title"),
		LogLatency: c.Bool("log-latency"), Flows: c.Bool("flows")}
	if image {
		layout := "all_scaled"
		if len(layouts) == 1 {
			layout = layouts[0]
		}
		return writePlotFile(c, out, func(f *os.File) error { return chart.Write(runs, layout, ext[1:], f, o) })
	}
	title := c.String("title")
	if title == "" {
		title = "bloatbench report"
	}
	hruns := make([]htmlreport.Run, len(runs))
	for i, d := range runs {
		hruns[i] = htmlreport.RunOf(d)
	}
	if err := writePlotFile(c, out, func(f *os.File) error { return htmlreport.Write(f, title, hruns) }); err != nil {
		return err
	}
	var formats []string
	for _, f := range chart.Formats() {
		if c.Bool(f) {
			formats = append(formats, f)
		}
	}
	if len(formats) == 0 {
		return nil
	}
	prefix := strings.TrimSuffix(filepath.Base(out), filepath.Ext(out)) + "-"
	paths, err := chart.WriteFiles(filepath.Dir(out), prefix, runs, layouts, formats, o)
	for _, p := range paths {
		fmt.Fprintln(c.Root().ErrWriter, "wrote", p)
	}
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// writePlotFile writes one output file whole: through a temporary file beside it,
// renamed into place, so that a failure leaves no half-drawn page or image.
func writePlotFile(c *cli.Command, path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Fprintln(c.Root().ErrWriter, "wrote", path)
	return nil
}
