package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/testbed"
)

func labFlags(prefix string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: prefix + "rate", Usage: "shape the test link with htb at this rate on both ends, e.g. 100mbit"},
		&cli.StringFlag{Name: prefix + "queue", Usage: "the queue under the shaper (or at the root): pfifo:PACKETS or bfifo:BYTES"},
		&cli.StringFlag{Name: prefix + "gso", Usage: "off: turn GSO, TSO and GRO off on the test link"},
		&cli.IntFlag{Name: prefix + "queues", Value: 4, Usage: "tx and rx queues of the test link"},
	}
}

func labOptions(c *cli.Context, prefix string) testbed.Options {
	return testbed.Options{Rate: c.String(prefix + "rate"), Queue: c.String(prefix + "queue"), GSO: c.String(prefix + "gso"), Queues: c.Int(prefix + "queues")}
}

func testbedCommand() *cli.Command {
	return &cli.Command{
		Name:  "testbed",
		Usage: "bring the local lab (network namespaces with sshd, on this machine) up or down",
		Subcommands: []*cli.Command{
			{
				Name:  "up",
				Usage: "create a client and a server namespace joined by a veth test link, each with its own sshd, and write an inventory (needs root)",
				UsageText: "bloatbench testbed up [--out lab.yaml] [--rate RATE] [--queue pfifo:N|bfifo:BYTES] [--gso off]\n\nExample:\n" +
					"   bloatbench testbed up --out lab.yaml --rate 100mbit --queue bfifo:300000 --gso off\n   bloatbench run -H lab.yaml tcp_4down",
				Flags: append([]cli.Flag{&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Value: "lab.yaml", Usage: "where to write the lab's inventory"}}, labFlags("")...),
				Action: func(c *cli.Context) error {
					lab, err := testbed.Up(c.Context, labOptions(c, ""), c.String("out"))
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "lab %s is up: client %s, server %s; inventory %s\n", lab.Name, lab.Hosts[0].NetNS, lab.Hosts[1].NetNS, lab.Inventory)
					return nil
				},
			},
			{
				Name:      "down",
				Usage:     "remove a lab: its namespaces, links, sshd and keys (all labs when no -H or --name)",
				UsageText: "bloatbench testbed down [-H lab.yaml | --name bb0]\n\nExample:\n   bloatbench testbed down -H lab.yaml\n   bloatbench testbed down     # every lab",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "hosts", Aliases: []string{"H"}, Usage: "the inventory testbed up wrote"},
					&cli.StringFlag{Name: "name", Usage: "the lab's name (bb0, bb1, ...)"},
				},
				Action: func(c *cli.Context) error {
					name := c.String("name")
					if p := c.String("hosts"); p != "" {
						inv, err := inventory.Load(p)
						if err != nil {
							return err
						}
						if inv.Testbed == "" {
							return fmt.Errorf("%s is not an inventory written by testbed up (it has no testbed: key)", p)
						}
						name = inv.Testbed
					}
					return testbed.Down(c.Context, name)
				},
			},
		},
	}
}
