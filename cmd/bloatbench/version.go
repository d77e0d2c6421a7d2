package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print bloatbench's version",
		UsageText: "bloatbench version",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(c.App.Writer, buildVersion())
			return nil
		},
	}
}
