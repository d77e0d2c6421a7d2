package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/report"
)

func setupsCommand() *cli.Command {
	return &cli.Command{
		Name:  "setups",
		Usage: "list the qdisc setups (built-in and the inventory's), or print the exact commands of one",
		UsageText: "bloatbench setups [-H hosts.yaml] [--format text|json] [--commands NAME --dev DEV [--queues N]]\n\nExamples:\n" +
			"   bloatbench setups -H hosts.yaml\n   bloatbench setups --commands mq+dualpi2 --dev eth0 --queues 8\n   bloatbench setups -H hosts.yaml --format json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "hosts", Aliases: []string{"H"}, Usage: "the inventory `FILE` whose setups: to include"},
			&cli.StringFlag{Name: "commands", Usage: "print the commands that apply setup `NAME`"},
			&cli.StringFlag{Name: "dev", Value: "eth0", Usage: "the device `DEV` for --commands"},
			&cli.IntFlag{Name: "queues", Value: 4, Usage: "the device's `N` tx queues, for --commands"},
			listFormatFlag(),
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			format, err := listFormat(c)
			if err != nil {
				return err
			}
			var inv *inventory.Inventory
			if p := c.String("hosts"); p != "" {
				if inv, err = inventory.Load(p); err != nil {
					return err
				}
			}
			if name := c.String("commands"); name != "" {
				if err := inventory.CheckDevName(c.String("dev")); err != nil {
					return usagef(c, "--dev: %w", err)
				}
				if q := c.Int("queues"); q < 1 || q > 4096 {
					return usagef(c, "--queues %d: from 1 to 4096", q)
				}
				s, err := qdisc.Resolve(name, inv)
				if err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(c.Root().Writer, setupCommandsJSON{Name: s.Name, Title: s.Title, Source: s.Source, Dev: c.String("dev"), Queues: c.Int("queues"),
						Commands: shell(s.Commands(c.String("dev"), c.Int("queues"))), Sysctls: shell(s.SysctlOps()), PathCommands: shell(s.PathCommands("PATHDEV")),
						Schedule: s.Changes(c.String("dev"))})
				}
				fmt.Fprintf(c.Root().Writer, "# %s (%s), %s\n%s", s.Name, s.Title, s.Source, qdisc.Script(s.Commands(c.String("dev"), c.Int("queues"))))
				if len(s.Sysctls) > 0 {
					fmt.Fprintf(c.Root().Writer, "# on every host of the run:\n%s", qdisc.Script(s.SysctlOps()))
				}
				if p := s.PathCommands("PATHDEV"); p != nil {
					fmt.Fprintf(c.Root().Writer, "# on each of the inventory's path_devices:\n%s", qdisc.Script(p))
				}
				if ch := s.Changes(c.String("dev")); len(ch) > 0 {
					fmt.Fprintf(c.Root().Writer, "# during each run, from its start:\n# %s\n", strings.Join(ch, "\n# "))
				}
				return nil
			}
			if format == "json" {
				out := []setupJSON{}
				for _, name := range qdisc.Names(inv) {
					s, err := qdisc.Lookup(name, inv)
					if err != nil {
						out = append(out, setupJSON{Name: name, Error: err.Error()})
						continue
					}
					rate := s.Rate
					if s.NeedsRate() {
						rate = ""
					}
					out = append(out, setupJSON{Name: s.Name, Title: s.Title, Qdiscs: s.Kinds(), Rate: rate, NeedsRate: s.NeedsRate(), Builtin: s.Builtin, Source: s.Source})
				}
				return writeJSON(c.Root().Writer, out)
			}
			tw := tabwriter.NewWriter(c.Root().Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SETUP\tTITLE\tQDISCS\tFROM")
			for _, name := range qdisc.Names(inv) {
				s, err := qdisc.Lookup(name, inv)
				if err != nil {
					fmt.Fprintf(tw, "%s\t\t(%v)\t\n", name, err)
					continue
				}
				kinds := strings.Join(s.Kinds(), " + ")
				switch {
				case s.NeedsRate():
					kinds += " @ RATE (extend it with rate:)"
				case s.Rate != "":
					kinds += " @ " + s.Rate
				}
				// Escaped before the columns are laid out, so that they line up.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", report.EscapeText(s.Name), report.EscapeText(s.Title), kinds, report.EscapeText(s.Source))
			}
			return tw.Flush()
		},
	}
}

// setupJSON is a setup as setups --format json lists it.
type setupJSON struct {
	Name   string   `json:"name"`
	Title  string   `json:"title,omitempty"`
	Qdiscs []string `json:"qdiscs,omitempty"`
	// Rate is the htb shaping rate; NeedsRate, a setup that shapes at a rate its
	// extension gives (rate:).
	Rate      string `json:"rate,omitempty"`
	NeedsRate bool   `json:"needs_rate,omitempty"`
	Builtin   bool   `json:"builtin"`
	Source    string `json:"source,omitempty"`
	Error     string `json:"error,omitempty"`
}

// setupCommandsJSON is what setups --commands --format json prints: the commands,
// one a string as a person would type them.
type setupCommandsJSON struct {
	Name         string   `json:"name"`
	Title        string   `json:"title"`
	Source       string   `json:"source"`
	Dev          string   `json:"dev"`
	Queues       int      `json:"queues"`
	Commands     []string `json:"commands"`
	Sysctls      []string `json:"sysctls,omitempty"`
	PathCommands []string `json:"path_commands,omitempty"`
	// Schedule is the rate schedule's changes: "at 10s: tc class change ...".
	Schedule []string `json:"schedule,omitempty"`
}

func shell(ops []qdisc.Op) []string {
	out := []string{}
	for _, o := range ops {
		out = append(out, o.Shell())
	}
	return out
}
