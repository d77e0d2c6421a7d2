package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "put bottlenecks back as a controller that was killed left them, from its journal",
		UsageText: "bloatbench restore [--journal FILE] [--force] [--accept-new-host-keys]\n\nExamples:\n" +
			"   bloatbench restore                      # every journal in " + qdisc.JournalDir() + ", newest first\n" +
			"   bloatbench restore --journal ~/.local/state/bloatbench/journal/20261129T190000.000000-4242.json\n\n" +
			"A device (or sysctl) is put back only while it is as the journal's run left it; one that\n" +
			"is neither as found nor as left (changed by hand since) is left alone and named, and the\n" +
			"journal kept: --force puts it back as found all the same.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "journal", Usage: "a journal `FILE` (repeatable; default: every journal left in the journal folder)"},
			&cli.BoolFlag{Name: "force", Usage: "put back as found even a device or sysctl changed since the run left it"},
			&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "as for run"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			files := stringSlice(c, "journal")
			if len(files) == 0 {
				var err error
				if files, err = qdisc.Journals(qdisc.JournalDir()); err != nil {
					return err
				}
				if len(files) == 0 {
					fmt.Fprintln(c.Root().Writer, "no journal left: every host was put back")
					return nil
				}
			}
			d, err := remote.NewDialer(c.Bool("accept-new-host-keys"), c.Root().ErrWriter)
			if err != nil {
				return err
			}
			self, selfHash, err := selfBinary()
			if err != nil {
				return err
			}
			o := controller.Options{Dialer: d, Self: self, SelfHash: selfHash, Log: c.Root().ErrWriter}
			return controller.Restore(ctx, o, files, c.Bool("force"), c.Root().Writer)
		},
	}
}
