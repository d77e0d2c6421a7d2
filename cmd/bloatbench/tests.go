package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/tests"
)

// listFormatFlag is the --format of the verbs that list things: text or json.
func listFormatFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "output `FORMAT`: text or json"}
}

// listFormat is listFormatFlag's value, checked.
func listFormat(c *cli.Command) (string, error) {
	switch f := c.String("format"); f {
	case "text", "json":
		return f, nil
	default:
		return "", usagef(c, "--format %q: use text or json", f)
	}
}

// testJSON is a test as tests --format json prints it.
type testJSON struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Extends     string          `json:"extends,omitempty"`
	Source      string          `json:"source"`
	Parameters  []parameterJSON `json:"parameters"`
}

type parameterJSON struct {
	Name        string `json:"name"`
	Default     string `json:"default"`
	Description string `json:"description"`
}

func testsCommand() *cli.Command {
	return &cli.Command{
		Name:      "tests",
		Usage:     "list the tests and their parameters (set with run --te KEY=VALUE), or those of test files",
		ArgsUsage: "[TEST|TEST_FILE...]",
		UsageText: "bloatbench tests [--format text|json] [TEST|TEST_FILE...]\n\nExamples:\n   bloatbench tests\n   bloatbench tests udp_flood\n   bloatbench tests ./my_test.yaml\n   bloatbench tests --format json",
		Flags:     []cli.Flag{listFormatFlag()},
		Action: func(ctx context.Context, c *cli.Command) error {
			format, err := listFormat(c)
			if err != nil {
				return err
			}
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
			if format == "json" {
				out := []testJSON{}
				for _, d := range all {
					t := testJSON{Name: d.Name, Description: d.Description, Extends: d.Extends, Source: d.Source, Parameters: []parameterJSON{}}
					for _, n := range d.ParamNames() {
						p := d.Parameters[n]
						t.Parameters = append(t.Parameters, parameterJSON{Name: n, Default: p.Default, Description: p.Description})
					}
					out = append(out, t)
				}
				return writeJSON(c.Root().Writer, out)
			}
			tw := tabwriter.NewWriter(c.Root().Writer, 0, 4, 2, ' ', 0)
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
