package batch

import (
	"context"
	"fmt"
	"math"
	"path/filepath"

	"github.com/bloatbench/bloatbench/htmlreport"
)

// HistoryMetrics are what `history` draws unless told otherwise: the loaded ping's
// median and the throughput sums, the numbers a nightly run exists to watch.
var HistoryMetrics = []string{"Ping (ms) ICMP loaded median", "TCP download sum", "TCP upload sum"}

// Histories reads batch folders, oldest first, and makes one chart a test and
// setup: each metric's median over every batch's runs, with the baseline batch's
// range when baseline is given.
func Histories(ctx context.Context, dirs []string, baseline string, metrics []string) ([]htmlreport.History, error) {
	for _, m := range metrics {
		if !knownMetric(m) {
			return nil, fmt.Errorf("history: metric %q: one of %v", m, MetricNames())
		}
	}
	type batchGroups map[string]*group
	var all []batchGroups
	var order []string
	seen := map[string]*group{}
	for _, d := range dirs {
		in, _, err := comparedRuns(ctx, d, false)
		if err != nil {
			return nil, fmt.Errorf("history: %s: %w", d, err)
		}
		g, o := groups(in)
		all = append(all, g)
		for _, k := range o {
			if seen[k] == nil {
				seen[k] = g[k]
				order = append(order, k)
			}
		}
	}
	var base batchGroups
	if baseline != "" {
		in, _, err := comparedRuns(ctx, baseline, false)
		if err != nil {
			return nil, fmt.Errorf("history: baseline %s: %w", baseline, err)
		}
		base, _ = groups(in)
	}
	names := make([]string, len(dirs))
	for i, d := range dirs {
		names[i] = filepath.Base(filepath.Clean(d))
	}
	var out []htmlreport.History
	for _, k := range order {
		first := seen[k]
		test := first.test
		if first.streams != "" {
			test += " (" + first.streams + ")"
		}
		h := htmlreport.History{Test: test, Setup: first.setup, Batches: names}
		for _, name := range metrics {
			m := metric(name)
			t := htmlreport.Trend{Metric: m.Name, Units: m.Units, BaseLo: math.NaN(), BaseHi: math.NaN()}
			found := false
			for _, bg := range all {
				var vs []float64
				if g := bg[k]; g != nil {
					vs = values(m, g.runs)
				}
				med, lo, hi := htmlreport.Spread(vs)
				found = found || len(vs) > 0
				t.Medians, t.Lo, t.Hi = append(t.Medians, med), append(t.Lo, lo), append(t.Hi, hi)
			}
			if !found {
				continue
			}
			if g := base[k]; g != nil {
				_, t.BaseLo, t.BaseHi = htmlreport.Spread(values(m, g.runs))
			}
			h.Trends = append(h.Trends, t)
		}
		if len(h.Trends) > 0 {
			out = append(out, h)
		}
	}
	return out, nil
}
