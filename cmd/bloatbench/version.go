package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print bloatbench's version",
		UsageText: "bloatbench version",
		Action: func(ctx context.Context, c *cli.Command) error {
			fmt.Fprintln(c.Root().Writer, buildVersion())
			return nil
		},
	}
}
