package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/report"
)

func setupsCommand() *cli.Command {
	return &cli.Command{
		Name:  "setups",
		Usage: "list the qdisc setups (built-in and the inventory's), or print the exact commands of one",
		UsageText: "bloatbench setups [-H hosts.yaml] [--commands NAME --dev DEV [--queues N]]\n\nExamples:\n" +
			"   bloatbench setups -H hosts.yaml\n   bloatbench setups --commands mq+dualpi2 --dev eth0 --queues 8",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "hosts", Aliases: []string{"H"}, Usage: "inventory whose setups: to include"},
			&cli.StringFlag{Name: "commands", Usage: "print the commands that apply this setup"},
			&cli.StringFlag{Name: "dev", Value: "eth0", Usage: "device for --commands"},
			&cli.IntFlag{Name: "queues", Value: 4, Usage: "tx queues of the device, for --commands"},
		},
		Action: func(c *cli.Context) error {
			var inv *inventory.Inventory
			if p := c.String("hosts"); p != "" {
				var err error
				if inv, err = inventory.Load(p); err != nil {
					return err
				}
			}
			if name := c.String("commands"); name != "" {
				if err := inventory.CheckDevName(c.String("dev")); err != nil {
					return fmt.Errorf("--dev: %w", err)
				}
				if q := c.Int("queues"); q < 1 || q > 4096 {
					return fmt.Errorf("--queues %d: from 1 to 4096", q)
				}
				s, err := qdisc.Resolve(name, inv)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "# %s (%s), %s\n%s", s.Name, s.Title, s.Source, qdisc.Script(s.Commands(c.String("dev"), c.Int("queues"))))
				if len(s.Sysctls) > 0 {
					fmt.Fprintf(c.App.Writer, "# on every host of the run:\n%s", qdisc.Script(s.SysctlOps()))
				}
				if p := s.PathCommands("PATHDEV"); p != nil {
					fmt.Fprintf(c.App.Writer, "# on each of the inventory's path_devices:\n%s", qdisc.Script(p))
				}
				return nil
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
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
