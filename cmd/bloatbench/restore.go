package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

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
						err = qdisc.Restore(c.Context, conn, st)
						conn.Close()
					}
					if err != nil {
						errs = append(errs, err)
						ok = false
						continue
					}
					fmt.Fprintf(c.App.Writer, "restored %s:%s (setup %s of %s)\n", st.Host, st.Dev, j.Setup, j.Created.Format("2006-01-02 15:04:05"))
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
