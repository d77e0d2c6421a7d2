package qdisc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	limits := func(vals ...string) []Op {
		var ops []Op
		for i, v := range vals {
			ops = append(ops, Op{Argv: []string{"tee", fmt.Sprintf("/sys/class/net/eth0/queues/tx-%d/byte_queue_limits/limit_max", i)}, Stdin: v})
		}
		return ops
	}
	writes := func(ops []Op) string {
		return writesOp(ops).run() + " <<"
	}
	writeErr := func(n int) func(cmd, stdin string) error {
		return func(cmd, stdin string) error {
			if strings.HasPrefix(cmd, "sh -c") {
				return fmt.Errorf("host h: sh: can't create: Invalid argument\n%s %d", writeFailed, n)
			}
			return errors.New("host h: tee: /sys/class/net/eth0/queues/tx-1/byte_queue_limits/limit_max: Invalid argument")
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
		{name: "writes next to each other go to one shell", ops: append(append(limits("6056", "6056"), mq...), limits("1", "2")...),
			want: []string{writes(limits("6056", "6056")),
				"tc -batch - <<qdisc replace dev eth0 root handle 1: mq\nqdisc replace dev eth0 parent 1:1 fq_codel\nqdisc replace dev eth0 parent 1:2 fq_codel\n",
				writes(limits("1", "2"))}, done: 7},
		{name: "the second write fails: it runs again alone, the third is not tried", ops: limits("1", "x", "3"), fail: writeErr(2),
			want:      []string{writes(limits("1", "x", "3")), "tee /sys/class/net/eth0/queues/tx-1/byte_queue_limits/limit_max >/dev/null <<x\n"},
			done:      1,
			errHas:    []string{"`echo x > /sys/class/net/eth0/queues/tx-1/byte_queue_limits/limit_max`", "tee: ", "Invalid argument"},
			errHasNot: []string{writeFailed}},
		{name: "the writes' shell fails as a whole", ops: limits("1", "2"), fail: func(cmd, stdin string) error { return errors.New("host h: sh: did not finish within 1m0s") },
			want:   []string{writes(limits("1", "2"))},
			done:   0,
			errHas: []string{"`sh -c ", "did not finish"}},
		{name: "a line with a newline is written alone", ops: []Op{limits("1")[0], {Argv: []string{"tee", "/tmp/f"}, Stdin: "a\nb"}},
			want: []string{"tee /sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_max >/dev/null <<1\n", "tee /tmp/f >/dev/null <<a\nb\n"}, done: 2},
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

// The writes' shell, run by a real sh: each file gets its line, in order; the
// first that cannot be written stops it, is named by tee's own error, and the
// files after it are left alone.
func TestRunWritesInOneShell(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	ops := []Op{
		{Argv: []string{"tee", at("a")}, Stdin: "6056"},
		{Argv: []string{"tee", at("b b")}, Stdin: "it's $HOME"},
		{Argv: []string{"tee", at("missing/c")}, Stdin: "3"},
		{Argv: []string{"tee", at("d")}, Stdin: "4"},
	}
	done, err := run(context.Background(), localRunner{}, "h", ops)
	if err == nil || !strings.Contains(err.Error(), "tee: ") || !strings.Contains(err.Error(), "missing/c") || !strings.Contains(err.Error(), "No such file or directory") {
		t.Fatalf("error %v: want tee's, naming missing/c", err)
	}
	if want := []string{ops[0].Shell(), ops[1].Shell()}; !slices.Equal(done, want) {
		t.Errorf("done %q, want %q", done, want)
	}
	for name, want := range map[string]string{"a": "6056\n", "b b": "it's $HOME\n"} {
		if b, err := os.ReadFile(at(name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", name, b, err, want)
		}
	}
	if _, err := os.Stat(at("d")); err == nil {
		t.Errorf("the write after the failed one was made")
	}
	done, err = run(context.Background(), localRunner{}, "h", []Op{ops[0], ops[3]})
	if err != nil || len(done) != 2 {
		t.Fatalf("%q %v", done, err)
	}
	if b, err := os.ReadFile(at("d")); err != nil || string(b) != "4\n" {
		t.Errorf("d: %q %v", b, err)
	}
}
