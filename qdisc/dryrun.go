package qdisc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/bloatbench/bloatbench/remote"
)

// DryRun applies a setup's qdisc tree to a veth pair in a network namespace made for
// the purpose on the host, then deletes the namespace. It finds a kernel without
// the qdisc kind, a tc that does not know it and a parameter tc rejects, while the
// host's own devices stay untouched. BQL and offloads are checked against the real
// device by Apply, before it changes anything.
func DryRun(ctx context.Context, r Runner, host string, s *Setup, txQueues int) (err error) {
	var b [4]byte
	rand.Read(b[:])
	ns := "bbdry-" + hex.EncodeToString(b[:])
	q := strconv.Itoa(max(txQueues, 1))
	if _, err := r.Output(ctx, remote.Command("ip", "netns", "add", ns), nil); err != nil {
		return fmt.Errorf("host %s: cannot make a scratch network namespace to try setup %s (needs root and ip netns): %w", host, s.Name, err)
	}
	defer func() {
		if _, derr := r.Output(context.WithoutCancel(ctx), remote.Command("ip", "netns", "del", ns), nil); derr != nil && err == nil {
			err = fmt.Errorf("host %s: remove scratch namespace %s: %w", host, ns, derr)
		}
	}()
	if _, err := r.Output(ctx, remote.Command("ip", "-n", ns, "link", "add", "name", "bbdry0", "numtxqueues", q, "numrxqueues", q,
		"type", "veth", "peer", "name", "bbdry1"), nil); err != nil {
		return fmt.Errorf("host %s: cannot make a scratch veth to try setup %s: %w", host, s.Name, err)
	}
	// The ingress's IFB is stood in for by the veth's peer: making an IFB would load
	// the ifb module on the host, which is Apply's business. The peer takes the same
	// qdiscs, and the mirred filter can redirect to it.
	ifb := IFBName("bbdry0")
	var ops []Op
	cmds := s.Commands("bbdry0", max(txQueues, 1))
	// The schedule's changes too: a rate this tc will not take fails here, not
	// in the middle of a run.
	for _, st := range s.RateSchedule {
		cmds = append(cmds, RateOp("bbdry0", st.Rate))
	}
	for _, o := range cmds {
		if o.Argv[0] == "tc" {
			argv := []string{"tc", "-n", ns}
			for _, a := range o.Argv[1:] {
				if a == ifb {
					a = "bbdry1"
				}
				argv = append(argv, a)
			}
			ops = append(ops, Op{Argv: argv})
		}
	}
	if _, err := run(ctx, r, host, ops); err != nil {
		return fmt.Errorf("host %s: setup %s cannot be applied: %w", host, s.Name, err)
	}
	return nil
}
