package runners

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/qdisc"
)

// QdiscSpec samples a host's bottleneck devices: every qdisc statistic tc prints and
// every tx queue's BQL inflight and limit, once a step, on the host itself.
type QdiscSpec struct {
	Host string   `json:"host"` // names the series: "qdisc HOST:DEV root drops"
	Devs []string `json:"devs"`
	Step float64  `json:"step"`
}

// QdiscSeries and BQLSeries name the sampled series.
func QdiscSeries(host, dev, stat string) string {
	return fmt.Sprintf("qdisc %s:%s %s", host, dev, stat)
}

// BQLSeries names a tx queue's BQL series.
func BQLSeries(host, dev, queue, stat string) string {
	return fmt.Sprintf("bql %s:%s %s %s", host, dev, queue, stat)
}

// RunQdiscStats samples until ctx ends. Counters are emitted raw; reports take deltas.
func RunQdiscStats(ctx context.Context, spec QdiscSpec, emit Emit) error {
	if spec.Step <= 0 {
		spec.Step = 0.2
	}
	tc, err := exec.LookPath("tc")
	if err != nil {
		return errors.New("tc is not on this host's PATH: install iproute2")
	}
	tick := time.NewTicker(time.Duration(spec.Step * float64(time.Second)))
	defer tick.Stop()
	for {
		for _, dev := range spec.Devs {
			out, err := exec.CommandContext(ctx, tc, "-s", "-j", "qdisc", "show", "dev", dev).Output()
			if ctx.Err() != nil {
				return nil
			}
			now := unix(time.Now())
			if err != nil {
				return fmt.Errorf("tc -s -j qdisc show dev %s: %w", dev, err)
			}
			stats, err := qdisc.Flatten(out)
			if err != nil {
				return err
			}
			for _, k := range qdisc.SortedKeys(stats) {
				emit(QdiscSeries(spec.Host, dev, k), datafile.Sample{T: now, V: stats[k]})
			}
			queues, _ := filepath.Glob(filepath.Join("/sys/class/net", dev, "queues", "tx-*", "byte_queue_limits"))
			for _, q := range queues {
				name := filepath.Base(filepath.Dir(q))
				for _, f := range []string{"inflight", "limit"} {
					b, err := os.ReadFile(filepath.Join(q, f))
					if err != nil {
						continue
					}
					if v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil {
						emit(BQLSeries(spec.Host, dev, name, f), datafile.Sample{T: now, V: v})
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
