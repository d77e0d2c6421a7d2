package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

func hostsCommand() *cli.Command {
	return &cli.Command{
		Name:  "hosts",
		Usage: "inspect the inventory's hosts",
		Commands: []*cli.Command{{
			Name:  "check",
			Usage: "preflight: SSH, kernel, tc, ethtool, bottleneck devices and BQL, and whether each setup can be applied (tried in a scratch namespace)",
			UsageText: "bloatbench hosts check -H hosts.yaml [--setup NAME ...] [--accept-new-host-keys]\n\nExample:\n" +
				"   bloatbench hosts check -H hosts.yaml --setup mq+dualpi2 --setup cake",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "hosts", Aliases: []string{"H"}, Required: true, Usage: "the inventory `FILE`"},
				&cli.StringSliceFlag{Name: "setup", Usage: "setup `NAME` to try (repeatable)"},
				&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "as for run"},
			},
			Action: func(ctx context.Context, c *cli.Command) error {
				inv, err := inventory.Load(c.String("hosts"))
				if err != nil {
					return err
				}
				var setups []*qdisc.Setup
				for _, name := range stringSlice(c, "setup") {
					s, err := qdisc.Resolve(name, inv)
					if err != nil {
						return err
					}
					setups = append(setups, s)
				}
				d, err := remote.NewDialer(c.Bool("accept-new-host-keys"), c.Root().ErrWriter)
				if err != nil {
					return err
				}
				self, selfHash, err := selfBinary()
				if err != nil {
					return err
				}
				o := controller.Options{Inventory: inv, Dialer: d, Self: self, SelfHash: selfHash, Log: c.Root().ErrWriter, ChangesDevices: len(setups) > 0}
				for _, s := range setups {
					o.SetsSysctls = o.SetsSysctls || len(s.Sysctls) > 0
				}
				if problems := controller.Check(ctx, o, setups, c.Root().Writer); len(problems) > 0 {
					return fmt.Errorf("%d problem(s)", len(problems))
				}
				return nil
			},
		}},
	}
}
