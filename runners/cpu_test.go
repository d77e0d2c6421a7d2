package runners

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// procStatFixture is /proc/stat of a two-core host, as Linux 6.x prints it.
const procStatFixture = `cpu  11439 12 7213 81978 233 7 315 3 20 0
cpu0 5439 5 3554 41422 27 3 173 1 10 0
cpu1 6000 7 3659 40555 206 4 142 2 10 0
intr 1462898 9 0 0 0 0 0 0 0 1 0 0 0 128 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
ctxt 115315133
btime 1769000000
processes 26442
procs_running 1
procs_blocked 0
softirq 12121 0 3021 2 4001 5 0 17 2904 0 2171
`

func jiffies(name string, n int, j ...uint64) cpuJiffies {
	c := cpuJiffies{Name: name, N: n}
	copy(c.J[:], j)
	return c
}

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []cpuJiffies
		err      string
	}{
		{name: "linux 6", in: procStatFixture, want: []cpuJiffies{
			jiffies("cpu", 8, 11439, 12, 7213, 81978, 233, 7, 315, 3),
			jiffies("cpu0", 8, 5439, 5, 3554, 41422, 27, 3, 173, 1),
			jiffies("cpu1", 8, 6000, 7, 3659, 40555, 206, 4, 142, 2),
		}},
		{name: "old kernel, 7 fields", in: "cpu 1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\nintr 5\n", want: []cpuJiffies{
			jiffies("cpu", 7, 1, 2, 3, 4, 5, 6, 7),
			jiffies("cpu0", 7, 1, 2, 3, 4, 5, 6, 7),
		}},
		{name: "2.4 kernel, 4 fields", in: "cpu 1 2 3 4\n", want: []cpuJiffies{jiffies("cpu", 4, 1, 2, 3, 4)}},
		{name: "future fields ignored", in: "cpu 1 2 3 4 5 6 7 8 9 10 11 12\n", want: []cpuJiffies{
			jiffies("cpu", 8, 1, 2, 3, 4, 5, 6, 7, 8),
		}},
		{name: "stops after the cpu lines", in: "cpu 1 2 3 4\nctxt 1\ncpu9 x\n", want: []cpuJiffies{jiffies("cpu", 4, 1, 2, 3, 4)}},
		{name: "cpu-prefixed other line", in: "cpufreq 1\ncpu 1 2 3 4\n", want: []cpuJiffies{jiffies("cpu", 4, 1, 2, 3, 4)}},
		{name: "too few fields", in: "cpu 1 2 3\n", err: "cpu line has 3 fields"},
		{name: "not a number", in: "cpu 1 2 x 4\n", err: "cpu line, field 3"},
		{name: "negative", in: "cpu 1 2 -3 4\n", err: "cpu line, field 3"},
		{name: "no host line", in: "cpu0 1 2 3 4\n", err: "no cpu line"},
		{name: "empty", in: "", err: "no cpu line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestCPUShares(t *testing.T) {
	// A step of 200 jiffies (guest's 20 more are not counted: user has them),
	// so every share is exact.
	prev := jiffies("cpu", 8, 100, 0, 50, 700, 20, 5, 15, 10)
	cur := jiffies("cpu", 8, 140, 10, 80, 800, 26, 7, 23, 14)
	for _, tc := range []struct {
		name      string
		prev, cur cpuJiffies
		want      []cpuShare // nil: the step is skipped
	}{
		{name: "linux 6", prev: prev, cur: cur, want: []cpuShare{
			{"user", 25}, {"sys", 15}, {"softirq", 4}, {"irq", 1}, {"iowait", 3}, {"steal", 2}, {"busy", 47},
		}},
		{name: "old kernel, no steal", prev: jiffies("cpu", 7), cur: jiffies("cpu", 7, 10, 0, 20, 60, 5, 3, 2), want: []cpuShare{
			{"user", 10}, {"sys", 20}, {"softirq", 2}, {"irq", 3}, {"iowait", 5}, {"busy", 35},
		}},
		{name: "2.4 kernel", prev: jiffies("cpu", 4), cur: jiffies("cpu", 4, 1, 1, 2, 4), want: []cpuShare{
			{"user", 25}, {"sys", 25}, {"busy", 50},
		}},
		{name: "all idle", prev: jiffies("cpu", 8), cur: jiffies("cpu", 8, 0, 0, 0, 5), want: []cpuShare{
			{"user", 0}, {"sys", 0}, {"softirq", 0}, {"irq", 0}, {"iowait", 0}, {"steal", 0}, {"busy", 0},
		}},
		{name: "all iowait", prev: jiffies("cpu", 8), cur: jiffies("cpu", 8, 0, 0, 0, 0, 5), want: []cpuShare{
			{"user", 0}, {"sys", 0}, {"softirq", 0}, {"irq", 0}, {"iowait", 100}, {"steal", 0}, {"busy", 0},
		}},
		{name: "idle went backwards", prev: prev, cur: jiffies("cpu", 8, 140, 10, 80, 699, 26, 7, 23, 14)},
		{name: "iowait went backwards", prev: prev, cur: jiffies("cpu", 8, 140, 10, 80, 800, 19, 7, 23, 14)},
		{name: "zero delta", prev: prev, cur: prev},
		{name: "zero everything", prev: jiffies("cpu", 8), cur: jiffies("cpu", 8)},
		{name: "fields changed", prev: jiffies("cpu", 7), cur: jiffies("cpu", 8, 1, 1, 1, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cpuShares(tc.prev, tc.cur)
			if ok != (tc.want != nil) {
				t.Fatalf("ok = %v, want %v (shares %v)", ok, tc.want != nil, got)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for _, sh := range got {
				if err := datafile.CheckSample(sh.Stat, datafile.Sample{T: 1, V: sh.V}); err != nil || sh.V < 0 || sh.V > 100 {
					t.Errorf("%s = %v: %v", sh.Stat, sh.V, err)
				}
			}
		})
	}
}

// cpuRecorder is an Env that keeps what a job declares and emits, and what it did
// wrong: a sample of an undeclared series, a series declared twice, a sample the
// data file would refuse.
type cpuRecorder struct {
	mu       sync.Mutex
	declared map[string]datafile.Series
	samples  map[string][]datafile.Sample
	errs     []string
}

func newCPURecorder() *cpuRecorder {
	return &cpuRecorder{declared: map[string]datafile.Series{}, samples: map[string][]datafile.Sample{}}
}

func (r *cpuRecorder) env() Env {
	return Env{
		Declare: func(s datafile.Series) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if _, dup := r.declared[s.Name]; dup {
				r.errs = append(r.errs, "declared twice: "+s.Name)
			}
			r.declared[s.Name] = s
		},
		Emit: func(name string, s datafile.Sample) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if _, ok := r.declared[name]; !ok {
				r.errs = append(r.errs, "sample before its series: "+name)
			}
			if err := datafile.CheckSample(name, s); err != nil {
				r.errs = append(r.errs, err.Error())
			}
			if s.V < 0 || s.V > 100 {
				r.errs = append(r.errs, fmt.Sprintf("%s: %v is not a percentage", name, s.V))
			}
			r.samples[name] = append(r.samples[name], s)
		},
		Warn: func(msg string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.errs = append(r.errs, "warning: "+msg)
		},
	}
}

// TestCPUObserveSteps feeds reads through the sampler's step logic: the first is
// the baseline, a skipped step emits nothing, and a core that leaves and returns
// starts over.
func TestCPUObserveSteps(t *testing.T) {
	rec := newCPURecorder()
	env := rec.env()
	s := &cpuSampler{host: "server", perCore: true, env: env}
	seen := map[string]bool{}
	emit := func(sr datafile.Series, smp datafile.Sample) {
		if !seen[sr.Name] {
			seen[sr.Name] = true
			env.Declare(sr)
		}
		env.Emit(sr.Name, smp)
	}
	reads := [][]cpuJiffies{
		{jiffies("cpu", 8), jiffies("cpu0", 8), jiffies("cpu1", 8)},
		{jiffies("cpu", 8, 0, 0, 10, 10), jiffies("cpu0", 8, 0, 0, 10), jiffies("cpu1", 8, 0, 0, 0, 10)},
		{jiffies("cpu", 8, 0, 0, 10, 10), jiffies("cpu0", 8, 0, 0, 10)},                                      // no time passed; cpu1 offline
		{jiffies("cpu", 8, 0, 0, 20, 20), jiffies("cpu0", 8, 0, 0, 20), jiffies("cpu1", 8, 0, 0, 0, 20)},     // cpu1 back: baseline
		{jiffies("cpu", 8, 0, 0, 20, 30), jiffies("cpu0", 8, 0, 0, 20, 10), jiffies("cpu1", 8, 0, 0, 0, 19)}, // cpu1 idle went back
	}
	var prev map[string]cpuJiffies
	for i, r := range reads {
		prev = s.observe(prev, r, float64(1000+i), emit)
	}
	if len(rec.errs) > 0 {
		t.Fatal(strings.Join(rec.errs, "\n"))
	}
	want := map[string][]datafile.Sample{
		"cpu server all sys":   {{T: 1001, V: 50}, {T: 1003, V: 50}, {T: 1004, V: 0}},
		"cpu server all busy":  {{T: 1001, V: 50}, {T: 1003, V: 50}, {T: 1004, V: 0}},
		"cpu server cpu0 sys":  {{T: 1001, V: 100}, {T: 1003, V: 100}, {T: 1004, V: 0}},
		"cpu server cpu0 busy": {{T: 1001, V: 100}, {T: 1003, V: 100}, {T: 1004, V: 0}},
		"cpu server cpu1 sys":  {{T: 1001, V: 0}},
		"cpu server cpu1 busy": {{T: 1001, V: 0}},
	}
	for name, w := range want {
		if got := rec.samples[name]; !reflect.DeepEqual(got, w) {
			t.Errorf("%s: got %v, want %v", name, got, w)
		}
	}
	if got, want := len(rec.declared), 3*7; got != want {
		t.Errorf("%d series declared, want %d", got, want)
	}
	if s := rec.declared["cpu server cpu1 softirq"]; s != (datafile.Series{Name: "cpu server cpu1 softirq", Kind: datafile.KindCPU,
		Units: "%", Host: "server", Stat: "softirq"}) {
		t.Errorf("declared %+v", s)
	}
}

// TestCPURun runs the kind on this host's /proc/stat, as an agent would.
func TestCPURun(t *testing.T) {
	b, err := os.ReadFile(procStat)
	if err != nil {
		t.Fatalf("no %s here: %v (the cpu sampler reads it on every Linux host)", procStat, err)
	}
	var cores []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 0 && len(f[0]) > 3 && isCPUName(f[0]) {
			cores = append(cores, f[0])
		}
	}
	t.Logf("%s has %d cores; runtime.NumCPU() = %d", procStat, len(cores), runtime.NumCPU())
	if len(cores) < runtime.NumCPU() {
		t.Errorf("%s has %d core lines, fewer than the %d CPUs this process may use", procStat, len(cores), runtime.NumCPU())
	}
	for _, tc := range []struct {
		params map[string]any
		cores  []string
	}{
		{params: nil},
		{params: map[string]any{"per_core": "false"}},
		{params: map[string]any{"per_core": true}, cores: cores},
	} {
		t.Run(fmt.Sprint(tc.params), func(t *testing.T) {
			t.Parallel()
			kind := Kinds()["cpu"]
			if !kind.Background {
				t.Error("cpu is not a background kind")
			}
			raw, series, err := kind.Plan(tc.params, NewPlanner())
			if err != nil || series != nil {
				t.Fatalf("Plan: %s, %v, %v", raw, series, err)
			}
			rec := newCPURecorder()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			job, _, err := kind.Start(ctx, JobSpec{Kind: "cpu", Step: 0.05, Host: "h", Params: raw}, rec.env())
			if err != nil {
				t.Fatal(err)
			}
			if err := job.Run(ctx); err != nil {
				t.Fatalf("Run: %v", err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.errs) > 0 {
				t.Fatal(strings.Join(rec.errs, "\n"))
			}
			if n := len(rec.samples["cpu h all busy"]); n < 3 {
				t.Errorf("%d samples of cpu h all busy, want at least 3", n)
			}
			var got []string
			for name, s := range rec.declared {
				if s.Kind != datafile.KindCPU || s.Units != "%" || s.Host != "h" || name != CPUSeries("h", strings.Fields(name)[2], s.Stat) {
					t.Errorf("declared %+v", s)
				}
				if cpu := strings.Fields(name)[2]; cpu != "all" && s.Stat == "busy" {
					got = append(got, cpu)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.cores)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("per-core busy series for %v, want %v", got, want)
			}
		})
	}
}

func TestCPUPlan(t *testing.T) {
	var cases []planCase
	for _, c := range []struct {
		params map[string]any
		want   string // the agent's parameters, or the error
	}{
		{params: nil, want: `{}`},
		{params: map[string]any{}, want: `{}`},
		{params: map[string]any{"per_core": true}, want: `{"per_core":true}`},
		{params: map[string]any{"per_core": "true"}, want: `{"per_core":true}`},
		{params: map[string]any{"per_core": false}, want: `{}`},
		{params: map[string]any{"per_core": "false"}, want: `{}`},
		{params: map[string]any{"bogus": 1}, want: `error: unknown field "bogus"`},
		{params: map[string]any{"per_core": "yes"}, want: `error: "yes" is not true or false`},
		{params: map[string]any{"per_core": 1}, want: `error: 1 is not true or false`},
		{params: map[string]any{"per_core": ""}, want: `error: "" is not true or false`},
		{params: map[string]any{"per_core": nil}, want: `error: null is not true or false`},
	} {
		cases = append(cases, planCase{kind: "cpu", params: c.params, want: c.want})
	}
	// The agent takes what the controller planned.
	checkPlans(t, cases, func(_ string, raw json.RawMessage) error {
		var p perCoreParams
		return decodeRaw(raw, &p)
	})
}
