package runners

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/tcstats"
)

// QdiscSpec samples a host's bottleneck devices: every qdisc statistic tc prints and
// every tx queue's BQL inflight and limit, once a step, on the host itself.
type QdiscSpec struct {
	Host string   `json:"host"` // names the series: "qdisc HOST:DEV root drops"
	Devs []string `json:"devs"`
	Step float64  `json:"step"`
	// Start is when the first sample is taken, Unix seconds on this host's clock
	// (the run's t0); 0 = at once.
	Start float64 `json:"start,omitempty"`
	// NoBQL are devices whose byte_queue_limits are not read: an IFB has the
	// files, but its driver never accounts to them, so they would only be zeros.
	NoBQL []string `json:"no_bql,omitempty"`
}

// QdiscSeries and BQLSeries name the sampled series.
func QdiscSeries(host, dev, stat string) string {
	return fmt.Sprintf("qdisc %s:%s %s", host, dev, stat)
}

// BQLSeries names a tx queue's BQL series.
func BQLSeries(host, dev, queue, stat string) string {
	return fmt.Sprintf("bql %s:%s %s %s", host, dev, queue, stat)
}

// qdiscKind samples the host's watched devices; it takes no parameters.
var qdiscKind = Kind{
	Background: true,
	Sampler:    true,
	Plan:       planNone("qdisc"),
	Start: startNone("qdisc", func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		q := QdiscSpec{Host: spec.Host, Step: spec.Step, Start: spec.Start}
		for _, d := range spec.Devs {
			q.Devs = append(q.Devs, d.Name)
			if d.IFB {
				q.NoBQL = append(q.NoBQL, d.Name)
			}
		}
		return JobFunc(func(ctx context.Context) error { return RunQdiscStats(ctx, q, env) }), Started{}, nil
	}),
}

// RunQdiscStats samples until ctx ends. Counters are emitted raw; reports take
// deltas. Which statistics a qdisc has depends on its kind and the kernel, so each
// series is declared when first seen.
func RunQdiscStats(ctx context.Context, spec QdiscSpec, env Env) error {
	emit := declaring(env)
	if spec.Step <= 0 {
		spec.Step = 0.2
	}
	tc, err := exec.LookPath("tc")
	if err != nil {
		return errors.New("tc is not on this host's PATH: install iproute2")
	}
	show := newTCShow(tc)
	defer show.close()
	// The kernel's own dump where it holds all a device's statistics; tc where a
	// qdisc has some only tc knows how to name, for the rest of the run.
	nl, nlErr := tcstats.DialNetlink()
	if nlErr == nil {
		defer nl.Close()
	}
	viaTC := map[string]bool{}
	// Each statistic's series, named and described once, not every step.
	known := map[[2]string]datafile.Series{}
	bql := bqlFiles{root: "/sys/class/net", devs: map[string][]bqlFile{}}
	defer bql.close()
	err = everyStep(ctx, spec.Start, spec.Step, func() error {
		for _, dev := range spec.Devs {
			var stats map[string]float64
			var err error
			if nlErr == nil && !viaTC[dev] {
				if stats, err = nl.Read(dev); err != nil {
					// ErrNeedsTC, or a device netlink cannot read: tc reads it,
					// and says what is wrong with it if anything is.
					viaTC[dev], stats = true, nil
				}
			}
			if stats == nil {
				out, err := show.stats(ctx, dev)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil {
					return fmt.Errorf("tc -s -j qdisc show dev %s: %w", dev, err)
				}
				if stats, err = tcstats.Flatten(out); err != nil {
					return err
				}
			}
			now := unix(time.Now())
			for _, k := range tcstats.SortedKeys(stats) {
				se, ok := known[[2]string{dev, k}]
				if !ok {
					se = datafile.Series{Name: QdiscSeries(spec.Host, dev, k), Kind: datafile.KindQdisc, Host: spec.Host, Dev: dev,
						Stat: k, Units: tcstats.Units(k), Counter: tcstats.IsCounter(k)}
					known[[2]string{dev, k}] = se
				}
				emit(se, datafile.Sample{T: now, V: stats[k]})
			}
			if slices.Contains(spec.NoBQL, dev) {
				continue
			}
			for _, q := range bql.files(dev) {
				b, err := q.read()
				if err != nil {
					bql.drop(dev) // the queues changed: found again next step
					break
				}
				v, err := strconv.ParseFloat(b, 64)
				if err != nil {
					continue
				}
				emit(datafile.Series{Name: BQLSeries(spec.Host, dev, q.queue, q.stat), Kind: datafile.KindBQL, Host: spec.Host, Dev: dev,
					Queue: q.queue, Stat: q.stat, Units: tcstats.Units(q.stat), Counter: tcstats.IsCounter(q.stat)}, datafile.Sample{T: now, V: v})
			}
		}
		return nil
	})
	if ctx.Err() != nil {
		return nil // the run's end, not the sampler's failure
	}
	return err
}

// tcShow reads `tc -s -j qdisc show dev DEV` through one long-lived `tc -batch`
// process: starting tc every step costs the bottleneck host a process start and
// dynamic linking each time (50 ms of CPU in an emulated guest, a quarter of a step),
// which perturbs the very host being measured. A device name that tc's batch parser
// would split or treat as a comment is shown by a tc of its own instead.
type tcShow struct {
	tc  string
	cmd *exec.Cmd
	in  io.WriteCloser
	out *os.File
	buf *bufio.Reader
}

func newTCShow(tc string) *tcShow { return &tcShow{tc: tc} }

const tcShowTimeout = 5 * time.Second

func (t *tcShow) stats(ctx context.Context, dev string) ([]byte, error) {
	if strings.ContainsAny(dev, "\"'\\#") {
		return exec.CommandContext(ctx, t.tc, "-s", "-j", "qdisc", "show", "dev", dev).Output()
	}
	if t.cmd == nil {
		if err := t.start(); err != nil {
			return nil, err
		}
	}
	if _, err := fmt.Fprintf(t.in, "qdisc show dev %s\n", dev); err != nil {
		t.close()
		return nil, fmt.Errorf("tc -batch: %w", err)
	}
	t.out.SetReadDeadline(time.Now().Add(tcShowTimeout))
	line, err := t.buf.ReadBytes('\n')
	if err != nil {
		// tc printed nothing for this device (it went away, or tc failed): the
		// batch's state is unknown, so the next step starts a fresh one.
		t.close()
		out, err2 := exec.CommandContext(ctx, t.tc, "-s", "-j", "qdisc", "show", "dev", dev).CombinedOutput()
		if err2 != nil {
			return nil, fmt.Errorf("%w: %s", err2, strings.TrimSpace(string(out)))
		}
		return out, nil
	}
	return line, nil
}

func (t *tcShow) start() error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("tc -batch: %w", err)
	}
	// Not CommandContext: the batch outlives single calls and close ends it.
	cmd := exec.Command(t.tc, "-s", "-j", "-force", "-batch", "-")
	cmd.Stdout = pw
	in, err := cmd.StdinPipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("tc -batch: %w", err)
	}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start tc -batch: %w", err)
	}
	pw.Close()
	t.cmd, t.in, t.out, t.buf = cmd, in, pr, bufio.NewReaderSize(pr, 1<<20)
	return nil
}

func (t *tcShow) close() {
	if t.cmd == nil {
		return
	}
	t.in.Close()
	t.cmd.Process.Kill()
	t.cmd.Wait()
	t.out.Close()
	t.cmd = nil
}

// bqlFiles are the tx queues' BQL files of each device, found once and kept open:
// a glob of sysfs and an open and close of each file every step cost more than
// the reads themselves (perf of an agent at -s 0.05), and in an emulated
// bottleneck host every step's work is time the device's own traffic waits for.
// A read at offset 0 has sysfs print the value afresh.
type bqlFiles struct {
	root string // /sys/class/net
	devs map[string][]bqlFile
}

type bqlFile struct {
	queue, stat string // tx-0, inflight
	f           *os.File
}

func (b bqlFiles) files(dev string) []bqlFile {
	if fs, ok := b.devs[dev]; ok {
		return fs
	}
	var fs []bqlFile
	queues, _ := filepath.Glob(filepath.Join(b.root, dev, "queues", "tx-*", "byte_queue_limits"))
	for _, q := range queues {
		for _, stat := range []string{"inflight", "limit"} {
			if f, err := os.Open(filepath.Join(q, stat)); err == nil {
				fs = append(fs, bqlFile{queue: filepath.Base(filepath.Dir(q)), stat: stat, f: f})
			}
		}
	}
	b.devs[dev] = fs
	return fs
}

func (q bqlFile) read() (string, error) {
	var buf [32]byte
	n, err := q.f.ReadAt(buf[:], 0)
	if n == 0 && err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

func (b bqlFiles) drop(dev string) {
	for _, q := range b.devs[dev] {
		q.f.Close()
	}
	delete(b.devs, dev)
}

func (b bqlFiles) close() {
	for dev := range b.devs {
		b.drop(dev)
	}
}
