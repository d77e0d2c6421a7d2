package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/testbed"
)

func labFlags(prefix string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: prefix + "rate", Usage: "shape the test link with htb at `RATE` on both ends, e.g. 100mbit"},
		&cli.StringFlag{Name: prefix + "queue", Usage: "the `QUEUE` under the shaper (or at the root): pfifo:PACKETS or bfifo:BYTES"},
		&cli.StringFlag{Name: prefix + "gso", Usage: "`off`: turn GSO, TSO and GRO off on the test link"},
		&cli.IntFlag{Name: prefix + "queues", Value: 4, Usage: "the test link's `N` tx and rx queues"},
	}
}

func labOptions(c *cli.Command, prefix string) testbed.Options {
	o := testbed.Options{Rate: c.String(prefix + "rate"), Queue: c.String(prefix + "queue"), GSO: c.String(prefix + "gso"), Queues: c.Int(prefix + "queues")}
	if prefix == "" {
		o.User, o.Sudo, o.IPv6, o.Pairs = c.String("user"), c.Bool("sudo"), c.Bool("ipv6"), c.Int("pairs")
	}
	return o
}

func testbedCommand() *cli.Command {
	return &cli.Command{
		Name:  "testbed",
		Usage: "bring a lab up or down: the local lab (network namespaces with sshd, on this machine) or the VM lab (QEMU guests with a Debian kernel that has every qdisc)",
		Commands: []*cli.Command{
			{
				Name:  "up",
				Usage: "create a client and a server namespace joined by a veth test link, each with its own sshd, and write an inventory (needs root)",
				UsageText: "bloatbench testbed up [--out lab.yaml] [--rate RATE] [--queue pfifo:N|bfifo:BYTES] [--gso off] [--queues N] [--ipv6] [--user NAME [--sudo]] [--pairs N]\n" +
					"bloatbench testbed up --vm [--out vmlab.yaml] [--rate RATE] [--queues N] [--memory MIB] [--router [--rtt DURATION] [--loss PERCENT]] [--kernel DEB_OR_BZIMAGE] [--module KO]...\n\nExamples:\n" +
					"   bloatbench testbed up --out lab.yaml --rate 100mbit --queue bfifo:300000 --gso off\n   bloatbench run -H lab.yaml tcp_4down\n" +
					"   bloatbench testbed up --out lab.yaml --rate 100mbit --ipv6 --user bench --sudo\n" +
					"   bloatbench testbed up --vm --out vmlab.yaml --rate 20mbit\n" +
					"   bloatbench run -H vmlab.yaml --setup mq+dualpi2 --setup mq+fq_codel -l 20 tcp_4down",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Value: "lab.yaml", Usage: "write the lab's inventory to `FILE`"},
					&cli.BoolFlag{Name: "vm", Usage: "two QEMU guests with Debian's 7.3 kernel (every AQM, dualpi2 built for it, virtio-net with BQL) instead of namespaces; --rate is then the link's line rate, and --out defaults to vmlab.yaml"},
					&cli.StringFlag{Name: "kernel", Usage: "with --vm: boot this linux-image .deb or bzImage, `FILE`, instead"},
					&cli.StringSliceFlag{Name: "module", Usage: "with --vm: load module `KO` (a .ko file) in each guest at boot (repeatable), e.g. your qdisc"},
					&cli.IntFlag{Name: "memory", Value: 512, Usage: "with --vm: `MIB` of memory per guest"},
					&cli.DurationFlag{Name: "rtt", Usage: "with --vm --router: emulate a path of round-trip time `DURATION` (e.g. 50ms), netem on both endpoints (half each way), put on and taken off by every run like a setup"},
					&cli.StringFlag{Name: "loss", Usage: "with --vm --router: netem drops `PERCENT` of the packets each way on the endpoints, e.g. 0.5%"},
					&cli.BoolFlag{Name: "router", Usage: "with --vm: a third guest between client and server that forwards; the setups apply to its two devices, and no local sender's TCP small queues shapes its queue"},
					&cli.StringFlag{Name: "user", Usage: "log in to the lab's hosts as `USER`, not root (a system user is made when missing; the lab's home becomes its)"},
					&cli.BoolFlag{Name: "sudo", Usage: "with --user: let the user run the agent as root through sudo without a password (a rule in /etc/sudoers.d for this lab only, removed by testbed down)"},
					&cli.BoolFlag{Name: "ipv6", Usage: "dual-stack test link: 2001:2:0:N::1 and ::2/64 beside the IPv4 addresses; the inventory's test_ip is the IPv6 one"},
					&cli.IntFlag{Name: "pairs", Value: 1, Usage: "`N` client/server pairs over the one test link: pair K > 1 is clientK behind client and serverK behind server, routed through them (the inventory lists pairs:)"},
				}, labFlags("")...),
				Action: func(ctx context.Context, c *cli.Command) error {
					if c.Bool("vm") {
						return vmUp(ctx, c)
					}
					for _, f := range []string{"kernel", "module", "memory", "router"} {
						if c.IsSet(f) {
							return usagef(c, "--%s is for the VM lab: add --vm", f)
						}
					}
					for _, f := range []string{"rtt", "loss"} {
						if c.IsSet(f) {
							// This machine's kernel has no netem either (testbed facts).
							return usagef(c, "--%s is for the VM lab with a router (testbed up --vm --router --%s ...): the local lab's two devices are both bottlenecks, so netem there would replace the qdisc under test", f, f)
						}
					}
					lab, err := testbed.Up(ctx, labOptions(c, ""), c.String("out"))
					if err != nil {
						return err
					}
					more := ""
					if len(lab.Hosts) > 2 {
						more = fmt.Sprintf(" (and %d more pairs behind them)", len(lab.Hosts)/2-1)
					}
					fmt.Fprintf(c.Root().Writer, "lab %s is up: client %s, server %s%s; inventory %s\n", lab.Name, lab.Hosts[0].NetNS, lab.Hosts[1].NetNS, more, lab.Inventory)
					return nil
				},
			},
			{
				Name:  "image",
				Usage: "build (once, into the cache) the VM lab's guest image and print its folder: vmlinuz, initrd.gz, kver, sch_dualpi2.ko",
				UsageText: "bloatbench testbed image [--kernel LINUX_IMAGE.deb]\n\nExample:\n   bloatbench testbed image\n" +
					"   bloatbench testbed up --vm --module \"$(bloatbench testbed image)/sch_dualpi2.ko\"",
				Flags: []cli.Flag{&cli.StringFlag{Name: "kernel", Usage: "build the image for this linux-image .deb, `FILE`, instead"}},
				Action: func(ctx context.Context, c *cli.Command) error {
					img, err := testbed.EnsureImage(ctx, testbed.VMOptions{Kernel: c.String("kernel"), Log: c.Root().ErrWriter})
					if err != nil {
						return err
					}
					fmt.Fprintln(c.Root().Writer, img.Dir)
					return nil
				},
			},
			{
				Name:      "down",
				Usage:     "remove a lab: its namespaces, links, sshd and keys (all labs when no -H or --name)",
				UsageText: "bloatbench testbed down [-H lab.yaml | --name bb0 | --vm]\n\nExample:\n   bloatbench testbed down -H lab.yaml\n   bloatbench testbed down --vm   # every VM lab: guests, taps, bridge, namespace\n   bloatbench testbed down        # every lab",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "hosts", Aliases: []string{"H"}, Usage: "the inventory `FILE` testbed up wrote"},
					&cli.StringFlag{Name: "name", Usage: "the lab's `NAME` (bb0, bbvm0, ...)"},
					&cli.BoolFlag{Name: "vm", Usage: "every VM lab"},
				},
				Action: func(ctx context.Context, c *cli.Command) error {
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
					return testbed.Down(ctx, name, c.Bool("vm"))
				},
			},
		},
	}
}

func vmUp(ctx context.Context, c *cli.Command) error {
	for _, f := range []string{"user", "sudo", "ipv6", "pairs"} {
		if c.IsSet(f) {
			return usagef(c, "--%s is for the local lab (the VM lab logs in as root over IPv4)", f)
		}
	}
	for _, f := range []string{"rtt", "loss"} {
		if c.IsSet(f) && !c.Bool("router") {
			return usagef(c, "--%s needs --router: netem goes on the endpoints behind the router, off the bottleneck (without a router the endpoints' devices are the bottlenecks)", f)
		}
	}
	for _, f := range []string{"queue", "gso"} {
		if c.IsSet(f) {
			return usagef(c, "--%s is for the local lab; in the VM lab a setup chooses queues and offloads (--setup, inventory setups:)", f)
		}
	}
	out := c.String("out")
	if !c.IsSet("out") {
		out = "vmlab.yaml"
	}
	o := testbed.VMOptions{Rate: c.String("rate"), Queues: c.Int("queues"), Kernel: c.String("kernel"),
		Modules: stringSlice(c, "module"), MemoryMB: c.Int("memory"), Router: c.Bool("router"),
		RTT: c.Duration("rtt"), Loss: c.String("loss"), Log: c.Root().ErrWriter}
	lab, err := testbed.UpVM(ctx, o, out)
	if err != nil {
		return err
	}
	var guests []string
	for _, g := range lab.VM.Guests {
		guests = append(guests, fmt.Sprintf("%s on 127.0.0.1:%d", g.Role, g.SSHPort))
	}
	fmt.Fprintf(c.Root().Writer, "VM lab %s is up (kernel %s): %s; inventory %s\n", lab.Name, lab.VM.Kernel, strings.Join(guests, ", "), lab.Inventory)
	return nil
}
