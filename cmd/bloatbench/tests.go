package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/bloatbench/bloatbench/tests"
)

func testsCommand() *cli.Command {
	return &cli.Command{
		Name:      "tests",
		Usage:     "list the tests and their parameters (set with run --te KEY=VALUE)",
		UsageText: "bloatbench tests\n\nExample:\n   bloatbench tests",
		Action: func(c *cli.Context) error {
			all, err := tests.All()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			for _, d := range all {
				fmt.Fprintf(tw, "%s\t%s\n", d.Name, d.Description)
				for _, n := range d.ParamNames() {
					p := d.Parameters[n]
					def := p.Default
					if def == "" {
						def = `""`
					}
					fmt.Fprintf(tw, "  --te %s=\t%s (default %s)\n", n, p.Description, def)
				}
			}
			return tw.Flush()
		},
	}
}
