package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/remote"
)

// splitBatch cuts a batch into parts of at most the bound, every sample in one
// part, each series' samples in order.
func TestSplitBatch(t *testing.T) {
	seq := func(n int) []datafile.Sample {
		ss := make([]datafile.Sample, n)
		for i := range ss {
			ss[i].Seq = i
		}
		return ss
	}
	cases := []struct {
		name  string
		batch map[string][]datafile.Sample
		limit int
		parts int
	}{
		{"empty", map[string][]datafile.Sample{}, 3, 0},
		{"within", map[string][]datafile.Sample{"a": seq(2), "b": seq(1)}, 3, 1},
		{"one series over", map[string][]datafile.Sample{"a": seq(7)}, 3, 3},
		{"several over", map[string][]datafile.Sample{"a": seq(4), "b": seq(4), "c": seq(1)}, 3, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parts := splitBatch(c.batch, c.limit)
			if len(parts) != c.parts {
				t.Errorf("%d parts, want %d", len(parts), c.parts)
			}
			got := map[string][]datafile.Sample{}
			for _, p := range parts {
				if n := batchSamples(p); n > c.limit || n == 0 {
					t.Errorf("a part of %d samples, bound %d", n, c.limit)
				}
				for k, ss := range p {
					got[k] = append(got[k], ss...)
				}
			}
			for k, ss := range c.batch {
				if len(got[k]) != len(ss) {
					t.Errorf("series %s: %d samples in the parts, want %d", k, len(got[k]), len(ss))
				}
				for i, s := range got[k] {
					if s.Seq != i {
						t.Errorf("series %s: sample %d is %d: out of order", k, i, s.Seq)
						break
					}
				}
			}
		})
	}
}

// A batch of more samples than an agent sends is dropped unread, whatever spells
// it, and the other fields of the line are read; a batch within the bound is kept.
func TestDecodeBoundsBatch(t *testing.T) {
	over := MaxBatchSamples + 1
	many := func(item string) []byte {
		return []byte(`{"type":"batch","batch":{"s":[` + strings.TrimSuffix(strings.Repeat(item+",", over), ",") + `]}}`)
	}
	cases := []struct {
		name    string
		line    []byte
		dropped bool
	}{
		{"objects", many(`{"t":1,"v":2}`), true},
		{"empty objects", many(`{}`), true},
		{"nulls", many(`null`), true},
		{"within", []byte(`{"type":"batch","batch":{"s":[{"t":1,"v":2},null,{}]}}`), false},
		{"a reply with braces in its error", []byte(`{"type":"reply","id":3,"error":"` + strings.Repeat("{", over) + `"}`), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeMessage(c.line, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c.dropped != (m.Dropped > 0) || c.dropped && m.Batch != nil {
				t.Errorf("dropped %d, batch of %d samples", m.Dropped, batchSamples(m.Batch))
			}
			if m.Type == TypeReply && (m.ID != 3 || len(m.Error) != over) {
				t.Errorf("the reply was misread: id %d, error of %d bytes", m.ID, len(m.Error))
			}
		})
	}
}

// logHandler keeps the client's logs.
type logHandler struct {
	*recorder
	mu   sync.Mutex
	logs []string
}

func (h *logHandler) Log(host, msg string) {
	h.mu.Lock()
	h.logs = append(h.logs, msg)
	h.mu.Unlock()
}

// The client hands an absurd batch on as a warning, not as samples, and lives
// on; a line longer than any agent's ends it with an error that says so.
func TestClientBounds(t *testing.T) {
	t.Run("absurd batch", func(t *testing.T) {
		h := &logHandler{recorder: newRecorder()}
		ss := make([]datafile.Sample, MaxBatchSamples+1)
		line, _ := json.Marshal(Message{Type: TypeBatch, Batch: map[string][]datafile.Sample{"s": ss}})
		ok, _ := json.Marshal(Message{Type: TypeBatch, Batch: map[string][]datafile.Sample{"s": ss[:2]}})
		c := NewClient("h", bytes.NewReader(append(append(line, '\n'), append(ok, '\n')...)), io.Discard, h)
		<-c.Dead()
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.logs) != 1 || !strings.Contains(h.logs[0], "dropped unread") {
			t.Errorf("logs %q, want one of the dropped batch", h.logs)
		}
		if n := len(h.samples["s"]); n != 2 {
			t.Errorf("%d samples handed on, want the 2 of the batch within the bound", n)
		}
	})
	t.Run("line too long", func(t *testing.T) {
		r := io.MultiReader(strings.NewReader(`{"type":"log","message":"`), io.LimitReader(zeros{}, maxLine+1))
		c := NewClient("h", r, io.Discard, newRecorder())
		select {
		case <-c.Dead():
		case <-time.After(30 * time.Second):
			t.Fatal("the client still reads")
		}
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("longer than the %d MiB", maxLine>>20)) {
			t.Errorf("the client's end: %v", err)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// A command's output on the agent is bounded as over SSH: head and tail with the
// marker, the command read to its end.
func TestExecBounded(t *testing.T) {
	r := Execute(context.Background(), ExecSpec{Cmd: "echo START; head -c 9000000 /dev/zero; echo END; echo err >&2", Timeout: 30})
	if r.Exit != 0 || r.Killed {
		t.Fatalf("exit %d, killed %v", r.Exit, r.Killed)
	}
	marker := fmt.Sprintf("\n[... %d bytes left out]\n", 9000000+len("START\nEND\n")-remote.MaxOutput)
	if len(r.Stdout) != remote.MaxOutput+len(marker) || !bytes.HasPrefix(r.Stdout, []byte("START\n")) ||
		!bytes.HasSuffix(r.Stdout, []byte("END\n")) || !bytes.Contains(r.Stdout, []byte(marker)) {
		t.Errorf("stdout of %d bytes, want %d with %q", len(r.Stdout), remote.MaxOutput+len(marker), marker)
	}
	if string(r.Stderr) != "err\n" {
		t.Errorf("stderr %q", r.Stderr)
	}
}
