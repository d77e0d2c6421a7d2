package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

func formatFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "output format: " + strings.Join(report.Formats, ", ")}
}

func summaryCommand() *cli.Command {
	return &cli.Command{
		Name:      "summary",
		Usage:     "print the summary table of data files",
		ArgsUsage: "FILE...",
		UsageText: "bloatbench summary [--format text|json|markdown|csv] FILE...\n\nExample:\n   bloatbench summary results/tcp_4down-*.bb.json.gz\n   bloatbench summary --format markdown results/*.bb.json.gz",
		Flags:     []cli.Flag{formatFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return fmt.Errorf("summary needs data files: bloatbench summary results/*%s", datafile.Ext)
			}
			var sums []report.Summary
			for _, p := range c.Args().Slice() {
				run, err := datafile.Read(p)
				if err != nil {
					return err
				}
				sums = append(sums, report.Summarize(run))
			}
			return report.Write(c.App.Writer, c.String("format"), sums)
		},
	}
}
