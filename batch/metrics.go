package batch

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
)

// The metrics a batch writes with Options.Metrics, in the Prometheus text format
// (version 0.0.4) that node_exporter's textfile collector reads, all gauges:
//
//	bloatbench_batch_runs{batch="nightly"} 12
//	bloatbench_batch_check_current{batch="nightly",test="tcp_4down",streams="4 download streams",setup="FQ_CODEL",metric="Ping (ms) ICMP loaded median",units="ms",threshold="+10%"} 15.2
//
// The batch label is the batch's name, the same every night, so that each series
// is one line over the nights in Grafana; bloatbench_batch_info names the night's
// folder. A family's series have the same label names in every batch's file (the
// collector refuses a family whose labels differ), and HELP texts never change.
// The check series are the checks judged against a baseline (a check without
// numbers has none); bloatbench_batch_judged says whether there was a baseline.
// The run count is a gauge without "_total": it is not a counter (tomorrow's
// batch may have fewer runs), and Prometheus keeps that suffix for counters.

type promFamily struct {
	name, help string
	samples    []promSample
}

type promSample struct {
	labels [][2]string
	value  float64
}

func (f *promFamily) add(v float64, labels ...[2]string) {
	f.samples = append(f.samples, promSample{labels, v})
}

// promText is the batch's metrics file.
func promText(in *reportInput) []byte {
	res := in.Result
	batch := [2]string{"batch", in.Batch}
	one := func(name, help string, v float64) *promFamily {
		f := &promFamily{name: name, help: help}
		f.add(v, batch)
		return f
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	judged := in.Judged
	unjudged := 0
	for _, c := range in.Checks {
		if !judged || math.IsNaN(c.Baseline) || math.IsNaN(c.Current) {
			unjudged++
		}
	}
	exit := res.ExitCode()
	if in.Err != nil {
		exit = 1 // what the command exits with on Execute's error
	}
	fams := []*promFamily{
		{name: "bloatbench_batch_info", help: "The batch's last run: its folder, baseline folder and bloatbench version; always 1."},
		one("bloatbench_batch_runs", "Runs in the batch's plan.", float64(res.Runs)),
		one("bloatbench_batch_runs_complete", "Runs complete, in this invocation of the batch or before its --resume.", float64(res.Done)),
		one("bloatbench_batch_runs_failed", "Runs that failed.", float64(len(res.Failed))),
		one("bloatbench_batch_interrupted", "1 if the batch was interrupted before its last run, else 0.", b2f(res.Interrupted)),
		one("bloatbench_batch_judged", "1 if the batch was judged against a baseline batch, else 0.", b2f(judged)),
		one("bloatbench_batch_checks", "Tests x setups x thresholds of the batch.", float64(len(in.Checks))),
		one("bloatbench_batch_checks_unjudged", "Checks without a verdict: no baseline, or no run of their test and setup in one of the batches.", float64(unjudged)),
		one("bloatbench_batch_regressions", "Checks that are regressions against the baseline.", float64(Regressions(in.Checks))),
		one("bloatbench_batch_exit_code", "The batch's exit code: 0 ok, 1 an error ended the batch (its verdict not written), 3 a regression, 4 runs failed or interrupted.", float64(exit)),
		one("bloatbench_batch_start_timestamp_seconds", "When the batch started (before any --resume), in Unix seconds.", datafile.Unix(in.Started)),
		one("bloatbench_batch_last_end_timestamp_seconds", "When the batch last ended, in Unix seconds.", datafile.Unix(in.Ended)),
	}
	fams[0].add(1, batch, [2]string{"dir", in.Dir}, [2]string{"baseline", in.Baseline}, [2]string{"version", in.Version})
	checks := []*promFamily{
		{name: "bloatbench_batch_check_baseline", help: "A check's metric in the baseline batch: the median over its runs, in the units label's units."},
		{name: "bloatbench_batch_check_current", help: "A check's metric in this batch: the median over its runs, in the units label's units."},
		{name: "bloatbench_batch_check_change_ratio", help: "A check's change, (current - baseline) / |baseline|."},
		{name: "bloatbench_batch_check_p_value", help: "A check's Mann-Whitney U test p-value; 1 with too few runs."},
		{name: "bloatbench_batch_check_regression", help: "1 if a check is a regression, else 0."},
	}
	seen := map[string]int{}
	for _, c := range in.Checks {
		if !judged || math.IsNaN(c.Baseline) || math.IsNaN(c.Current) {
			continue
		}
		threshold := c.Threshold
		// The same threshold listed twice for a metric (one of them asking for
		// significance) would make two series of one label set.
		key := strings.Join([]string{c.Test, c.Streams, c.Setup, c.Metric, c.Threshold}, "\x00")
		if seen[key]++; seen[key] > 1 {
			threshold += " #" + strconv.Itoa(seen[key])
		}
		labels := [][2]string{batch, {"test", c.Test}, {"streams", c.Streams}, {"setup", c.Setup}, {"metric", c.Metric},
			{"units", c.Units}, {"threshold", threshold}}
		for i, v := range []float64{c.Baseline, c.Current, c.Change, c.P, b2f(c.Regression)} {
			if !math.IsNaN(v) {
				checks[i].add(v, labels...)
			}
		}
	}
	var b strings.Builder
	for _, f := range append(fams, checks...) {
		if len(f.samples) == 0 {
			continue
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", f.name, helpEscaper.Replace(f.help), f.name)
		for _, s := range f.samples {
			b.WriteString(f.name)
			b.WriteByte('{')
			for i, l := range s.labels {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `%s="%s"`, l[0], labelEscaper.Replace(visible(l[1])))
			}
			b.WriteString("} ")
			b.WriteString(promFloat(s.value))
			b.WriteByte('\n')
		}
	}
	return []byte(b.String())
}

// The text format's escapes: in HELP, backslash and newline; in a label value,
// those and the double quote.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func promFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
