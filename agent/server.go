package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/hostfacts"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/runners"
)

// batchEvery is how often samples go to the controller: often enough to keep the data
// file current, seldom enough that 128 streams cost one line per batch.
const batchEvery = 100 * time.Millisecond

// Server runs jobs for a controller on one endpoint.
type Server struct {
	Version string
	// Kinds is the runner registry the agent serves; nil is runners.Kinds().
	Kinds map[string]runners.Kind
	// Exec runs a command the controller sends (its tc, sysfs and ethtool work);
	// nil is Execute, sh -c on this host. It is the caller's so that the
	// controller's tests can run the real agent against a fake bottleneck (a tc
	// that answers from recorded output), with no root and nothing on the
	// machine changed.
	Exec func(ctx context.Context, spec ExecSpec) *ExecResult

	out  *json.Encoder
	outW *bufio.Writer
	outM sync.Mutex

	batchM sync.Mutex
	batch  map[string][]datafile.Sample

	// kinds is the runner registry, by kind.
	kinds map[string]runners.Kind
	// exec runs OpExec's commands: Exec, or Execute.
	exec func(ctx context.Context, spec ExecSpec) *ExecResult
	// streams is what the agent's TCP streams share: the bound on those in the
	// kernel at once.
	streams *runners.StreamGate
	// keep is what the session's jobs keep for its later runs.
	keep *runners.Keep

	jobsM sync.Mutex
	jobs  map[string]context.CancelFunc
	// prepared are the jobs prepared and not yet started, by name.
	prepared map[string]*prep
	jobWG    sync.WaitGroup
}

// prep is a job prepared ahead of its start: what its kind's Prepare returned,
// held until a start of its name takes it, or a stop or the session's end closes it.
type prep struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once Prepare has returned
	res    io.Closer     // set before done is closed
}

// Serve reads requests from r and writes messages to w until r ends (the controller
// hung up) or ctx ends; then it stops every job, flushes and returns.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.outW = bufio.NewWriter(w)
	s.out = json.NewEncoder(s.outW)
	s.batch = map[string][]datafile.Sample{}
	s.jobs = map[string]context.CancelFunc{}
	s.prepared = map[string]*prep{}
	s.kinds = s.Kinds
	if s.kinds == nil {
		s.kinds = runners.Kinds()
	}
	s.exec = s.Exec
	if s.exec == nil {
		s.exec = Execute
	}
	s.streams = runners.NewStreamGate()
	s.keep = &runners.Keep{}

	flushDone := make(chan struct{})
	go func() {
		defer close(flushDone)
		t := time.NewTicker(batchEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.flushBatch()
			case <-ctx.Done():
				return
			}
		}
	}()

	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var readErr error
	for sc.Scan() {
		var req Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			readErr = fmt.Errorf("bad request from controller: %w", err)
			break
		}
		s.handle(ctx, req)
	}
	if readErr == nil {
		readErr = sc.Err()
	}
	cancel()
	s.jobWG.Wait()
	// What was prepared for jobs that never started (the run failed before its
	// start) is let go: a tracer's programs leave the kernel with it.
	s.jobsM.Lock()
	for name, p := range s.prepared {
		closePrep(p)
		delete(s.prepared, name)
	}
	s.jobsM.Unlock()
	<-flushDone
	s.flushBatch()
	return readErr
}

func (s *Server) send(m Message) {
	s.outM.Lock()
	defer s.outM.Unlock()
	// A write error means the controller is gone; reading stdin will notice.
	s.out.Encode(m)
	s.outW.Flush()
}

func (s *Server) emit(series string, smp datafile.Sample) {
	s.batchM.Lock()
	s.batch[series] = append(s.batch[series], smp)
	s.batchM.Unlock()
}

func (s *Server) flushBatch() {
	s.batchM.Lock()
	b := s.batch
	s.batch = map[string][]datafile.Sample{}
	s.batchM.Unlock()
	for _, part := range splitBatch(b, MaxBatchSamples) {
		s.send(Message{Type: TypeBatch, Batch: part})
	}
}

// splitBatch cuts b into batches of at most limit samples each. Samples pile up
// while a send waits on a slow controller, and the controller refuses a batch of
// more than MaxBatchSamples; a series' samples keep their order across the parts.
func splitBatch(b map[string][]datafile.Sample, limit int) []map[string][]datafile.Sample {
	var parts []map[string][]datafile.Sample
	cur, n := map[string][]datafile.Sample{}, 0
	for name, ss := range b {
		for len(ss) > 0 {
			if n == limit {
				parts = append(parts, cur)
				cur, n = map[string][]datafile.Sample{}, 0
			}
			k := min(len(ss), limit-n)
			cur[name] = ss[:k]
			ss, n = ss[k:], n+k
		}
	}
	if n > 0 {
		parts = append(parts, cur)
	}
	return parts
}

func (s *Server) reply(req Request, m Message, err error) {
	m.Type, m.ID = TypeReply, req.ID
	if err != nil {
		m.Error = err.Error()
	}
	s.send(m)
}

func (s *Server) handle(ctx context.Context, req Request) {
	switch req.Op {
	case OpHello:
		s.reply(req, Message{Hello: hello(s.Version)}, nil)
	case OpClock:
		s.reply(req, Message{Clock: time.Now().UnixNano()}, nil)
	case OpStart:
		s.start(ctx, req)
	case OpPrepare:
		s.prepare(ctx, req)
	case OpExec:
		if req.Exec == nil {
			s.reply(req, Message{}, errors.New("exec: no spec"))
			return
		}
		// Commands run beside the read loop: a slow tc must not hold up the next
		// request, nor a stop.
		s.jobWG.Add(1)
		go func() {
			defer s.jobWG.Done()
			s.reply(req, Message{Exec: s.exec(ctx, *req.Exec)}, nil)
		}()
	case OpFacts:
		// It runs ethtool and tc: beside the read loop, as a command.
		s.jobWG.Add(1)
		go func() {
			defer s.jobWG.Done()
			s.reply(req, Message{Facts: hostfacts.Gather(ctx, req.Devs)}, nil)
		}()
	case OpStop:
		s.jobsM.Lock()
		stop := s.jobs[req.Job]
		p := s.prepared[req.Job]
		delete(s.prepared, req.Job)
		s.jobsM.Unlock()
		if stop != nil {
			stop()
		}
		if p != nil {
			// A prepare still under way ends first; its closing does not hold up
			// the read loop.
			p.cancel()
			s.jobWG.Add(1)
			go func() {
				defer s.jobWG.Done()
				<-p.done
				closePrep(p)
			}()
		}
		s.reply(req, Message{}, nil)
	default:
		s.reply(req, Message{}, fmt.Errorf("unknown op %q (controller and agent versions differ?)", req.Op))
	}
}

// start looks the job's kind up in the registry, opens what the job needs and
// answers: a job that cannot start (no ICMP socket, a port in use) fails its start
// request, not later.
func (s *Server) start(ctx context.Context, req Request) {
	if req.Start == nil {
		s.reply(req, Message{}, errors.New("start: no spec"))
		return
	}
	kind, ok := s.kinds[req.Start.Kind]
	if !ok {
		s.reply(req, Message{}, fmt.Errorf("no runner of kind %q here: this agent has %s (controller and agent versions differ?)",
			req.Start.Kind, strings.Join(runners.KindNames(), ", ")))
		return
	}
	jctx, ok := s.addJob(ctx, req)
	if !ok {
		return
	}
	env := s.env(req)
	if p := s.takePrep(req.Job); p != nil {
		select {
		case <-p.done:
			env.Prepared = p.res
		case <-jctx.Done():
			// The controller starts a job only once its prepare has answered; a
			// start that came early waits no longer than the session.
			s.jobWG.Add(1)
			go func() {
				defer s.jobWG.Done()
				<-p.done
				closePrep(p)
			}()
		}
	}
	job, started, err := kind.Start(jctx, *req.Start, env)
	if err != nil {
		s.endJob(req.Job, err, false)
		s.reply(req, Message{}, fmt.Errorf("%s: %w", req.Start.Kind, err))
		return
	}
	s.reply(req, Message{Port: started.Port, Timestamps: started.Timestamps, Message: started.Message}, nil)
	s.runJob(req.Job, func() error { return job.Run(jctx) })
}

// env is what a job of req is given to report through.
func (s *Server) env(req Request) runners.Env {
	env := runners.Env{
		Emit: s.emit,
		// A declaration goes out at once, ahead of the batch that carries the
		// series' first samples.
		Declare: func(ser datafile.Series) { s.send(Message{Type: TypeSeries, Job: req.Job, Series: &ser}) },
		Warn:    func(msg string) { s.send(Message{Type: TypeLog, Message: msg}) },
		Alert:   func(msg string) { s.send(Message{Type: TypeAlert, Message: msg}) },
		Streams: s.streams,
		Keep:    s.keep,
	}
	if pair := req.Start.Pair; pair != "" {
		env = pairEnv(env, pair)
	}
	return env
}

// prepare runs a job's Prepare beside the read loop, which stays free for other
// requests (a stop) however long the kernel takes, and answers when it is done.
func (s *Server) prepare(ctx context.Context, req Request) {
	if req.Start == nil {
		s.reply(req, Message{}, errors.New("prepare: no spec"))
		return
	}
	kind, ok := s.kinds[req.Start.Kind]
	if !ok {
		s.reply(req, Message{}, fmt.Errorf("no runner of kind %q here: this agent has %s (controller and agent versions differ?)",
			req.Start.Kind, strings.Join(runners.KindNames(), ", ")))
		return
	}
	if kind.Prepare == nil {
		s.reply(req, Message{}, nil)
		return
	}
	s.jobsM.Lock()
	if req.Job == "" || s.jobs[req.Job] != nil || s.prepared[req.Job] != nil {
		s.jobsM.Unlock()
		s.reply(req, Message{}, fmt.Errorf("job name %q is empty or in use", req.Job))
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &prep{cancel: cancel, done: make(chan struct{})}
	s.prepared[req.Job] = p
	s.jobsM.Unlock()
	env := s.env(req)
	s.jobWG.Add(1)
	go func() {
		defer s.jobWG.Done()
		res, err := kind.Prepare(pctx, *req.Start, env)
		p.res = res
		close(p.done)
		if err != nil {
			if p := s.takePrep(req.Job); p != nil {
				closePrep(p)
			}
			s.reply(req, Message{}, fmt.Errorf("%s: %w", req.Start.Kind, err))
			return
		}
		s.reply(req, Message{}, nil)
	}()
}

// takePrep takes the prepared job of that name off the list, if there is one.
func (s *Server) takePrep(job string) *prep {
	s.jobsM.Lock()
	defer s.jobsM.Unlock()
	p := s.prepared[job]
	delete(s.prepared, job)
	return p
}

// closePrep lets a prepared job's resources go; its Prepare has returned.
func closePrep(p *prep) {
	p.cancel()
	if p.res != nil {
		p.res.Close()
	}
}

// pairEnv names what a job of one pair of a run with several yields for its pair.
func pairEnv(env runners.Env, pair string) runners.Env {
	emit, declare := env.Emit, env.Declare
	env.Emit = func(name string, x datafile.Sample) { emit(datafile.PairName(name, pair), x) }
	env.Declare = func(ser datafile.Series) {
		ser.Name, ser.Pair = datafile.PairName(ser.Name, pair), pair
		declare(ser)
	}
	return env
}

func (s *Server) addJob(ctx context.Context, req Request) (context.Context, bool) {
	s.jobsM.Lock()
	defer s.jobsM.Unlock()
	if req.Job == "" || s.jobs[req.Job] != nil {
		s.reply(req, Message{}, fmt.Errorf("job name %q is empty or in use", req.Job))
		return nil, false
	}
	jctx, cancel := context.WithCancel(ctx)
	s.jobs[req.Job] = cancel
	return jctx, true
}

func (s *Server) runJob(job string, f func() error) {
	s.jobWG.Add(1)
	go func() {
		defer s.jobWG.Done()
		s.endJob(job, f(), true)
	}()
}

func (s *Server) endJob(job string, err error, announce bool) {
	s.jobsM.Lock()
	if cancel := s.jobs[job]; cancel != nil {
		cancel()
	}
	delete(s.jobs, job)
	s.jobsM.Unlock()
	if announce {
		// Samples of the job go out before the news that it ended.
		s.flushBatch()
		m := Message{Type: TypeDone, Job: job}
		if err != nil {
			m.Error = err.Error()
		}
		s.send(m)
	}
}

// Execute runs spec.Cmd as sh would, as sshd would have run it without the login
// shell: what a Server runs its commands with unless given its own Exec, and what
// such an Exec can wrap (bounded output, the timeout, the process group killed).
//
// A line of plain words naming a program on PATH (remote.Words: most of the
// controller's, `tc ...`, `sh -c SCRIPT sh ARGS`) runs that program directly, as
// sh would have: without a shell in between, which on an emulated guest costs
// 35 ms a command (a VM lab's router started 55 shells a run, now 21). Any other
// line, and one whose program cannot be started (not found, no #! line), goes to
// sh, which says so as it always has (exit 127).
func Execute(ctx context.Context, spec ExecSpec) *ExecResult {
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(spec.Timeout*float64(time.Second)))
		defer cancel()
	}
	if words, ok := remote.Words(spec.Cmd); ok {
		if path, err := exec.LookPath(words[0]); err == nil {
			cmd := exec.CommandContext(ctx, path, words[1:]...)
			cmd.Args[0] = words[0] // as sh gives it
			if r, started := execute(ctx, cmd, spec); started {
				return r
			}
		}
	}
	r, _ := execute(ctx, exec.CommandContext(ctx, "sh", "-c", spec.Cmd), spec)
	return r
}

// execute runs cmd for Execute; started is false when it could not be started
// at all (r then holds why).
func execute(ctx context.Context, cmd *exec.Cmd, spec ExecSpec) (r *ExecResult, started bool) {
	cmd.Stdin = bytes.NewReader(spec.Stdin)
	// What is kept of the output is bounded (remote.MaxOutput, head and tail); the
	// rest is read and discarded, so the command runs to its end as it would.
	out, errb := remote.NewHeadTail(remote.MaxOutput), remote.NewHeadTail(remote.MaxOutput)
	cmd.Stdout, cmd.Stderr = out, errb
	// The command and whatever it starts are one process group, killed together at
	// the timeout: a child left holding the pipes would hold the reply.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil && ctx.Err() == nil {
		return &ExecResult{Exit: -1, Stderr: []byte(err.Error())}, false
	}
	err := cmd.Wait()
	r = &ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Exit, r.Killed = -1, true
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
		// A program a signal ended: its status as a shell gives it, 128 plus the
		// signal, not os/exec's -1.
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Exit = 128 + int(ws.Signal())
		}
	case err != nil:
		r.Exit = -1
		r.Stderr = append(r.Stderr, err.Error()...)
	}
	return r, true
}

func hello(version string) *Hello {
	h := &Hello{Protocol: ProtocolVersion, Version: version, PID: os.Getpid()}
	h.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	h.Identity, _ = qdisc.IdentityHere()
	return h
}
