package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/htmlreport"
	"github.com/bloatbench/bloatbench/report"
	"github.com/bloatbench/bloatbench/tests"
)

// The files a batch writes in its folder.
const (
	PlanFile    = "batch.json"   // the run list and its order: what --resume reads
	RecordsFile = "runs.jsonl"   // one record a finished run, appended as it ends
	SummaryFile = "summary.md"   // the comparison tables, ready to paste
	IndexFile   = "index.html"   // every run's charts, one page
	VerdictFile = "verdict.json" // with a baseline: every check and its numbers
	dataDir     = "data"
)

// Exit codes of a batch: what a cron job or a CI tests.
const (
	ExitRegression = 3
	ExitRunsFailed = 4
)

// Plan is what a batch folder keeps of its batch: enough to resume it.
type Plan struct {
	Name      string    `json:"name"`
	BatchFile string    `json:"batch_file"` // absolute
	Started   time.Time `json:"started"`
	Note      string    `json:"note,omitempty"`
	Seed      uint64    `json:"seed"`
	Shuffled  bool      `json:"shuffled"`
	// Order lists the runs' IDs in the order they run.
	Order   []string `json:"order"`
	Runs    []Run    `json:"runs"`
	Version string   `json:"tool_version"`
}

// Record is a run's outcome.
type Record struct {
	ID      string          `json:"id"`
	Status  string          `json:"status"` // ok, failed, interrupted
	Error   string          `json:"error,omitempty"`
	Data    string          `json:"data,omitempty"` // the data file, relative to the batch folder
	Started time.Time       `json:"started"`
	Ended   time.Time       `json:"ended"`
	Before  []CommandResult `json:"before,omitempty"`
	After   []CommandResult `json:"after,omitempty"`
}

// CommandResult is a before or after command's output.
type CommandResult struct {
	Host   string `json:"host"`
	Run    string `json:"run"`
	Output string `json:"output"`
	Error  string `json:"error,omitempty"`
}

// Options of a batch's execution.
type Options struct {
	Batch *Batch
	// Dir is the batch's folder: new for a new batch, the old one to resume.
	Dir    string
	Resume bool
	Note   string
	// Controller is what each run needs besides its test and setup: the dialer, the
	// agent binary, the version; its Inventory is the batch's.
	Controller controller.Options
	// Baseline is an earlier batch's folder to judge this one against.
	Baseline string
	// Log receives progress lines.
	Log io.Writer
	// Now is the clock; nil means the real one.
	Now func() time.Time
	// Bars draws the progress bars on Log even when it is not a terminal (tests).
	Bars bool
	// JUnit, when set, is the file the batch's end writes its runs and verdict to as
	// JUnit XML, for a CI's test report (reports.go, junit.go).
	JUnit string
	// Metrics, when set, is the file the batch's end writes its verdict to in the
	// Prometheus text format, for node_exporter's textfile collector: name it
	// *.prom in the collector's directory (reports.go, metrics.go).
	Metrics string
}

// Result is what a batch came to.
type Result struct {
	Dir         string
	Runs        int // in the batch
	Done        int // complete, this time or before a resume
	Failed      []Record
	Interrupted bool
	Checks      []Check
}

// ExitCode is the batch's verdict for the shell: runs failed (4) outranks a
// regression (3).
func (r Result) ExitCode() int {
	switch {
	case len(r.Failed) > 0 || r.Interrupted:
		return ExitRunsFailed
	case Regressions(r.Checks) > 0:
		return ExitRegression
	}
	return 0
}

// NewDir is a new batch's folder: OUTPUT/NAME-YYYYMMDDTHHMMSS.
func NewDir(b *Batch, now time.Time) string {
	return filepath.Join(b.Output, b.Name+"-"+now.Format("20060102T150405"))
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "batch %s: "+format+"\n", append([]any{o.Batch.Name}, args...)...)
	}
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Order is the running order of a batch's runs: shuffled with seed (flent's way of
// spreading a lab's drift over the setups), or as listed.
func Order(runs []Run, shuffle bool, seed uint64) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	if shuffle {
		rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	}
	return ids
}

// Execute runs the batch (or what is left of it) and writes its summary, page and
// verdict. The error is for what stops the batch itself (a folder it cannot write);
// failed runs are in the result.
func Execute(ctx context.Context, o Options) (*Result, error) {
	b := o.Batch
	plan, err := o.plan()
	if err != nil {
		return nil, err
	}
	records, err := readRecords(o.Dir)
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	for _, r := range records {
		if r.Status == "ok" && complete(filepath.Join(o.Dir, r.Data)) {
			done[r.ID] = true
		}
	}
	byID := map[string]Run{}
	for _, r := range b.Runs {
		byID[r.ID] = r
	}
	res := &Result{Dir: o.Dir, Runs: len(plan.Order), Done: len(done)}
	if o.Resume {
		o.logf("resuming %s: %d of %d runs complete", o.Dir, len(done), len(plan.Order))
	}
	rf, err := os.OpenFile(filepath.Join(o.Dir, RecordsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("batch records: %w", err)
	}
	defer rf.Close()
	todo := 0
	for _, id := range plan.Order {
		if !done[id] {
			todo++
		}
	}
	// The time left is of this session's runs: those a resume found complete took
	// no time of it.
	eta := NewETA(b.Length+2*b.Delay+b.Pause, todo, o.Now)
	pr := newProgress(o.Log, o.Bars, b.Name, len(plan.Order), len(done), eta)
	defer pr.stop()
	// While the bars are drawn, every log line goes above them.
	o.Log = pr.Log(o.Log)
	o.Controller.Log = pr.Log(o.Controller.Log)
	if pr.Bars != nil {
		o.Controller.Progress = pr.Update
	}
	// The runs left, in order, as one sequence of the controller's: one session, one
	// failure policy (a failed run is recorded and the next goes on; an
	// interruption, or a host not put back, stops the batch).
	var steps []controller.Step
	var pos []int
	for i, id := range plan.Order {
		if done[id] {
			continue
		}
		co, err := o.options(byID[id])
		steps = append(steps, controller.Step{Options: co, Err: err})
		pos = append(pos, i)
	}
	recs := make([]Record, len(steps))
	seq := controller.Sequence{Steps: steps, Pause: b.Pause,
		Start: func(k int, co controller.Options) controller.Options {
			i := pos[k]
			id := plan.Order[i]
			o.logf("run %d of %d: %s (%s)", i+1, len(plan.Order), id, eta)
			pr.StartRun(fmt.Sprintf("run %d of %d: %s", i+1, len(plan.Order), id), (2*b.Delay + b.Length).Seconds())
			recs[k] = Record{ID: id, Started: o.now()}
			return co
		},
		Run: func(ctx context.Context, s *controller.Session, k int, co controller.Options) (string, error) {
			return o.runOn(ctx, s, co, &recs[k])
		},
		Ended: func(k int, path string, runErr error) error {
			pr.endRun()
			eta.RunEnded()
			rec := recs[k]
			rec.Ended = o.now()
			if path != "" {
				rec.Data, _ = filepath.Rel(o.Dir, path)
			}
			switch {
			case runErr == nil:
				rec.Status = "ok"
			case ctx.Err() != nil:
				rec.Status, rec.Error = "interrupted", runErr.Error()
			default:
				rec.Status, rec.Error = "failed", runErr.Error()
			}
			if err := appendRecord(rf, rec); err != nil {
				return err
			}
			switch rec.Status {
			case "ok":
				res.Done++
				o.logf("run %s complete: %s", rec.ID, rec.Data)
			case "interrupted":
				o.logf("run %s interrupted; `bloatbench batch --resume %s` runs what is left", rec.ID, o.Dir)
			default:
				res.Failed = append(res.Failed, rec)
				o.logf("run %s FAILED: %s", rec.ID, rec.Error)
			}
			if errors.Is(runErr, controller.ErrNotRestored) {
				// A host is not as it was found: every later run would measure that.
				o.logf("stopping: a host was not restored; run `bloatbench restore`, then --resume %s", o.Dir)
			}
			return nil
		}}
	sres, err := seq.Execute(ctx)
	if err != nil {
		return nil, err
	}
	res.Interrupted = sres.Interrupted || sres.Stopped != nil
	err = o.finish(res)
	// --junit and --metrics (reports.go): written whether or not finish failed.
	if rerr := o.writeReports(plan, res, err); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return res, err
	}
	return res, nil
}

// PlannedTime is how long n runs of b take at least: their length with the delay
// before and after each, and the pauses between them. Connecting, the setups'
// applying and restoring and the before and after commands come on top.
func PlannedTime(b *Batch, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(n)*(b.Length+2*b.Delay) + time.Duration(n-1)*b.Pause
}

// plan writes a new batch's plan, or reads the one of the batch it resumes and
// checks the batch file still makes the same runs.
func (o *Options) plan() (*Plan, error) {
	b := o.Batch
	path := filepath.Join(o.Dir, PlanFile)
	if o.Resume {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("resume %s: %w (is it a batch's folder?)", o.Dir, err)
		}
		var p Plan
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("resume: %s: %w", path, err)
		}
		known := map[string]bool{}
		for _, r := range b.Runs {
			known[r.ID] = true
		}
		for _, id := range p.Order {
			if !known[id] {
				return nil, fmt.Errorf("resume %s: run %s is not in %s any more: resume with the batch file it started with", o.Dir, id, b.Path)
			}
		}
		return &p, nil
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, dataDir), 0o755); err != nil {
		return nil, fmt.Errorf("batch folder: %w", err)
	}
	abs, _ := filepath.Abs(b.Path)
	p := &Plan{Name: b.Name, BatchFile: abs, Started: o.now(), Note: o.Note, Seed: uint64(o.now().UnixNano()), Shuffled: b.Shuffle,
		Runs: b.Runs, Version: o.Controller.Version}
	p.Order = Order(b.Runs, b.Shuffle, p.Seed)
	raw, _ := json.MarshalIndent(p, "", "  ")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return nil, fmt.Errorf("batch plan: %w", err)
	}
	return p, nil
}

// options are run r's controller options, or why it cannot run.
func (o *Options) options(r Run) (controller.Options, error) {
	b := o.Batch
	co := o.Controller
	def, err := tests.Get(r.Test)
	if err != nil {
		return co, err
	}
	plan, err := def.Resolve(r.Parameters)
	if err != nil {
		return co, err
	}
	co.Inventory = b.Inventory
	co.Plan = plan
	co.Length, co.Step, co.Delay = b.Length, b.Step, b.Delay
	co.OutputDir = filepath.Join(o.Dir, dataDir)
	co.Title = b.Name
	co.Note = o.Note
	for _, s := range b.Setups {
		if s != nil && s.Name == r.Setup {
			co.Setup = s
			co.Title = s.Title
		}
	}
	return co, nil
}

// runOn runs one run on the batch's session in isolation: the before commands, the
// run with its setup applied and restored, the after commands, their outputs kept
// in rec. Whatever fails is the run's error; the batch goes on.
func (o *Options) runOn(ctx context.Context, sess *controller.Session, co controller.Options, rec *Record) (string, error) {
	b := o.Batch
	commands := func(when string, cs []Command) ([]CommandResult, error) {
		var out []CommandResult
		var errs []error
		for _, c := range cs {
			got, err := sess.Exec(ctx, c.Host, c.Run)
			// Kept to maxOutput: a before command's dmesg must not make the
			// record a line readers step over.
			cr := CommandResult{Host: c.Host, Run: c.Run, Output: datafile.Truncate(string(got), maxOutput)}
			if err != nil {
				cr.Error = datafile.Truncate(err.Error(), maxOutput)
				errs = append(errs, fmt.Errorf("%s command on %s: %w", when, c.Host, err))
			}
			out = append(out, cr)
		}
		return out, errors.Join(errs...)
	}
	var err error
	rec.Before, err = commands("before", b.Before)
	var path string
	if err == nil {
		path, err = sess.Run(ctx, co)
	}
	// After commands run whatever happened: they undo what before commands did.
	after, aerr := commands("after", b.After)
	rec.After = after
	if err = errors.Join(err, aerr); err != nil {
		return path, err
	}
	if b.Require.Bottleneck {
		if err := requireBottleneck(path); err != nil {
			return path, err
		}
	}
	return path, nil
}

// requireBottleneck fails a run whose qdiscs under test were not where its delay
// was (require: {bottleneck: true}), or that cannot say where it was.
func requireBottleneck(path string) error {
	run, err := datafile.Read(path)
	if err != nil {
		return fmt.Errorf("require bottleneck: %w", err)
	}
	d := report.SummarizeWith(run, report.Options{}).Delay
	if d == nil {
		return errors.New("require bottleneck: the run has no loaded and idle ping or no bottleneck statistics to say where its delay went")
	}
	if w := d.Warning(); w != "" {
		return fmt.Errorf("require bottleneck: %s", w)
	}
	return nil
}

// maxOutput bounds a before or after command's output kept in its record (and
// its error's text), so that a record stays far below maxRecordLine.
const maxOutput = 256 << 10

// maxRecordLine is the longest record line readRecords reads; a longer one (a
// batch of an older bloatbench, whose outputs were not bounded) is left out with
// its run, which then runs again on --resume.
const maxRecordLine = 16 << 20

func appendRecord(f *os.File, r Record) error {
	r.Error = datafile.Truncate(r.Error, maxOutput)
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("batch records %s: %w", f.Name(), err)
	}
	return f.Sync()
}

// readRecords reads a batch folder's records; a last line cut short (a batch
// killed mid-write) is left out.
func readRecords(dir string) ([]Record, error) {
	f, err := os.Open(filepath.Join(dir, RecordsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("batch records: %w", err)
	}
	defer f.Close()
	var out []Record
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readLine(br, maxRecordLine)
		if len(line) > 0 {
			var r Record
			if json.Unmarshal(line, &r) == nil && r.ID != "" {
				out = append(out, r)
			}
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("batch records %s: %w", f.Name(), err)
		}
	}
}

// readLine reads one line of at most limit bytes; a longer line is read past and
// comes back empty, so that one record cannot make the rest unreadable.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	long := false
	for {
		frag, err := br.ReadSlice('\n')
		if !long && len(line)+len(frag) <= limit {
			line = append(line, frag...)
		} else {
			long, line = true, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long {
			return nil, err
		}
		return bytes.TrimSpace(line), err
	}
}

// complete says whether a data file is there and ended as a complete run.
func complete(path string) bool {
	run, err := datafile.Read(path)
	return err == nil && !run.Incomplete
}

// finish writes summary.md, index.html and, with a baseline, verdict.json, from the
// records of every complete run of the batch (resumes included).
func (o *Options) finish(res *Result) error {
	current, runs, err := comparedRuns(context.Background(), o.Dir, true)
	if err != nil {
		return err
	}
	var out strings.Builder
	fmt.Fprintf(&out, "# Batch %s\n\n", o.Batch.Name)
	if o.Note != "" {
		fmt.Fprintf(&out, "%s\n\n", o.Note)
	}
	fmt.Fprintf(&out, "%d of %d runs complete", res.Done, res.Runs)
	if len(res.Failed) > 0 {
		fmt.Fprintf(&out, ", %d failed", len(res.Failed))
	}
	if res.Interrupted {
		out.WriteString(", interrupted (resume with `bloatbench batch --resume " + o.Dir + "`)")
	}
	out.WriteString(".\n\n")
	if len(res.Failed) > 0 {
		out.WriteString("| failed run | why |\n|---|---|\n")
		for _, f := range res.Failed {
			fmt.Fprintf(&out, "| %s | %s |\n", md(f.ID), md(f.Error))
		}
		out.WriteString("\n")
	}
	if len(current) > 0 {
		if err := report.WriteCompare(&out, "markdown", report.Compare(current, ""), report.Columns{}); err != nil {
			return err
		}
		data := make([]*datafile.Run, len(runs))
		for i, r := range runs {
			data[i] = r.Data
		}
		report.WriteFactDiffs(&out, data, true)
		out.WriteString("\n")
	}
	if o.Baseline != "" {
		base, _, err := comparedRuns(context.Background(), o.Baseline, false)
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		if len(base) == 0 {
			return fmt.Errorf("baseline %s: no complete run in its %s", o.Baseline, RecordsFile)
		}
		res.Checks = Judge(base, current, o.Batch.Limits)
		out.WriteString(VerdictMarkdown(res.Checks, o.Baseline))
	}
	// Written with or without a baseline: a lab's CI reads the batch's outcome here.
	checks := res.Checks
	if checks == nil {
		checks = []Check{}
	}
	raw, _ := json.MarshalIndent(struct {
		Batch       string  `json:"batch"`
		Baseline    string  `json:"baseline,omitempty"`
		Runs        int     `json:"runs"`
		Complete    int     `json:"complete"`
		FailedRuns  int     `json:"failed_runs"`
		Interrupted bool    `json:"interrupted"`
		Regressions int     `json:"regressions"`
		ExitCode    int     `json:"exit_code"`
		Checks      []Check `json:"checks"`
	}{o.Dir, o.Baseline, res.Runs, res.Done, len(res.Failed), res.Interrupted, Regressions(res.Checks), res.ExitCode(), checks}, "", "  ")
	if err := os.WriteFile(filepath.Join(o.Dir, VerdictFile), raw, 0o644); err != nil {
		return fmt.Errorf("verdict: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, SummaryFile), []byte(out.String()), 0o644); err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	if len(runs) > 0 {
		f, err := os.Create(filepath.Join(o.Dir, IndexFile))
		if err != nil {
			return fmt.Errorf("batch page: %w", err)
		}
		defer f.Close()
		if err := htmlreport.Write(f, "batch "+o.Batch.Name, runs); err != nil {
			return err
		}
		return f.Close()
	}
	return nil
}

// comparedRuns reads a batch folder's complete runs, in the order they ran: their
// summaries, and with keep their data for charts. Without keep each run's samples
// are let go once summarised, so that history over many batches holds rows, not
// every batch's samples.
func comparedRuns(ctx context.Context, dir string, keep bool) ([]report.Compared, []htmlreport.Run, error) {
	records, err := readRecords(dir)
	if err != nil {
		return nil, nil, err
	}
	var cs []report.Compared
	var hs []htmlreport.Run
	seen := map[string]bool{}
	for _, r := range records {
		if r.Status != "ok" || seen[r.ID] {
			continue
		}
		run, err := datafile.ReadContext(ctx, filepath.Join(dir, r.Data))
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if err != nil || run.Incomplete {
			continue
		}
		seen[r.ID] = true
		cs = append(cs, report.CompareInput(run, report.Options{}))
		if keep {
			hs = append(hs, htmlreport.RunOf(run))
		}
	}
	return cs, hs, nil
}
