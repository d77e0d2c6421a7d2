package agent

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/runners"
)

// held is a prepared resource that records whether it was let go.
type held struct {
	mu     sync.Mutex
	closed int
}

func (h *held) Close() error {
	h.mu.Lock()
	h.closed++
	h.mu.Unlock()
	return nil
}

func (h *held) closes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// prepKinds is a registry with one kind that prepares: its Prepare hands out
// resources (or fails, or blocks until cancelled, by the job's parameters), and
// its Start reports what it was given, closing it when its job ends.
func prepKinds(made chan *held, given chan io.Closer) map[string]runners.Kind {
	return map[string]runners.Kind{
		"prep": {
			Background: true,
			Prepare: func(ctx context.Context, spec runners.JobSpec, env runners.Env) (io.Closer, error) {
				h := &held{}
				made <- h
				switch string(spec.Params) {
				case `"fail"`:
					return h, errors.New("no such program")
				case `"block"`:
					<-ctx.Done()
					return h, ctx.Err()
				}
				return h, nil
			},
			Start: func(ctx context.Context, spec runners.JobSpec, env runners.Env) (runners.Job, runners.Started, error) {
				given <- env.Prepared
				return runners.JobFunc(func(ctx context.Context) error {
					<-ctx.Done()
					if env.Prepared != nil {
						env.Prepared.Close()
					}
					return nil
				}), runners.Started{}, nil
			},
		},
		"plain": {
			Start: func(ctx context.Context, spec runners.JobSpec, env runners.Env) (runners.Job, runners.Started, error) {
				given <- env.Prepared
				return runners.JobFunc(func(context.Context) error { return nil }), runners.Started{}, nil
			},
		},
	}
}

func prepAgent(t *testing.T, kinds map[string]runners.Kind) (*Client, func()) {
	t.Helper()
	reqR, reqW := io.Pipe()
	msgR, msgW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		(&Server{Version: "test", Kinds: kinds}).Serve(ctx, reqR, msgW)
		msgW.Close()
		close(served)
	}()
	c := NewClient("host", msgR, reqW, newRecorder())
	return c, func() {
		reqW.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Error("agent did not stop after its input closed")
		}
		cancel()
	}
}

func call(t *testing.T, c *Client, op, job, kind, params string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	spec := runners.JobSpec{Kind: kind}
	if params != "" {
		spec.Params = []byte(params)
	}
	_, err := c.Call(ctx, Request{Op: op, Job: job, Start: &spec})
	return err
}

func TestPreparedJobs(t *testing.T) {
	t.Run("start takes what was prepared, and its end lets it go", func(t *testing.T) {
		made, given := make(chan *held, 4), make(chan io.Closer, 4)
		c, stop := prepAgent(t, prepKinds(made, given))
		if err := call(t, c, OpPrepare, "j", "prep", ""); err != nil {
			t.Fatal(err)
		}
		h := <-made
		if err := call(t, c, OpStart, "j", "prep", ""); err != nil {
			t.Fatal(err)
		}
		if got := <-given; got != io.Closer(h) {
			t.Fatalf("start was given %v, not what was prepared", got)
		}
		if n := h.closes(); n != 0 {
			t.Fatalf("closed %d times while the job runs", n)
		}
		stop()
		if n := h.closes(); n != 1 {
			t.Errorf("closed %d times after the job ended, want 1", n)
		}
	})
	t.Run("a stop before the start lets it go", func(t *testing.T) {
		made, given := make(chan *held, 4), make(chan io.Closer, 4)
		c, stop := prepAgent(t, prepKinds(made, given))
		defer stop()
		if err := call(t, c, OpPrepare, "j", "prep", ""); err != nil {
			t.Fatal(err)
		}
		h := <-made
		if err := call(t, c, OpStop, "j", "", ""); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, h, 1)
		// The name is free again, and a start of it prepares nothing.
		if err := call(t, c, OpStart, "j", "prep", ""); err != nil {
			t.Fatal(err)
		}
		if got := <-given; got != nil {
			t.Errorf("a start after the stop was given %v", got)
		}
	})
	t.Run("the session's end lets go what never started", func(t *testing.T) {
		made, given := make(chan *held, 4), make(chan io.Closer, 4)
		c, stop := prepAgent(t, prepKinds(made, given))
		if err := call(t, c, OpPrepare, "j", "prep", ""); err != nil {
			t.Fatal(err)
		}
		h := <-made
		stop()
		if n := h.closes(); n != 1 {
			t.Errorf("closed %d times after the session, want 1", n)
		}
	})
	t.Run("a failed prepare fails its request and lets go", func(t *testing.T) {
		made, given := make(chan *held, 4), make(chan io.Closer, 4)
		c, stop := prepAgent(t, prepKinds(made, given))
		defer stop()
		err := call(t, c, OpPrepare, "j", "prep", `"fail"`)
		if err == nil || !strings.Contains(err.Error(), "prep: no such program") {
			t.Fatalf("prepare: %v, want the kind's error", err)
		}
		waitClosed(t, <-made, 1)
	})
	t.Run("a prepare under way holds up no request, and a stop ends it", func(t *testing.T) {
		made, given := make(chan *held, 4), make(chan io.Closer, 4)
		c, stop := prepAgent(t, prepKinds(made, given))
		defer stop()
		res := make(chan error, 1)
		go func() { res <- call(t, c, OpPrepare, "j", "prep", `"block"`) }()
		h := <-made
		if err := call(t, c, OpStart, "other", "plain", ""); err != nil {
			t.Fatalf("a start while a prepare blocks: %v", err)
		}
		<-given
		if err := call(t, c, OpStop, "j", "", ""); err != nil {
			t.Fatal(err)
		}
		if err := <-res; err == nil {
			t.Error("the stopped prepare answered no error")
		}
		waitClosed(t, h, 1)
	})
	t.Run("a kind with nothing to prepare answers at once", func(t *testing.T) {
		made, given := make(chan *held, 4), make(chan io.Closer, 4)
		c, stop := prepAgent(t, prepKinds(made, given))
		defer stop()
		if err := call(t, c, OpPrepare, "j", "plain", ""); err != nil {
			t.Fatal(err)
		}
		if err := call(t, c, OpStart, "j", "plain", ""); err != nil {
			t.Fatal(err)
		}
		if got := <-given; got != nil {
			t.Errorf("start was given %v", got)
		}
		if err := call(t, c, OpPrepare, "k", "none", ""); err == nil || !strings.Contains(err.Error(), `no runner of kind "none"`) {
			t.Errorf("prepare of an unknown kind: %v", err)
		}
	})
}

// waitClosed waits for a close that happens beside the read loop; the agent answers
// a stop before its prepare has let go.
func waitClosed(t *testing.T, h *held, want int) {
	t.Helper()
	for range 500 {
		if h.closes() == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("closed %d times, want %d", h.closes(), want)
}
