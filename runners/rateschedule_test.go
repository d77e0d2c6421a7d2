package runners

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
		change: func(ctx context.Context, dev, rate string) error {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, dev+" "+rate)
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

// A change tc refuses ends the job with its error, naming the step.
func TestRateScheduleChangeFails(t *testing.T) {
	r := &rateSchedule{host: "router", devs: []string{"eth0"}, step: 0.01, env: Env{Emit: func(string, datafile.Sample) {}},
		params: RateScheduleParams{Initial: 10e6, Steps: []RateScheduleStep{{At: 0.01, Rate: "25mbit", Bits: 25e6}}},
		change: func(ctx context.Context, dev, rate string) error {
			return errors.New("RTNETLINK answers: No such file or directory")
		}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.run(ctx); err == nil || !strings.Contains(err.Error(), "step at 0.01s") || !strings.Contains(err.Error(), "RTNETLINK") {
		t.Errorf("run: %v", err)
	}
}

// fakeTC is a tc -batch that keeps one rate for every class and prints it, as
// tc shows an htb class; a change on device "refuses" fails as tc's do.
const fakeTC = `#!/bin/sh
rate=40Mbit
n=0
while read -r w1 w2 w3 dev w5 w6 w7 w8 w9 w10 r rest; do
	n=$((n+1))
	case "$w1 $w2" in
	"class change")
		if [ "$dev" = refuses ]; then
			echo "RTNETLINK answers: Invalid argument" >&2
			echo "Command failed -:$n" >&2
		else
			rate=$(echo "$r" | sed 's/mbit/Mbit/')
		fi ;;
	"class show")
		if [ "$dev" = noclass ]; then continue; fi
		echo "class htb 1:1 root prio 0 rate $rate ceil $rate burst 1600b cburst 1600b" ;;
	esac
done
`

// The batch's protocol: a change is in when tc shows the class at its rate;
// a refused one, or a device without the class, is an error saying what tc
// said.
func TestTCBatch(t *testing.T) {
	tc := filepath.Join(t.TempDir(), "tc")
	if err := os.WriteFile(tc, []byte(fakeTC), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := startTCBatch(ctx, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if err := b.change(ctx, []string{"eth0", "eth1"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.change(ctx, []string{"eth0", "eth1"}, "25mbit"); err != nil {
		t.Fatal(err)
	}
	if err := b.change(ctx, []string{"refuses"}, "5mbit"); err == nil || !strings.Contains(err.Error(), "the class's rate is 25Mbit after the change, not 5e+06 bit/s") || !strings.Contains(err.Error(), "Invalid argument") {
		t.Errorf("a refused change: %v", err)
	}
}

func TestHTBClassAt(t *testing.T) {
	for _, c := range []struct {
		line string
		want float64
		err  string
	}{
		{"class htb 1:1 root leaf 10: prio 0 rate 25Mbit ceil 25Mbit burst 1600b cburst 1600b", 25e6, ""},
		{"class htb 1:1 root prio 0 rate 1500Kbit ceil 1500Kbit burst 1599b cburst 1599b", 1.5e6, ""},
		{"class htb 1:1 root prio 0 rate 25Mbit ceil 50Mbit burst 1600b cburst 1600b", 25e6, "ceil is 50Mbit"},
		{"class htb 1:1 root prio 0 rate 25Mbit ceil 25Mbit", 0, ""},
		{"class htb 1:10 parent 1:1 prio 0 rate 25Mbit ceil 25Mbit", 25e6, "no htb class 1:1"},
		{"class hfsc 1:1 root", 0, "no htb class 1:1"},
		{"class htb 1:1 root prio 0", 25e6, "no rate"},
	} {
		err := htbClassAt(c.line, c.want)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q at %g: %v, want %q", c.line, c.want, err, c.err)
		}
	}
}
