package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/flentfile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/report"
	"github.com/bloatbench/bloatbench/testbed"
	"github.com/bloatbench/bloatbench/tests"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a test between the inventory's client and server, record it, and print its summary",
		ArgsUsage: "TEST|TEST_FILE",
		UsageText: "bloatbench run -H hosts.yaml|local|HOST [--setup NAME ...] [--repeat N] [options] TEST\n\nExamples:\n" +
			"   bloatbench run -H local tcp_4down\n" +
			"   bloatbench run -H 10.0.0.2 -l 30 tcp_4down\n" +
			"   bloatbench run -H server.lab --test-ip 192.168.7.2 --bottleneck server:eth1 --setup cake -l 30 tcp_4down\n" +
			"   bloatbench run -H hosts.yaml --setup mq+dualpi2 --setup mq+fq_codel --setup mq+fq_pie -l 60 tcp_4down\n" +
			"   bloatbench run -H local --local-rate 100mbit --local-gso off -l 30 -t 'htb 100mbit' tcp_4down\n" +
			"   bloatbench run -H hosts.yaml --te download_streams=8 --te cc=bbr -l 60 -t 'MQ + FQ_CODEL' tcp_ndown",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "hosts", Aliases: []string{"H"}, Required: true, Usage: "the inventory `FILE`; local: a local lab brought up for this run and taken down after (needs root); or, as flent takes it, the far end: a HOST reached over SSH as ~/.ssh/config says, with this machine the client"},
			&cli.StringFlag{Name: "test-ip", Usage: "with -H HOST: the far end's `ADDRESS` on the test network (default: HOST's own address)"},
			&cli.StringSliceFlag{Name: "bottleneck", Usage: "with -H HOST: a device a setup changes and the run samples, `HOST:DEV` with HOST client (this machine) or server (repeatable), e.g. server:eth1"},
			&cli.StringFlag{Name: "length", Aliases: []string{"l"}, Value: "60", Usage: "how long the streams run: `SECONDS`, or a duration like 90s"},
			&cli.StringFlag{Name: "step", Aliases: []string{"s", "step-size"}, Value: "0.2", Usage: "sampling and ping interval: `SECONDS` (at least 0.01), or a duration like 200ms"},
			&cli.StringFlag{Name: "delay", Aliases: []string{"d"}, Value: "5", Usage: "idle ping before the streams start and after they end: `SECONDS` or a duration"},
			&cli.StringFlag{Name: "title", Aliases: []string{"t", "title-extra"}, Usage: "the run's title (`TEXT`), shown in its summary"},
			&cli.StringSliceFlag{Name: "te", Aliases: []string{"test-parameter"}, Usage: "set a test parameter, `KEY=VALUE` (repeatable); bloatbench tests lists them"},
			&cli.StringSliceFlag{Name: "sampler", Usage: "also sample `KIND[@ROLE]` each step on the hosts of ROLE, client, server or bottleneck (repeatable), e.g. cpu@server; without @ROLE, on every host"},
			&cli.StringSliceFlag{Name: "no-sampler", Usage: "leave out the default sampler `KIND` (repeatable): sojourn (the qdiscs' per-packet sojourn, BPF) or qdisc (tc's statistics)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o", "data-dir"}, Value: "results", Usage: "the folder (`DIR`) for data files"},
			&cli.StringSliceFlag{Name: "setup", Usage: "apply qdisc setup `NAME` to every bottleneck for a run, and undo it after (repeatable: one run per setup, in order); bloatbench setups lists them"},
			&cli.IntFlag{Name: "repeat", Value: 1, Usage: "run the whole cycle of setups `N` times"},
			&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "add unknown host keys to known_hosts (OpenSSH's StrictHostKeyChecking=accept-new); changed keys are refused all the same"},
			&cli.StringFlag{Name: "heading", Usage: "with several setups or --repeat: the condition `TEXT` in the comparison's heading, e.g. \"Unshaped 1gigE\""},
			&cli.BoolFlag{Name: "flent", Usage: "also write each run as a .flent.gz that flent 2.1.1 loads, beside its data file"},
			&cli.StringFlag{Name: "note", Usage: "free `TEXT` kept in the data file (summary --meta prints it)"},
			&cli.BoolFlag{Name: "restore-stale", Usage: "when a journal an earlier run left (killed, or not put back) names a device or host of this run, restore it first (as bloatbench restore does), rather than refuse to run"},
		}, append(reportFlags(), labFlags("local-")...)...),
		Action: runAction,
	}
}

// maxDuration bounds --length, --step and --delay: a week. More is a slip of the
// keyboard (60000 for 60), and converting NaN, infinities or 1e300 seconds to a
// time.Duration gives nonsense (NaN becomes -292 years).
const maxDuration = 7 * 24 * time.Hour

// parseSeconds reads "60", "0.2" (seconds) or "90s", "200ms" (Go durations), within
// a week either way.
func parseSeconds(flag, s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.Abs(f) > maxDuration.Seconds() {
			return 0, fmt.Errorf("--%s %q: write seconds up to %.0f (a week), e.g. 60 or 0.2", flag, s, maxDuration.Seconds())
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: write seconds (60, 0.2) or a duration (90s, 200ms)", flag, s)
	}
	if d > maxDuration || d < -maxDuration {
		return 0, fmt.Errorf("--%s %q: at most %v (a week)", flag, s, maxDuration)
	}
	return d, nil
}

// checkSteps refuses a run whose data file readers would refuse: its step grid,
// (length + 2 delay) / step, must stay within datafile.MaxGridPoints.
func checkSteps(length, step, delay time.Duration) error {
	total := (length + 2*delay).Seconds()
	if n := datafile.GridPoints(total, step.Seconds()); n > datafile.MaxGridPoints {
		return fmt.Errorf("--step %v with --length %v and --delay %v is %.0f steps: reports read at most %d; make --step longer or the run shorter",
			step, length, delay, n, datafile.MaxGridPoints)
	}
	return nil
}

func runAction(ctx context.Context, c *cli.Command) error {
	if c.NArg() != 1 {
		return usagef(c, "run needs one test: a name, e.g. bloatbench run -H local tcp_4down (bloatbench tests lists them), or a test file's path (./my_test.yaml)")
	}
	def, err := tests.Get(c.Args().First())
	if err != nil {
		return err
	}
	set := map[string]string{}
	for _, kv := range stringSlice(c, "te") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usagef(c, "--te %q: write KEY=VALUE, e.g. --te download_streams=4", kv)
		}
		set[k] = v
	}
	plan, err := def.Resolve(set)
	if err != nil {
		return err
	}
	for _, smp := range stringSlice(c, "sampler") {
		if err := plan.AddSampler(smp); err != nil {
			return err
		}
	}
	for _, smp := range stringSlice(c, "no-sampler") {
		if err := plan.RemoveSampler(smp); err != nil {
			return asUsage(c, err)
		}
	}
	o := controller.Options{Plan: plan, Title: c.String("title"), OutputDir: c.String("output"), Note: c.String("note"),
		Version: buildVersion(), CommandLine: os.Args, Log: c.Root().ErrWriter}
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{"length", &o.Length}, {"step", &o.Step}, {"delay", &o.Delay}} {
		if *f.dst, err = parseSeconds(f.name, c.String(f.name)); err != nil {
			return asUsage(c, err)
		}
	}
	if err := o.Check(); err != nil {
		return asUsage(c, err)
	}
	if err := checkSteps(o.Length, o.Step, o.Delay); err != nil {
		return asUsage(c, err)
	}
	ropts, cols, err := reportOptions(c)
	if err != nil {
		return err
	}
	// A cut past the run's end would print N/A in every row of its summary.
	if total := (o.Length + 2*o.Delay).Seconds(); cutBeyond(ropts.Cut, total) != "" {
		return usagef(c, "--cut %s: the run is %gs long (--length %v and --delay %v before and after): %s; give START and END within it, or an END of 0 or less to count back from its end",
			c.String("cut"), total, o.Length, o.Delay, cutBeyond(ropts.Cut, total))
	}
	if o.Self, o.SelfHash, err = selfBinary(); err != nil {
		return err
	}
	if o.Dialer, err = remote.NewDialer(c.Bool("accept-new-host-keys"), c.Root().ErrWriter); err != nil {
		return err
	}

	invPath := c.String("hosts")
	farEnd := invPath != "local" && !isInventoryPath(invPath)
	if !farEnd && (c.IsSet("test-ip") || c.IsSet("bottleneck")) {
		return usagef(c, "--test-ip and --bottleneck go with -H HOST (the far end, this machine the client); an inventory names its hosts' test_ip and bottleneck devices itself")
	}
	if farEnd {
		if err := inventory.CheckFarEnd(inventory.FarEnd{SSH: invPath, TestIP: c.String("test-ip"), Bottlenecks: stringSlice(c, "bottleneck")}); err != nil {
			return asUsage(c, err)
		}
	}
	if invPath == "local" {
		lab, err := testbed.Up(ctx, labOptions(c, "local-"), "")
		if err != nil {
			return err
		}
		defer func() {
			// Taken down even when the run was interrupted.
			if err := testbed.Down(context.WithoutCancel(ctx), lab.Name, false); err != nil {
				fmt.Fprintln(c.Root().ErrWriter, "bloatbench: take the local lab down:", err)
			}
		}()
		invPath = lab.Inventory
		if o.Title == "" {
			o.Title = "local lab"
		}
	}
	title := o.Title
	if farEnd {
		if o.Inventory, err = controller.FarEndInventory(ctx, o.Dialer, invPath, c.String("test-ip"), stringSlice(c, "bottleneck")); err != nil {
			return err
		}
		if title == "" {
			title = invPath
		}
	} else {
		if _, err := os.Stat(invPath); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("-H %s: no such inventory file (for a far end as flent takes it, with this machine the client, give its name or address: -H 10.0.0.2)", invPath)
		}
		if o.Inventory, err = inventory.Load(invPath); err != nil {
			return err
		}
		if title == "" {
			title = strings.TrimSuffix(filepath.Base(invPath), filepath.Ext(invPath))
		}
	}
	if c.Int("repeat") < 1 {
		return usagef(c, "--repeat %d: must be at least 1", c.Int("repeat"))
	}
	var setups []*qdisc.Setup
	for _, name := range stringSlice(c, "setup") {
		s, err := qdisc.Resolve(name, o.Inventory)
		if err != nil {
			return err
		}
		if err := s.ScheduleFits(o.Length + 2*o.Delay); err != nil {
			return err
		}
		setups = append(setups, s)
	}
	// A test that needs something of its setup is refused before any host is
	// touched, for every setup of the command (or for none).
	if len(setups) == 0 {
		if err := plan.CheckSetup(nil, qdisc.PathHasL4S(nil, o.Inventory)); err != nil {
			return err
		}
	}
	for _, s := range setups {
		if err := plan.CheckSetup(s, qdisc.PathHasL4S(s, o.Inventory)); err != nil {
			return err
		}
		if _, err := plan.SetupFor(s); err != nil {
			return err
		}
	}
	// One SSH login and one agent per host for every run of the command; with setups,
	// the bottleneck hosts' agents run as root (through sudo for a login that is not).
	// The test's flows may need sysctls set (tcp_ecn for ecn:), on every host.
	o.ChangesDevices = len(setups) > 0 || o.Inventory.Netem != nil || len(plan.Sysctls) > 0
	o.SetsSysctls = len(plan.Sysctls) > 0
	for _, s := range setups {
		o.SetsSysctls = o.SetsSysctls || len(s.Sysctls) > 0
	}
	sess, err := controller.Connect(ctx, o)
	if err != nil {
		return err
	}
	defer sess.Close()
	// Without setups there is no preflight: each run's own check, with the devices
	// locked and before any change, is the first, and the same.
	if len(setups) > 0 || c.Bool("restore-stale") {
		if err := restoreStale(ctx, c, sess, o); err != nil {
			return err
		}
	}
	if len(setups) > 0 {
		// Every setup is tried on every bottleneck host before any traffic: a kernel
		// without the qdisc fails here, with the fix, and no host is changed.
		fmt.Fprintln(c.Root().ErrWriter, "preflight:")
		if problems := sess.Preflight(ctx, setups, c.Root().ErrWriter); len(problems) > 0 {
			return fmt.Errorf("preflight found %d problem(s); nothing was run and no host was changed", len(problems))
		}
	}
	cycle := setups
	if len(cycle) == 0 {
		cycle = []*qdisc.Setup{nil}
	}
	// Every setup, --repeat times over, as one sequence of the controller's: one
	// failure policy with batch (a failed run is said and the next goes on; an
	// interruption, or a host not put back, stops the command).
	var steps []controller.Step
	for range c.Int("repeat") {
		for _, s := range cycle {
			ro := o
			ro.Setup = s
			ro.Title = title
			if s != nil {
				switch {
				case o.Title == "":
					ro.Title = s.Title
				case len(setups) > 1:
					ro.Title = fmt.Sprintf("%s (%s)", o.Title, s.Title)
				}
			}
			steps = append(steps, controller.Step{Options: ro})
		}
	}
	var paths []string
	prog := newRunProgress(c.Root().ErrWriter, len(cycle), c.Int("repeat"))
	seq := controller.Sequence{Steps: steps, Session: sess, Start: func(_ int, ro controller.Options) controller.Options { return prog.start(ro) },
		Ended: func(_ int, path string, err error) error {
			// The bar ends before the summary: stdout may be the terminal it is drawn on.
			prog.end()
			if path != "" {
				paths = append(paths, path)
				if perr := printRun(c, path, ropts, cols); perr != nil {
					// The data file is kept; a summary that cannot be read or
					// printed ends the command.
					return errors.Join(err, perr)
				}
			}
			// A failure that ends the command is its error; one the next run
			// goes on after is said here.
			if err != nil && len(steps) > 1 && ctx.Err() == nil && !errors.Is(err, controller.ErrNotRestored) {
				fmt.Fprintln(c.Root().ErrWriter, "bloatbench:", err)
			}
			return nil
		}}
	res, err := seq.Execute(ctx)
	switch {
	case err != nil:
		return err
	case res.Stopped != nil:
		return res.Stopped
	case res.Interrupted && len(res.Failures) > 0:
		return res.Failures[len(res.Failures)-1]
	case res.Interrupted:
		// Between two runs: the ones before are complete, and printed.
		return fmt.Errorf("interrupted after %d of %d runs: %w", res.Ran, len(steps), context.Cause(ctx))
	case len(steps) == 1 && len(res.Failures) == 1:
		return res.Failures[0]
	}
	failures := res.Failures
	if len(paths) > 1 {
		// The cover letter's layout and the side-by-side table, from the data files.
		fmt.Fprintln(c.Root().Writer)
		if err := compareFiles(ctx, c, paths, ropts, cols); err != nil {
			return err
		}
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d runs failed (their errors are above)", len(failures), len(steps))
	}
	return nil
}

// isInventoryPath says whether -H names an inventory file rather than a far end: a
// file that is there, or what can only be meant as one (a path with a slash, a
// .yaml or .yml name), which then fails to load with the file's error; anything else
// is a host, as flent's -H is.
func isInventoryPath(s string) bool {
	if _, err := os.Stat(s); err == nil {
		return true
	}
	ext := strings.ToLower(filepath.Ext(s))
	return strings.ContainsRune(s, '/') || ext == ".yaml" || ext == ".yml"
}

// restoreStale refuses the run, naming the journals and the fix, when an earlier
// run's journal that was never restored holds one of its devices or hosts: the run
// would measure on top of that run's setup and take it for the hosts' own state. With
// --restore-stale it restores them first, as `bloatbench restore` would, and says so.
// Each run checks again with its devices locked; this check comes first so that
// nothing (not even the preflight) runs on a host that is not as it was found.
func restoreStale(ctx context.Context, c *cli.Command, sess *controller.Session, o controller.Options) error {
	err := sess.StaleJournals(ctx, o)
	var se *controller.StaleJournalsError
	if err == nil || !errors.As(err, &se) || !c.Bool("restore-stale") {
		return err
	}
	fmt.Fprintf(c.Root().ErrWriter, "--restore-stale: restoring what earlier runs left first, from %s\n", strings.Join(se.Paths(), ", "))
	if err := controller.Restore(ctx, o, se.Paths(), false, c.Root().Writer); err != nil {
		return fmt.Errorf("--restore-stale: %w; nothing was run", err)
	}
	if err := sess.StaleJournals(ctx, o); err != nil {
		return fmt.Errorf("--restore-stale: after restoring: %w", err)
	}
	fmt.Fprintln(c.Root().ErrWriter, "--restore-stale: the hosts are back as those runs found them; this run goes on")
	return nil
}

// selfBinary is this executable, the agent copied to hosts, and what waits for its
// SHA-256, hashed meanwhile.
func selfBinary() (path string, hash func() (string, error), err error) {
	if path, err = os.Executable(); err != nil {
		return "", nil, fmt.Errorf("find own executable: %w", err)
	}
	return path, remote.HashLater(path), nil
}

// printRun prints the summary of the run whose data file is path (also of a run that
// failed part way), and its warnings and files on stderr.
func printRun(c *cli.Command, path string, ro report.Options, cols report.Columns) error {
	run, err := datafile.Read(path)
	if err != nil {
		return err
	}
	sum := report.SummarizeWith(run, ro)
	if err := report.Write(c.Root().Writer, c.String("format"), []report.Summary{sum}, cols); err != nil {
		return err
	}
	// The run's queue was not where it was tested, or drained slower than
	// configured, or its flows were held back by a window rather than the
	// bottleneck: said on stderr too, where a run's warnings go, and not only in
	// the table a script may not read.
	for _, w := range slices.Concat(sum.LimitWarnings, sum.QueueWarnings) {
		fmt.Fprintln(c.Root().ErrWriter, "warning:", report.EscapeText(w))
	}
	fmt.Fprintf(c.Root().ErrWriter, "data file: %s\n", path)
	if c.Bool("flent") {
		fp, err := flentfile.Export(run, "")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Root().ErrWriter, "flent file: %s\n", fp)
	}
	return nil
}
