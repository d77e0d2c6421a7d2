package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/batch"
	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/htmlreport"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

func batchCommand() *cli.Command {
	return &cli.Command{
		Name:      "batch",
		Usage:     "run a batch file's tests x setups x repetitions unattended, with a summary, a page of charts and a verdict against a baseline",
		ArgsUsage: "FILE.yaml",
		UsageText: "bloatbench batch [--dry-run] [--no-shuffle] [--baseline DIR] [--note TEXT] [--accept-new-host-keys] [--restore-stale] [--junit FILE] [--metrics FILE] FILE.yaml\n" +
			"bloatbench batch --resume DIR [FILE.yaml]\n\nExamples:\n" +
			"   bloatbench batch --dry-run nightly.yaml\n" +
			"   bloatbench batch --baseline results/nightly-20261129T020000 nightly.yaml\n" +
			"   bloatbench batch --resume results/nightly-20261130T020000\n\n" +
			"Exit codes: 0 every run complete and no regression, 3 a regression against --baseline, 4 runs failed or the batch was interrupted.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"batch-dry-run"}, Usage: "print the run list, in its order, and the commands each run applies; run nothing"},
			&cli.BoolFlag{Name: "no-shuffle", Usage: "run in the file's order (default: shuffled, to spread the lab's drift over the setups)"},
			&cli.StringFlag{Name: "resume", Aliases: []string{"batch-resume"}, Usage: "finish the batch in folder `DIR`: runs whose data files are complete are skipped"},
			&cli.StringFlag{Name: "baseline", Usage: "an earlier batch's folder, `DIR`: judge this batch against it with the file's thresholds"},
			&cli.StringFlag{Name: "note", Usage: "free `TEXT` kept with the batch and at the top of its summary"},
			&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "as for run"},
			&cli.BoolFlag{Name: "restore-stale", Usage: "as for run: restore what an earlier run left (a crashed batch's journal) before the first run, rather than refuse the batch"},
			&cli.StringFlag{Name: "junit", Usage: "also write the runs and the verdict to `FILE` as JUnit XML, for a CI's test report"},
			&cli.StringFlag{Name: "metrics", Usage: "also write the verdict to `FILE` in the Prometheus text format (node_exporter's textfile collector: FILE.prom in its folder)"},
		},
		Action: batchAction,
	}
}

func batchAction(ctx context.Context, c *cli.Command) error {
	file := c.Args().First()
	dir := c.String("resume")
	if file == "" && dir != "" {
		raw, err := os.ReadFile(filepath.Join(dir, batch.PlanFile))
		if err != nil {
			return fmt.Errorf("--resume %s: %w (is it a batch's folder?)", dir, err)
		}
		var p batch.Plan
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("--resume %s: %s: %w", dir, batch.PlanFile, err)
		}
		file = p.BatchFile
	}
	if file == "" || c.NArg() > 1 {
		return usagef(c, "batch needs one batch file, e.g. bloatbench batch nightly.yaml (or --resume DIR)")
	}
	b, err := batch.Load(file)
	if err != nil {
		return err
	}
	if c.Bool("no-shuffle") {
		b.Shuffle = false
	}
	if c.Bool("dry-run") {
		return batchDryRun(c, b)
	}
	co := controller.Options{Inventory: b.Inventory, Version: buildVersion(), CommandLine: os.Args, Log: c.Root().ErrWriter}
	// As run does: the hosts whose devices the runs change get a root agent.
	co.ChangesDevices = b.Inventory.Netem != nil || b.SetsSysctls
	co.SetsSysctls = b.SetsSysctls
	for _, s := range b.Setups {
		co.ChangesDevices = co.ChangesDevices || s != nil
		co.SetsSysctls = co.SetsSysctls || s != nil && len(s.Sysctls) > 0
	}
	if co.Self, co.SelfHash, err = selfBinary(); err != nil {
		return err
	}
	if co.Dialer, err = remote.NewDialer(c.Bool("accept-new-host-keys"), c.Root().ErrWriter); err != nil {
		return err
	}
	// An earlier run's unrestored journal would fail every run of the batch: it is
	// found (and with --restore-stale restored) once, before the first.
	sess, err := controller.Connect(ctx, co)
	if err != nil {
		return err
	}
	err = restoreStale(ctx, c, sess, co)
	sess.Close()
	if err != nil {
		return err
	}
	o := batch.Options{Batch: b, Dir: dir, Resume: dir != "", Note: c.String("note"), Controller: co, Baseline: c.String("baseline"), Log: c.Root().ErrWriter,
		JUnit: c.String("junit"), Metrics: c.String("metrics")}
	if o.Dir == "" {
		o.Dir = batch.NewDir(b, time.Now())
	}
	res, err := batch.Execute(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Root().Writer, "batch %s: %d of %d runs complete, %d failed%s; %s\n", b.Name, res.Done, res.Runs, len(res.Failed),
		map[bool]string{true: ", interrupted"}[res.Interrupted], filepath.Join(res.Dir, batch.SummaryFile))
	if o.Baseline != "" {
		fmt.Fprintf(c.Root().Writer, "verdict against %s: %d regression(s); %s\n", o.Baseline, batch.Regressions(res.Checks), filepath.Join(res.Dir, batch.VerdictFile))
		for _, ch := range res.Checks {
			if ch.Regression {
				test := ch.Test
				if ch.Streams != "" {
					test += " (" + ch.Streams + ")"
				}
				fmt.Fprintf(c.Root().Writer, "  REGRESSION %s, %s: %s %.2f -> %.2f %s (%+.1f%%, threshold %s)\n", test, ch.Setup, ch.Metric,
					ch.Baseline, ch.Current, ch.Units, ch.Change*100, ch.Threshold)
			}
		}
	}
	if code := res.ExitCode(); code != 0 {
		why := "runs failed"
		if res.Interrupted {
			why = "interrupted; --resume " + res.Dir + " runs what is left"
		} else if code == batch.ExitRegression {
			why = "regression"
		}
		return cli.Exit("batch "+b.Name+": "+why, code)
	}
	return nil
}

// batchDryRun prints the run list in order and what each setup does.
func batchDryRun(c *cli.Command, b *batch.Batch) error {
	w := c.Root().Writer
	order := batch.Order(b.Runs, b.Shuffle, uint64(time.Now().UnixNano()))
	how := "in the file's order"
	if b.Shuffle {
		how = "shuffled (each batch draws its own order; --no-shuffle keeps the file's)"
	}
	fmt.Fprintf(w, "batch %s: %d runs on %s, %s, each %v with %v before and after, step %v, %v apart\n",
		b.Name, len(order), b.Inventory.Path, how, b.Length, b.Delay, b.Step, b.Pause)
	for i, id := range order {
		fmt.Fprintf(w, "%4d  %s\n", i+1, id)
	}
	// The time the runs are planned to take; what else each run does takes seconds
	// a host, but nothing measures it in advance.
	pauses := ""
	if b.Pause > 0 && len(order) > 1 {
		pauses = fmt.Sprintf(" and %d pauses of %v", len(order)-1, b.Pause)
	}
	fmt.Fprintf(w, "at least %s of tests: %d runs of %v%s; connecting, the setups and the before and after commands take more\n",
		hms(batch.PlannedTime(b, len(order))), len(order), b.Length+2*b.Delay, pauses)
	for _, cmd := range b.Before {
		fmt.Fprintf(w, "before each run, on %s: %s\n", cmd.Host, cmd.Run)
	}
	for _, cmd := range b.After {
		fmt.Fprintf(w, "after each run, on %s: %s\n", cmd.Host, cmd.Run)
	}
	for _, s := range b.Setups {
		if s == nil {
			continue
		}
		for _, bn := range b.Inventory.Bottleneck {
			queues := ""
			if s.MQ != nil || s.BQL != nil {
				// The tx queue count is the device's, read when the run starts.
				queues = " (shown for 4 tx queues)"
			}
			fmt.Fprintf(w, "\n# setup %s (%s) on %s:%s%s\n%s", s.Name, s.Title, bn.Host, bn.Dev, queues, qdisc.Script(s.Commands(bn.Dev, 4)))
			if ch := s.Changes(bn.Dev); len(ch) > 0 {
				fmt.Fprintf(w, "# during each run, from its start:\n# %s\n", strings.Join(ch, "\n# "))
			}
		}
		for _, p := range b.Inventory.PathDevices {
			if ops := s.PathCommands(p.Dev); ops != nil {
				fmt.Fprintf(w, "\n# setup %s's path emulation on %s:%s\n%s", s.Name, p.Host, p.Dev, qdisc.Script(ops))
			}
		}
	}
	return nil
}

// hms is d as H:MM:SS, to the second.
func hms(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
}

func historyCommand() *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "draw each metric's trend over batches, one chart per test and setup, with the baseline's range",
		ArgsUsage: "BATCH_DIR...",
		UsageText: "bloatbench history [-o history.html] [--baseline DIR] [--metric NAME ...] BATCH_DIR...\n\nExample:\n" +
			"   bloatbench history -o trend.html --baseline results/baseline results/nightly-*",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "history.html", Usage: "the page (`FILE`) to write"},
			&cli.StringFlag{Name: "baseline", Usage: "a batch folder, `DIR`, whose runs' range each chart shows as a band"},
			&cli.StringSliceFlag{Name: "metric", Usage: "a side-by-side `METRIC` to draw (repeatable; default: Ping (ms) ICMP loaded median and the TCP sums)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return usagef(c, "history needs batch folders, oldest first: bloatbench history results/nightly-*")
			}
			metrics := stringSlice(c, "metric")
			if len(metrics) == 0 {
				metrics = batch.HistoryMetrics
			}
			hs, err := batch.Histories(ctx, c.Args().Slice(), c.String("baseline"), metrics)
			if err != nil {
				return err
			}
			f, err := os.Create(c.String("output"))
			if err != nil {
				return fmt.Errorf("history: %w", err)
			}
			defer f.Close()
			if err := htmlreport.WriteHistory(f, "bloatbench history", hs); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("history: %w", err)
			}
			fmt.Fprintf(c.Root().ErrWriter, "history: %d charts over %d batches in %s\n", len(hs), c.NArg(), c.String("output"))
			return nil
		},
	}
}
