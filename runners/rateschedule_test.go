package runners

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/qdisc"
)

// The agent takes a schedule's parameters on no trust: what a setup's check
// would refuse is refused again.
func TestRateScheduleParamsChecked(t *testing.T) {
	ok := RateScheduleParams{Initial: 50e6, Steps: []RateScheduleStep{{At: 1, Rate: "25mbit", Bits: 25e6}, {At: 2, Rate: "5mbit", Bits: 5e6}}}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(p *RateScheduleParams){
		"no steps":            func(p *RateScheduleParams) { p.Steps = nil },
		"no initial rate":     func(p *RateScheduleParams) { p.Initial = 0 },
		"out of order":        func(p *RateScheduleParams) { p.Steps[1].At = 1 },
		"past a day":          func(p *RateScheduleParams) { p.Steps[1].At = 86401 },
		"a rate tc would run": func(p *RateScheduleParams) { p.Steps[0].Rate = "25mbit; reboot" },
		"a rate of nothing":   func(p *RateScheduleParams) { p.Steps[0].Bits = 0 },
		"too many steps": func(p *RateScheduleParams) {
			for i := range qdisc.MaxRateSteps {
				p.Steps = append(p.Steps, RateScheduleStep{At: float64(3 + i), Rate: "1mbit", Bits: 1e6})
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := ok
			p.Steps = append([]RateScheduleStep(nil), ok.Steps...)
			change(&p)
			if err := p.check(); err == nil {
				t.Errorf("%+v passed", p)
			}
		})
	}
	if _, _, err := rateScheduleKind.Plan(map[string]any{}, NewPlanner()); err == nil || !strings.Contains(err.Error(), "rate_schedule") {
		t.Errorf("a test naming the kind: %v", err)
	}
}

// The kind's parameters come from the setup's schedule, in seconds from the
// run's start.
func TestRateScheduleJob(t *testing.T) {
	s := &qdisc.Setup{Name: "steps", Rate: "50mbit", Root: &qdisc.Qdisc{Kind: "fq_codel"},
		RateSchedule: []qdisc.RateStep{{At: 1500 * time.Millisecond, Rate: "25mbit", Bits: 25e6}}}
	raw, err := RateScheduleJob(s)
	if err != nil {
		t.Fatal(err)
	}
	var p RateScheduleParams
	if err := json.Unmarshal(raw, &p); err != nil || p.Initial != 50e6 || len(p.Steps) != 1 || p.Steps[0] != (RateScheduleStep{At: 1.5, Rate: "25mbit", Bits: 25e6}) {
		t.Errorf("%s: %+v %v", raw, p, err)
	}
}

// A run makes every change in order on every device, and its samples go from
// the setup's rate through each step's in that order, never back: checked by
// what was changed and sampled, not by the clock.
func TestRateScheduleRun(t *testing.T) {
	var mu sync.Mutex
	var changes []string
	var confirms [][]float64
	var samples []datafile.Sample
	declared := map[string]datafile.Series{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := Env{
		Emit: func(name string, x datafile.Sample) {
			mu.Lock()
			defer mu.Unlock()
			if strings.HasSuffix(name, ":eth0 rate") {
				samples = append(samples, x)
				// Two samples after the last change, then the run ends.
				if len(changes) == 6 && x.V == 50 {
					cancel()
				}
			}
		},
		Declare: func(se datafile.Series) { mu.Lock(); declared[se.Name] = se; mu.Unlock() },
	}
	r := &rateSchedule{host: "router", devs: []string{"eth0", "eth1"}, step: 0.01, env: env,
		params: RateScheduleParams{Initial: 10e6, Steps: []RateScheduleStep{{At: 0.03, Rate: "25mbit", Bits: 25e6}, {At: 0.06, Rate: "5mbit", Bits: 5e6}, {At: 0.09, Rate: "50mbit", Bits: 50e6}}},
		apply: func(devs []string, rate string) error {
			mu.Lock()
			defer mu.Unlock()
			for _, dev := range devs {
				changes = append(changes, dev+" "+rate)
			}
			return nil
		},
		confirm: func(ctx context.Context, devs []string, rates []float64) error {
			mu.Lock()
			defer mu.Unlock()
			confirms = append(confirms, rates)
			return nil
		}}
	done := make(chan error, 1)
	go func() { done <- r.run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the schedule did not end")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "eth0 25mbit,eth1 25mbit,eth0 5mbit,eth1 5mbit,eth0 50mbit,eth1 50mbit"; strings.Join(changes, ",") != want {
		t.Errorf("changes %v, want %s", changes, want)
	}
	// Each step confirmed as its rate or a later step's (which may have gone in
	// before the confirmation ran).
	want := [][]float64{{25e6, 5e6, 50e6}, {5e6, 50e6}, {50e6}}
	slices.SortFunc(confirms, func(a, b []float64) int { return len(b) - len(a) })
	if !reflect.DeepEqual(confirms, want) {
		t.Errorf("confirmed %v, want %v", confirms, want)
	}
	order := []float64{10, 25, 5, 50}
	k := 0
	for i, x := range samples {
		for k < len(order) && x.V != order[k] {
			k++
		}
		if k == len(order) {
			t.Fatalf("sample %d: %g Mbit/s out of the schedule's order %v: %+v", i, x.V, order, samples)
		}
		if i > 0 && x.T < samples[i-1].T {
			t.Errorf("sample %d goes back in time", i)
		}
	}
	if samples[0].V != 10 || samples[len(samples)-1].V != 50 {
		t.Errorf("samples from %g to %g Mbit/s, want the setup's 10 to the last step's 50", samples[0].V, samples[len(samples)-1].V)
	}
	se := declared[ShaperSeries("router", "eth1")]
	if se.Kind != datafile.KindShaper || se.Units != "Mbit/s" || se.Dev != "eth1" || se.Host != "router" || len(declared) != 2 {
		t.Errorf("declared %+v", declared)
	}
}

// A change the kernel does not show ends the job with its error, naming the
// step.
func TestRateScheduleChangeFails(t *testing.T) {
	r := &rateSchedule{host: "router", devs: []string{"eth0"}, step: 0.01, env: Env{Emit: func(string, datafile.Sample) {}},
		params: RateScheduleParams{Initial: 10e6, Steps: []RateScheduleStep{{At: 0.01, Rate: "25mbit", Bits: 25e6}}},
		apply:  func([]string, string) error { return nil },
		confirm: func(ctx context.Context, devs []string, rates []float64) error {
			return errors.New("RTNETLINK answers: No such file or directory")
		}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.run(ctx); err == nil || !strings.Contains(err.Error(), "step at 0.01s") || !strings.Contains(err.Error(), "RTNETLINK") {
		t.Errorf("run: %v", err)
	}
}

// fakeTC is a tc that keeps one rate for every class, in a file beside it:
// `tc class show` prints it as tc shows an htb class (none on device
// "noclass"), and `tc -force -batch -` takes class changes, refusing those on
// device "refuses" as tc does.
const fakeTC = `#!/bin/sh
state="$(dirname "$0")/rate"
[ -f "$state" ] || echo 40Mbit > "$state"
if [ "$1 $2" = "class show" ]; then
	[ "$4" = noclass ] && exit 0
	echo "class htb 1:1 root prio 0 rate $(cat "$state") ceil $(cat "$state") burst 1600b cburst 1600b"
	exit 0
fi
n=0
while read -r w1 w2 w3 dev w5 w6 w7 w8 w9 w10 r rest; do
	n=$((n+1))
	if [ "$dev" = refuses ]; then
		echo "RTNETLINK answers: Invalid argument" >&2
		echo "Command failed -:$n" >&2
		continue
	fi
	echo "$r" | sed 's/mbit/Mbit/' > "$state"
done
`

// A change is in when tc shows the class at its rate; a refused one, or a
// device without the class, is an error saying what tc said.
func TestTCBatch(t *testing.T) {
	tc := filepath.Join(t.TempDir(), "tc")
	if err := os.WriteFile(tc, []byte(fakeTC), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	line, err := showClass(ctx, tc, "eth0")
	if err != nil || htbClassAt(line, 40e6) != nil {
		t.Fatalf("the class as set up: %q, %v", line, err)
	}
	if line, err := showClass(ctx, tc, "noclass"); err != nil || htbClassAt(line) == nil {
		t.Errorf("a device without the class: %q, %v", line, err)
	}
	b, err := startTCBatch(ctx, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if err := b.apply([]string{"eth0", "eth1"}, "25mbit"); err != nil {
		t.Fatal(err)
	}
	if err := b.confirm(ctx, []string{"eth0", "eth1"}, []float64{25e6}); err != nil {
		t.Fatal(err)
	}
	if err := b.apply([]string{"refuses"}, "5mbit"); err != nil {
		t.Fatal(err)
	}
	if err := b.confirm(ctx, []string{"refuses"}, []float64{5e6}); err == nil || !strings.Contains(err.Error(), "are 2.5e+07 and 2.5e+07 bit/s after the change, not 5e+06") || !strings.Contains(err.Error(), "Invalid argument") {
		t.Errorf("a refused change: %v", err)
	}
}

func TestHTBClassAt(t *testing.T) {
	for _, c := range []struct {
		line  string
		rates []float64
		err   string
	}{
		{"class htb 1:1 root leaf 10: prio 0 rate 25Mbit ceil 25Mbit burst 1600b cburst 1600b", []float64{25e6}, ""},
		{"class htb 1:1 root prio 0 rate 1500Kbit ceil 1500Kbit burst 1599b cburst 1599b", []float64{1.5e6}, ""},
		{"class htb 1:1 root prio 0 rate 5Mbit ceil 5Mbit", []float64{25e6, 5e6}, ""},
		{"class htb 1:1 root prio 0 rate 25Mbit ceil 50Mbit burst 1600b cburst 1600b", []float64{25e6, 50e6}, "are 2.5e+07 and 5e+07 bit/s"},
		{"class htb 1:1 root prio 0 rate 25Mbit ceil 25Mbit", nil, ""},
		{"class htb 1:10 parent 1:1 prio 0 rate 25Mbit ceil 25Mbit", []float64{25e6}, "no htb class 1:1"},
		{"class hfsc 1:1 root", nil, "no htb class 1:1"},
		{"class htb 1:1 root prio 0", []float64{25e6}, "no rate"},
		{"class htb 1:1 root prio 0 rate fast ceil 25Mbit", []float64{25e6}, `rate "fast"`},
	} {
		err := htbClassAt(c.line, c.rates...)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q at %g: %v, want %q", c.line, c.rates, err, c.err)
		}
	}
}

// A start finds the class on every bottleneck device of the host (the IFBs
// left out), or fails naming the device; the run's changes go through it.
func TestRateScheduleStart(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tc"), []byte(fakeTC), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	params, err := json.Marshal(RateScheduleParams{Initial: 40e6, Steps: []RateScheduleStep{{At: 0.05, Rate: "25mbit", Bits: 25e6}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := JobSpec{Kind: "rate-schedule", Host: "router", Step: 0.01, Params: params, Devs: []Dev{{Name: "eth0"}, {Name: "noclass", IFB: true}}}
	var mu sync.Mutex
	var last float64
	env := Env{Emit: func(_ string, x datafile.Sample) { mu.Lock(); last = x.V; mu.Unlock() }}
	job, started, err := rateScheduleKind.Start(ctx, spec, env)
	if err != nil {
		t.Fatal(err)
	}
	if started.Message != "rate schedule of 1 steps on eth0" {
		t.Errorf("started: %q", started.Message)
	}
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- job.Run(jctx) }()
	for {
		line, _ := showClass(ctx, filepath.Join(dir, "tc"), "eth0")
		mu.Lock()
		at := last
		mu.Unlock()
		if htbClassAt(line, 25e6) == nil && at == 25 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the job ended before its change: %v", err)
		case <-ctx.Done():
			t.Fatal("the change never showed")
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Error(err)
	}
	spec.Devs = []Dev{{Name: "eth0"}, {Name: "noclass"}}
	if _, _, err := rateScheduleKind.Start(ctx, spec, env); err == nil || !strings.Contains(err.Error(), "rate schedule on noclass: no htb class 1:1 to change") {
		t.Errorf("a device without the class: %v", err)
	}
}
