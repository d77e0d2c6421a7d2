package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

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
		Usage:     "draw runs as one self-contained HTML page: throughput and ping over time, the bottleneck's queue, and across runs ping CDFs, box plots and throughput per setup",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench plot [-o report.html] [--title TEXT] FILE...\n\nExamples:\n" +
			"   bloatbench plot -o report.html results/tcp_4down-*.bb.json.gz\n   bloatbench plot -o old-vs-new.html baseline.flent.gz results/*.bb.json.gz",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "report.html", Usage: "the HTML `FILE` to write"},
			&cli.StringFlag{Name: "title", Value: "bloatbench report", Usage: "the page's title, `TEXT`"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return usagef(c, "plot needs data files: bloatbench plot -o report.html results/*%s", datafile.Ext)
			}
			var runs []htmlreport.Run
			for _, p := range c.Args().Slice() {
				d, err := readRun(ctx, p)
				if err != nil {
					return err
				}
				runs = append(runs, htmlreport.RunOf(d))
			}
			out := c.String("output")
			f, err := os.Create(out)
			if err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			if err := htmlreport.Write(f, c.String("title"), runs); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("plot: write %s: %w", out, err)
			}
			fmt.Fprintln(c.Root().ErrWriter, "wrote", out)
			return nil
		},
	}
}
