package qdisc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// scriptRunner records the commands it is given, with their input, and answers
// each with the error fail returns for it (nil: success).
type scriptRunner struct {
	got  []string
	fail func(cmd, stdin string) error
}

func (r *scriptRunner) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	in := ""
	if stdin != nil {
		b, _ := io.ReadAll(stdin)
		in = string(b)
	}
	r.got = append(r.got, cmd+" <<"+in)
	if r.fail != nil {
		return nil, r.fail(cmd, in)
	}
	return nil, nil
}

// The setup's tc commands go to tc in batches of those next to each other with the
// same options; the others, and a tc command with a word a batch would split, run
// alone. A batch that fails at a line counts the lines before it done and fails as
// that line's command would have; one that fails without a line counts none.
func TestRunBatches(t *testing.T) {
	mq := []Op{
		{Argv: []string{"tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "mq"}},
		{Argv: []string{"tc", "qdisc", "replace", "dev", "eth0", "parent", "1:1", "fq_codel"}},
		{Argv: []string{"tc", "qdisc", "replace", "dev", "eth0", "parent", "1:2", "fq_codel"}},
	}
	bql := Op{Argv: []string{"tee", "/sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_max"}, Stdin: "6056"}
	ns := func(o Op) Op { return Op{Argv: append([]string{"tc", "-n", "bbdry-1"}, o.Argv[1:]...)} }
	spaced := Op{Argv: []string{"tc", "qdisc", "replace", "dev", "eth 0", "root", "pfifo"}}
	tcErr := func(line int, msg string) func(cmd, stdin string) error {
		return func(cmd, stdin string) error {
			if !strings.Contains(cmd, "-batch") {
				return nil
			}
			return fmt.Errorf("host h: %s: %s\nCommand failed -:%d", cmd, msg, line)
		}
	}
	for _, c := range []struct {
		name      string
		ops       []Op
		fail      func(cmd, stdin string) error
		want      []string // commands given, "<<" and their input
		done      int      // of ops
		errHas    []string
		errHasNot []string
	}{
		{name: "mq and children, then BQL", ops: append(slices.Clone(mq), bql),
			want: []string{
				"tc -batch - <<qdisc replace dev eth0 root handle 1: mq\nqdisc replace dev eth0 parent 1:1 fq_codel\nqdisc replace dev eth0 parent 1:2 fq_codel\n",
				"tee /sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_max >/dev/null <<6056\n",
			}, done: 4},
		{name: "one tc command runs alone", ops: []Op{mq[0], bql, mq[1]},
			want: []string{"tc qdisc replace dev eth0 root handle 1: mq <<", "tee /sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_max >/dev/null <<6056\n",
				"tc qdisc replace dev eth0 parent 1:1 fq_codel <<"}, done: 3},
		{name: "a namespace's commands batch with its option", ops: []Op{ns(mq[0]), ns(mq[1]), mq[2]},
			want: []string{"tc -n bbdry-1 -batch - <<qdisc replace dev eth0 root handle 1: mq\nqdisc replace dev eth0 parent 1:1 fq_codel\n",
				"tc qdisc replace dev eth0 parent 1:2 fq_codel <<"}, done: 3},
		{name: "a word with white space runs alone", ops: []Op{mq[0], spaced, mq[1], mq[2]},
			want: []string{"tc qdisc replace dev eth0 root handle 1: mq <<", "tc qdisc replace dev 'eth 0' root pfifo <<",
				"tc -batch - <<qdisc replace dev eth0 parent 1:1 fq_codel\nqdisc replace dev eth0 parent 1:2 fq_codel\n"}, done: 4},
		{name: "the second line fails", ops: mq, fail: tcErr(2, "Error: Specified qdisc kind is unknown."),
			want:      []string{"tc -batch - <<qdisc replace dev eth0 root handle 1: mq\nqdisc replace dev eth0 parent 1:1 fq_codel\nqdisc replace dev eth0 parent 1:2 fq_codel\n"},
			done:      1,
			errHas:    []string{"`tc qdisc replace dev eth0 parent 1:1 fq_codel`", "host h: tc qdisc replace dev eth0 parent 1:1 fq_codel: Error: Specified qdisc kind is unknown.", "modprobe sch_fq_codel"},
			errHasNot: []string{"-batch", "Command failed"}},
		{name: "the batch fails as a whole", ops: mq, fail: func(cmd, stdin string) error { return errors.New("host h: tc -batch -: did not finish within 1m0s") },
			want:   []string{"tc -batch - <<qdisc replace dev eth0 root handle 1: mq\nqdisc replace dev eth0 parent 1:1 fq_codel\nqdisc replace dev eth0 parent 1:2 fq_codel\n"},
			done:   0,
			errHas: []string{"`tc -batch -`", "did not finish"}},
		{name: "a line number past the batch", ops: mq, fail: tcErr(9, "Error: what"),
			want:   []string{"tc -batch - <<qdisc replace dev eth0 root handle 1: mq\nqdisc replace dev eth0 parent 1:1 fq_codel\nqdisc replace dev eth0 parent 1:2 fq_codel\n"},
			done:   0,
			errHas: []string{"`tc -batch -`", "Command failed -:9"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &scriptRunner{fail: c.fail}
			done, err := run(context.Background(), r, "h", c.ops)
			if !slices.Equal(r.got, c.want) {
				t.Errorf("commands given:\n%q\nwant:\n%q", r.got, c.want)
			}
			var want []string
			for _, o := range c.ops[:c.done] {
				want = append(want, o.Shell())
			}
			if !slices.Equal(done, want) {
				t.Errorf("done %q, want %q", done, want)
			}
			if (err != nil) != (len(c.errHas) > 0) {
				t.Fatalf("error %v", err)
			}
			for _, s := range c.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			for _, s := range c.errHasNot {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q has %q", err, s)
				}
			}
		})
	}
}
