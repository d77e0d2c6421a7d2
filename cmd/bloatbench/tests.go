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
		Usage:     "list the tests and their parameters (set with run --te KEY=VALUE), or those of test files",
		UsageText: "bloatbench tests [TEST|TEST_FILE...]\n\nExamples:\n   bloatbench tests\n   bloatbench tests udp_flood\n   bloatbench tests ./my_test.yaml",
		Action: func(c *cli.Context) error {
			all, err := tests.All()
			if err != nil {
				return err
			}
			if c.NArg() > 0 {
				all = nil
				for _, f := range c.Args().Slice() {
					// As run takes it: a built-in's name, or a test file's path.
					d, err := tests.Get(f)
					if err != nil {
						return err
					}
					all = append(all, d)
				}
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
