package qdisc

import (
	"fmt"
	"time"

	"github.com/bloatbench/bloatbench/internal/tcrate"
	"github.com/bloatbench/bloatbench/inventory"
)

// RateStep is one change of a setup's rate schedule: from At (after the run's
// start) the htb shaper's rate and ceiling are Rate.
type RateStep struct {
	At   time.Duration
	Rate string
	// Bits is Rate in bits per second.
	Bits float64
}

// MaxRateSteps bounds a schedule: a step is a tc command on the bottleneck while
// the run measures it, and a schedule of thousands would measure tc.
const MaxRateSteps = 100

// maxRateStepAt bounds a step's time: no run is a day long.
const maxRateStepAt = 24 * time.Hour

// checkSchedule checks a setup's rate_schedule: steps in time order, each a tc
// rate, on a setup whose htb they change.
func checkSchedule(steps []inventory.RateStepSpec, s *Setup, errf func(string, ...any) error) ([]RateStep, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	if s.Root == nil || s.Rate == "" {
		return nil, errf("rate_schedule changes the rate of the htb shaper that rate: makes: give the setup rate: and root: {kind: ...} (the qdisc under the shaper)")
	}
	if len(steps) > MaxRateSteps {
		return nil, errf("rate_schedule: %d steps; at most %d", len(steps), MaxRateSteps)
	}
	var out []RateStep
	for i, st := range steps {
		at, err := time.ParseDuration(st.At)
		if err != nil || at < 0 || at > maxRateStepAt {
			return nil, errf("rate_schedule[%d].at %q: a time from the run's start, such as 10s or 1m30s", i, st.At)
		}
		if len(out) > 0 && at <= out[len(out)-1].At {
			return nil, errf("rate_schedule[%d].at %s: the steps go in time order, each after the one before (%s)", i, at, out[len(out)-1].At)
		}
		bits, err := tcrate.Parse(st.Rate)
		if !rateRE.MatchString(st.Rate) || err != nil || bits <= 0 {
			return nil, errf("rate_schedule[%d].rate %q: write a tc rate such as 25mbit", i, st.Rate)
		}
		out = append(out, RateStep{At: at, Rate: st.Rate, Bits: bits})
	}
	return out, nil
}

// IsRate says whether s is a rate as a setup writes one (100mbit, 1.5gbit).
func IsRate(s string) bool { return rateRE.MatchString(s) }

// RateOp changes the rate and ceiling of the htb class a setup with a rate makes
// on dev (Commands: class 1:1 under root 1:), as a rate schedule's step does.
// htb recomputes its bursts from the new rate, as it did when the class was made.
func RateOp(dev, rate string) Op {
	return Op{Argv: []string{"tc", "class", "change", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate}}
}

// Changes is what the setup's schedule will run on dev, one line per step, for a
// person: the time from the run's start, then the command.
func (s *Setup) Changes(dev string) []string {
	var out []string
	for _, st := range s.RateSchedule {
		out = append(out, fmt.Sprintf("at %s: %s", st.At, RateOp(dev, st.Rate).Shell()))
	}
	return out
}

// ScheduleFits says whether the schedule's last step comes before the end of a
// run total long: a step after it would never happen, and the run would not be
// the one the setup describes.
func (s *Setup) ScheduleFits(total time.Duration) error {
	if s == nil || len(s.RateSchedule) == 0 {
		return nil
	}
	if last := s.RateSchedule[len(s.RateSchedule)-1]; last.At >= total {
		return fmt.Errorf("%s: setup %s: rate_schedule's step at %v is not before the run's end (%v, its length and the delay before and after): make the run longer or the schedule shorter",
			s.Source, s.Name, last.At, total)
	}
	return nil
}
