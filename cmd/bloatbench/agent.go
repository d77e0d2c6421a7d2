package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/agent"
)

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:      "agent",
		Hidden:    true,
		Usage:     "run as an endpoint's agent, speaking the agent protocol on stdin and stdout (the controller starts it over SSH)",
		UsageText: "bloatbench agent   # started by the controller; not for people",
		Action: func(ctx context.Context, c *cli.Command) error {
			return (&agent.Server{Version: buildVersion()}).Serve(ctx, os.Stdin, os.Stdout)
		},
	}
}
