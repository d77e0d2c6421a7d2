package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/flentfile"
)

// readRun reads a bloatbench data file or a flent one, by its name.
func readRun(path string) (*datafile.Run, error) {
	if flentfile.Is(path) {
		return flentfile.Read(path)
	}
	return datafile.Read(path)
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
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the output file, with one input (default: beside the input, " + flentfile.Ext + ")"},
		},
		Action: func(c *cli.Context) error {
			if !c.Bool("flent") {
				return fmt.Errorf("export needs a format: --flent")
			}
			if c.NArg() == 0 {
				return fmt.Errorf("export needs data files: bloatbench export --flent results/*%s", datafile.Ext)
			}
			if c.String("output") != "" && c.NArg() > 1 {
				return fmt.Errorf("-o names one output file; give one input, or leave -o out to write beside each input")
			}
			for _, p := range c.Args().Slice() {
				run, err := datafile.Read(p)
				if err != nil {
					return err
				}
				out, err := flentfile.Export(run, c.String("output"))
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, out)
			}
			return nil
		},
	}
}
