package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

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
func rootRunner(c *cli.Context, conn *remote.Conn, h *inventory.Host) (qdisc.Runner, error) {
	sudo, err := h.UseSudo(conn.Target.User, true)
	if err != nil || !sudo {
		return conn, err
	}
	self, selfHash, err := selfBinary()
	if err != nil {
		return nil, err
	}
	proc, err := conn.StartAgent(c.Context, remote.AgentOptions{Self: self, SelfHash: selfHash, AgentPath: h.AgentPath, Sudo: true})
	if err != nil {
		return nil, err
	}
	cl := agent.NewClient(h.Name, proc.Stdout, proc.Stdin, quietHandler{})
	ctx, cancel := context.WithTimeout(c.Context, conn.Target.CommandTimeout)
	defer cancel()
	if _, err := cl.Hello(ctx); err != nil {
		return nil, fmt.Errorf("host %s: start the agent through sudo: %w", h.Name, err)
	}
	return agentRunner{cl, conn.Target.CommandTimeout}, nil
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
func (quietHandler) Series(string, string, datafile.Series)       {}

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "put bottlenecks back as a controller that was killed left them, from its journal",
		UsageText: "bloatbench restore [--journal FILE]\n\nExamples:\n" +
			"   bloatbench restore                      # every journal in " + qdisc.JournalDir() + "\n" +
			"   bloatbench restore --journal ~/.local/state/bloatbench/journal/20261129T190000.000000-4242.json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Usage: "one journal file (default: every journal left in the journal folder)"},
			&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "as for run"},
		},
		Action: func(c *cli.Context) error {
			files := []string{c.String("journal")}
			if files[0] == "" {
				var err error
				if files, err = qdisc.Journals(qdisc.JournalDir()); err != nil {
					return err
				}
				if len(files) == 0 {
					fmt.Fprintln(c.App.Writer, "no journal left: every host was put back")
					return nil
				}
			}
			d, err := remote.NewDialer(c.Bool("accept-new-host-keys"), c.App.ErrWriter)
			if err != nil {
				return err
			}
			var errs []error
			for _, f := range files {
				j, err := qdisc.LoadJournal(f)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				ok := true
				var locks []*qdisc.DeviceLock // held until the journal is gone
				for _, st := range j.States {
					h := j.Hosts[st.Host]
					if h == nil {
						errs = append(errs, fmt.Errorf("journal %s: no host %s", f, st.Host))
						ok = false
						continue
					}
					// Refused, naming the holder, while a run or another restore has the device.
					t, err := d.Resolve(h)
					if err == nil {
						var l *qdisc.DeviceLock
						l, err = j.LockForRestore(st, t.Addr)
						locks = append(locks, l)
					}
					if errors.Is(err, qdisc.ErrJournalGone) {
						fmt.Fprintln(c.App.Writer, err)
						ok = false
						break
					}
					var conn *remote.Conn
					if err == nil {
						conn, err = d.DialTarget(c.Context, t)
					}
					if err == nil {
						var r qdisc.Runner
						if r, err = rootRunner(c, conn, h); err == nil {
							err = qdisc.Restore(c.Context, r, st)
						}
						conn.Close()
					}
					if err != nil {
						errs = append(errs, err)
						ok = false
						continue
					}
					fmt.Fprintf(c.App.Writer, "restored %s:%s (setup %s of %s)\n", st.Host, st.Dev, j.Setup, j.Created.Format("2006-01-02 15:04:05"))
				}
				// The setup's sysctls, host by host, after the devices as a run does.
				seen := map[string]bool{}
				for _, sv := range j.Sysctls {
					if !ok || seen[sv.Host] {
						continue
					}
					seen[sv.Host] = true
					if err := restoreSysctls(c, d, j, sv.Host); err != nil {
						errs = append(errs, err)
						ok = false
						continue
					}
					fmt.Fprintf(c.App.Writer, "restored the sysctls of %s (setup %s of %s)\n", sv.Host, j.Setup, j.Created.Format("2006-01-02 15:04:05"))
				}
				if ok {
					if err := j.Remove(); err != nil {
						errs = append(errs, err)
					}
				}
				for _, l := range locks {
					l.Unlock()
				}
			}
			return errors.Join(errs...)
		},
	}
}

// restoreSysctls puts back the sysctls the journal found on host.
func restoreSysctls(c *cli.Context, d *remote.Dialer, j *qdisc.Journal, host string) error {
	h := j.Hosts[host]
	if h == nil {
		return fmt.Errorf("journal %s: no host %s", j.Path(), host)
	}
	t, err := d.Resolve(h)
	if err != nil {
		return err
	}
	conn, err := d.DialTarget(c.Context, t)
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := rootRunner(c, conn, h)
	if err != nil {
		return err
	}
	return qdisc.RestoreSysctls(c.Context, r, host, j.Sysctls)
}
