package controller

// A run's options, and their checks before any host is touched.

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/runners"
	"github.com/bloatbench/bloatbench/tests"
)

// Options of one run.
type Options struct {
	Inventory *inventory.Inventory
	Plan      *tests.Plan
	Title     string
	Length    time.Duration
	Step      time.Duration
	Delay     time.Duration
	OutputDir string
	Dialer    *remote.Dialer
	// dial, when set, connects to a host instead of Dialer: a test's fake hosts,
	// whose agents run in the test's process. Like Dialer, it is the session's.
	dial func(ctx context.Context, h *inventory.Host) (hostConn, error)
	// Self is the controller's executable, what is copied to endpoints as the
	// agent, and SelfHash waits for its SHA-256 (remote.HashLater): a binary of
	// tens of MB takes tens of ms of CPU to hash, which the SSH logins hide.
	Self        string
	SelfHash    func() (string, error)
	Version     string
	CommandLine []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Setup is applied to every bottleneck device for the run and undone after; nil
	// leaves the bottlenecks as they are (their statistics are sampled all the same).
	Setup *qdisc.Setup
	// JournalDir is where the undo journal goes ("" = qdisc.JournalDir()).
	JournalDir string
	// MarkDir is where on each host its marks of unrestored runs go ("" =
	// qdisc.MarkDir; tests, whose fake hosts are this machine, give their own).
	MarkDir string
	// Note is free text kept in the data file (--note).
	Note string
	// Progress, when set, hears how the run goes as samples arrive: a progress bar's
	// feed. It is called from the agents' readers and must not block.
	Progress func(Progress)
	// ChangesDevices says the session's runs apply setups: their bottleneck hosts
	// need root, so a login that is not root runs the agent there through sudo
	// (inventory.Host.UseSudo). The other hosts' agents run as the login user.
	ChangesDevices bool
	// SetsSysctls says a setup of the session sets sysctls, which it does on every
	// host of the run: every host then needs root.
	SetsSysctls bool
}

// Check validates the options' numbers.
func (o *Options) Check() error {
	switch {
	case o.Length <= 0:
		return fmt.Errorf("--length %v: must be more than 0", o.Length)
	case o.Step < time.Duration(runners.MinPingInterval*float64(time.Second)):
		return fmt.Errorf("--step %v: must be at least 10ms", o.Step)
	case o.Step > o.Length:
		return fmt.Errorf("--step %v is longer than --length %v", o.Step, o.Length)
	case o.Delay < 0:
		return fmt.Errorf("--delay %v: must not be negative", o.Delay)
	}
	if err := o.Setup.ScheduleFits(o.Length + 2*o.Delay); err != nil {
		return err
	}
	if o.Plan == nil {
		return nil
	}
	// A job's times are sums of the run's delay and length: whether they fit
	// depends on this run's numbers.
	tm := tests.Timing{Delay: o.Delay.Seconds(), Length: o.Length.Seconds()}
	total := tm.Length + 2*tm.Delay
	for _, j := range o.Plan.Jobs {
		start, dur := j.Start.Eval(tm), j.Duration.Eval(tm)
		switch {
		case start < 0 || start >= total:
			return fmt.Errorf("test %s: job %s starts at %v = %gs: with --length %v and --delay %v it must be from 0 to before %gs",
				o.Plan.Test, j.Name, j.Start, start, o.Length, o.Delay, total)
		case !j.Background && dur <= 0:
			return fmt.Errorf("test %s: job %s runs for %v = %gs with --length %v and --delay %v: give a delay or length that leaves it time",
				o.Plan.Test, j.Name, j.Duration, dur, o.Length, o.Delay)
		case !j.Background && start+dur > total+1e-9:
			return fmt.Errorf("test %s: job %s ends at %gs, after the run's %gs (length + 2 delay)", o.Plan.Test, j.Name, start+dur, total)
		}
	}
	return nil
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}
