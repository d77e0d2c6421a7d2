package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

// rootRunner is what runs a restore's commands as root on a host: the SSH
// connection itself for a root login; for another login, an agent started through
// sudo -n, as a run starts it (the host's inventory entry, sudo: included, is in the
// journal). The agent ends when conn closes.
func rootRunner(ctx context.Context, c *cli.Command, conn *remote.Conn, h *inventory.Host) (qdisc.Runner, error) {
	sudo, err := h.UseSudo(conn.Target.User, true)
	if err != nil || !sudo {
		return conn, err
	}
	self, hashed, err := selfBinary()
	if err != nil {
		return nil, err
	}
	selfHash, err := hashed()
	if err != nil {
		return nil, err
	}
	proc, err := conn.StartAgent(ctx, remote.AgentOptions{Self: self, SelfHash: selfHash, AgentPath: h.AgentPath, Sudo: true})
	if err != nil {
		return nil, err
	}
	cl := agent.NewClient(h.Name, proc.Stdout, proc.Stdin, quietHandler{})
	hctx, cancel := context.WithTimeout(ctx, conn.Target.CommandTimeout)
	defer cancel()
	if _, err := cl.Hello(hctx); err != nil {
		return nil, fmt.Errorf("host %s: start the agent through sudo: %w", h.Name, err)
	}
	return agentRunner{cl, conn.Target.CommandTimeout}, nil
}

// hostAddr is the address a host's device locks key on, as a run's do: the SSH
// address, or "local" for this machine (ssh: local).
func hostAddr(d *remote.Dialer, h *inventory.Host) (string, error) {
	if h.Local() {
		return inventory.LocalSSH, nil
	}
	t, err := d.Resolve(h)
	if err != nil {
		return "", err
	}
	return t.Addr, nil
}

// hostRunner runs a restore's commands as root on h: over SSH (rootRunner), or on
// this machine for ssh: local, which needs this process to be root, as the run that
// changed it was. done ends the connection.
func hostRunner(ctx context.Context, c *cli.Command, d *remote.Dialer, h *inventory.Host) (qdisc.Runner, func(), error) {
	if h.Local() {
		if os.Geteuid() != 0 {
			return nil, nil, fmt.Errorf("host %s is this machine (ssh: local), and restoring its devices or sysctls needs root: run sudo bloatbench restore", h.Name)
		}
		return remote.Local{Name: h.Name, CommandTimeout: h.CommandTimeout.Or(remote.DefaultCommandTimeout)}, func() {}, nil
	}
	t, err := d.Resolve(h)
	if err != nil {
		return nil, nil, err
	}
	conn, err := d.DialTarget(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	r, err := rootRunner(ctx, c, conn, h)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return r, func() { conn.Close() }, nil
}

// agentRunner runs commands through an agent's exec op.
type agentRunner struct {
	c       *agent.Client
	timeout time.Duration
}

func (a agentRunner) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	return a.c.Output(ctx, cmd, stdin, a.timeout)
}

// quietHandler drops what an agent sends unasked: a restore starts no job.
type quietHandler struct{}

func (quietHandler) Samples(string, map[string][]datafile.Sample) {}
func (quietHandler) JobDone(string, string, error)                {}
func (quietHandler) Log(string, string)                           {}
func (quietHandler) Alert(string, string)                         {}
func (quietHandler) Series(string, string, datafile.Series)       {}

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
			return restoreJournals(ctx, c, d, files, c.Bool("force"))
		},
	}
}

// journalDev is one device of a journal, for the order of restores across journals.
type journalDev struct {
	id  qdisc.HostID
	ssh string // the inventory's SSH destination, for journals without identities
	dev string
}

func (a journalDev) same(b journalDev) bool {
	if a.dev != b.dev {
		return false
	}
	if (a.id.Addr != "" || a.id.ID != "") && (b.id.Addr != "" || b.id.ID != "") {
		return a.id.Same(b.id)
	}
	return a.ssh != "" && a.ssh == b.ssh
}

func devOf(j *qdisc.Journal, host, dev string) journalDev {
	jd := journalDev{id: j.Identities[host], dev: dev}
	if h := j.Hosts[host]; h != nil {
		jd.ssh = h.SSH
	}
	return jd
}

// restoreJournals restores the journals in files, newest first: on a device two
// crashed runs left, the later run's snapshot is the earlier run's setup, so it is
// undone first and the earliest snapshot, the device as first found, comes last.
// A device, or a host's sysctls, is put back only while it is as its run left it
// (unless force); one changed since is left alone, named, and kept in its journal,
// and so is it in every older journal (each would put back a state that is not
// the device's own). What is settled is dropped from its journal, and a journal
// with nothing left is removed.
func restoreJournals(ctx context.Context, c *cli.Command, d *remote.Dialer, files []string, force bool) error {
	var errs []error
	var js []*qdisc.Journal
	for _, f := range files {
		j, err := qdisc.LoadJournal(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		js = append(js, j)
	}
	qdisc.NewestFirst(js)
	// Left: devices and sysctls of hosts a newer journal did not settle.
	var leftDevs, leftHosts []journalDev
	isLeft := func(list []journalDev, x journalDev) bool {
		for _, l := range list {
			if l.same(x) {
				return true
			}
		}
		return false
	}
	for _, j := range js {
		when := j.Created.Format("2006-01-02 15:04:05")
		settled := map[*qdisc.State]bool{}
		var locks []*qdisc.DeviceLock // held until the journal is rewritten or gone
		gone := false
		for _, st := range j.States {
			jd := devOf(j, st.Host, st.Dev)
			if isLeft(leftDevs, jd) {
				errs = append(errs, fmt.Errorf("host %s: %s: left as it is: a newer journal for it was not restored (above); journal %s would put back what it was before that one", st.Host, st.Dev, j.Path()))
				continue
			}
			v, err := restoreDevice(ctx, c, d, j, st, force, &locks)
			if errors.Is(err, qdisc.ErrJournalGone) {
				fmt.Fprintln(c.Root().Writer, err)
				gone = true
				break
			}
			if err != nil {
				leftDevs = append(leftDevs, jd)
				if errors.Is(err, qdisc.ErrChangedSince) {
					err = fmt.Errorf("%w. To put it back as found all the same: bloatbench restore --force --journal %s; to keep it as it is: rm %s", err, j.Path(), j.Path())
				}
				errs = append(errs, err)
				continue
			}
			settled[st] = true
			switch v {
			case qdisc.AsFound:
				fmt.Fprintf(c.Root().Writer, "%s:%s is as setup %s of %s found it already: nothing to do\n", st.Host, st.Dev, j.Setup, when)
			case qdisc.Changed:
				fmt.Fprintf(c.Root().Writer, "restored %s:%s (setup %s of %s), forced: it had been changed since that run left it\n", st.Host, st.Dev, j.Setup, when)
			default:
				fmt.Fprintf(c.Root().Writer, "restored %s:%s (setup %s of %s)\n", st.Host, st.Dev, j.Setup, when)
			}
		}
		// The setup's sysctls, host by host, after the devices as a run does.
		settledHosts := map[string]bool{}
		seen := map[string]bool{}
		for _, sv := range j.Sysctls {
			if gone || seen[sv.Host] {
				continue
			}
			seen[sv.Host] = true
			jd := devOf(j, sv.Host, "")
			if isLeft(leftHosts, jd) {
				errs = append(errs, fmt.Errorf("host %s: sysctls left as they are: a newer journal for them was not restored (above)", sv.Host))
				continue
			}
			out, err := restoreSysctls(ctx, c, d, j, sv.Host, force)
			if err != nil {
				leftHosts = append(leftHosts, jd)
				if errors.Is(err, qdisc.ErrChangedSince) {
					err = fmt.Errorf("%w. To put them back as found all the same: bloatbench restore --force --journal %s", err, j.Path())
				}
				errs = append(errs, err)
				continue
			}
			settledHosts[sv.Host] = true
			if len(out.Restored) == 0 {
				fmt.Fprintf(c.Root().Writer, "the sysctls of %s are as setup %s of %s found them already: nothing to do\n", sv.Host, j.Setup, when)
			} else {
				fmt.Fprintf(c.Root().Writer, "restored the sysctls of %s (setup %s of %s): %s\n", sv.Host, j.Setup, when, strings.Join(out.Restored, ", "))
			}
		}
		if !gone {
			if err := j.Keep(func(st *qdisc.State) bool { return !settled[st] }, func(h string) bool { return !settledHosts[h] }); err != nil {
				errs = append(errs, err)
			}
		}
		for _, l := range locks {
			l.Unlock()
		}
	}
	return errors.Join(errs...)
}

// restoreDevice restores one device of a journal, holding its lock (appended to
// locks, for the caller to release once the journal is rewritten). The host must
// still be the one the journal was written on: another machine now at the address
// has a device of that name that is not the journal's to undo.
func restoreDevice(ctx context.Context, c *cli.Command, d *remote.Dialer, j *qdisc.Journal, st *qdisc.State, force bool, locks *[]*qdisc.DeviceLock) (qdisc.Verdict, error) {
	h := j.Hosts[st.Host]
	if h == nil {
		return 0, fmt.Errorf("host %s: journal %s names no such host", st.Host, j.Path())
	}
	addr, err := hostAddr(d, h)
	if err != nil {
		return 0, err
	}
	// Refused, naming the holder, while a run or another restore has the device.
	l, err := j.LockForRestore(st, addr)
	if err != nil {
		return 0, err
	}
	*locks = append(*locks, l)
	r, done, err := hostRunner(ctx, c, d, h)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := sameMachine(ctx, r, j, st.Host, force); err != nil {
		return 0, err
	}
	v, err := qdisc.RestoreJournaled(ctx, r, st, j.AppliedOf(st.Host, st.Dev), force)
	if err == nil {
		removeMark(ctx, c, r, j, st.Host, st.Dev)
	}
	return v, err
}

// removeMark removes the host's mark of a device (or, dev "", of its sysctls) once it
// is settled; one left would only ask for a restore that finds nothing to do.
func removeMark(ctx context.Context, c *cli.Command, r qdisc.Runner, j *qdisc.Journal, host, dev string) {
	id := j.Identities[host].ID
	if id == "" {
		return
	}
	if err := qdisc.RemoveMark(ctx, r, host, qdisc.MarkPath(qdisc.MarkDir, id, dev), j.Path()); err != nil {
		fmt.Fprintln(c.Root().ErrWriter, "bloatbench: warning:", err)
	}
}

// sameMachine refuses a host that is not the one the journal recorded (unless
// forced): an address can name another machine, or a new lab namespace, by now.
func sameMachine(ctx context.Context, r qdisc.Runner, j *qdisc.Journal, host string, force bool) error {
	want := j.Identities[host].ID
	if want == "" || force {
		return nil
	}
	got, err := qdisc.HostIdentity(ctx, r)
	if err != nil || got == want {
		return nil // one that cannot say is taken at its address, as before identities
	}
	return fmt.Errorf("host %s: %w: it is %q now, and was %q when journal %s was written: another machine (or network namespace) is at its address, whose devices are not that run's to undo, so bloatbench leaves it alone (--force to restore all the same; rm %s to drop the journal)",
		host, qdisc.ErrChangedSince, got, want, j.Path(), j.Path())
}

// restoreSysctls puts back the sysctls the journal found on host.
func restoreSysctls(ctx context.Context, c *cli.Command, d *remote.Dialer, j *qdisc.Journal, host string, force bool) (qdisc.SysctlOutcome, error) {
	h := j.Hosts[host]
	if h == nil {
		return qdisc.SysctlOutcome{}, fmt.Errorf("host %s: journal %s names no such host", host, j.Path())
	}
	r, done, err := hostRunner(ctx, c, d, h)
	if err != nil {
		return qdisc.SysctlOutcome{}, err
	}
	defer done()
	if err := sameMachine(ctx, r, j, host, force); err != nil {
		return qdisc.SysctlOutcome{}, err
	}
	out, err := qdisc.RestoreSysctlsJournaled(ctx, r, host, j.Sysctls, j.SysctlsApplied, force)
	if err == nil {
		removeMark(ctx, c, r, j, host, "")
	}
	return out, err
}
