package report

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

func TestGridWarnings(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		name     string
		change   func(run *datafile.Run)
		from, to float64 // seconds into the run; 0, 0 = all
		want     []string
	}{
		{name: "every series on its grid", change: func(*datafile.Run) {}},
		{name: "ping started 1 s late", change: func(run *datafile.Run) {
			run.Samples["Ping (ms) ICMP"] = run.Samples["Ping (ms) ICMP"][5:]
		}, want: []string{"Ping (ms) ICMP has 65 of its 70 grid points (misses 7%"}},
		{name: "3 probes missing are within 5%", change: func(run *datafile.Run) {
			run.Samples["Ping (ms) ICMP"] = run.Samples["Ping (ms) ICMP"][3:]
		}},
		{name: "a lost probe is a point", change: func(run *datafile.Run) {
			for i := range run.Samples["Ping (ms) ICMP"][:10] {
				run.Samples["Ping (ms) ICMP"][i].Lost = true
			}
		}},
		{name: "a flow that stalled for a second", change: func(run *datafile.Run) {
			ss := run.Samples["TCP download::2"]
			run.Samples["TCP download::2"] = append(ss[:20:20], ss[26:]...)
		}, want: []string{"TCP download::2 has 44 of its 50 grid points (misses 12%"}},
		{name: "outside the cut, a miss is no miss", change: func(run *datafile.Run) {
			run.Samples["Ping (ms) ICMP"] = run.Samples["Ping (ms) ICMP"][5:]
		}, from: 3, to: 8},
		{name: "qdisc sampled from t0", change: func(run *datafile.Run) {
			run.Series = append(run.Series, datafile.Series{Name: "qdisc server:test0 root backlog", Kind: datafile.KindQdisc, Host: "server"})
			for k := 10; k < 70; k++ {
				run.Samples["qdisc server:test0 root backlog"] = append(run.Samples["qdisc server:test0 root backlog"],
					datafile.Sample{T: run.Metadata.T0 + float64(k)*0.2 + 0.004})
			}
		}, want: []string{"qdisc server:test0 root backlog has 60 of its 70 grid points"}},
		{name: "20 statistics of a device that missed alike: said once, a few named", change: func(run *datafile.Run) {
			for i := 0; i < 20; i++ {
				name := fmt.Sprintf("qdisc server:test0 1:%d backlog", i+1)
				run.Series = append(run.Series, datafile.Series{Name: name, Kind: datafile.KindQdisc, Host: "server"})
				for k := 10; k < 70; k++ {
					run.Samples[name] = append(run.Samples[name], datafile.Sample{T: run.Metadata.T0 + float64(k)*0.2 + 0.004})
				}
			}
		}, want: []string{"qdisc server:test0 1:1 backlog has 60", "qdisc server:test0 1:2 backlog has 60", "qdisc server:test0 1:3 backlog has 60",
			"qdisc server:test0 1:4 backlog has 60", "qdisc server:test0 1:5 backlog has 60",
			"and 15 more series miss more than 5% of their grid: qdisc server:test0 1:6 backlog, qdisc server:test0 1:7 backlog, " +
				"qdisc server:test0 1:8 backlog, qdisc server:test0 1:9 backlog, qdisc server:test0 1:10 backlog, qdisc server:test0 1:11 backlog, " +
				"qdisc server:test0 1:12 backlog, qdisc server:test0 1:13 backlog and 7 others"}},
		{name: "a request/response client over its job's window, the streams'", change: func(run *datafile.Run) {
			addRR(run, true, nil)
		}},
		{name: "a request/response client's transactions longer than a step: no warning", change: func(run *datafile.Run) {
			addRR(run, true, func(k int) bool { return k%3 == 0 })
		}},
		{name: "a ping that ran only while the streams did, over its job's window", change: func(run *datafile.Run) {
			se := &run.Series[0]
			se.Start, se.Duration = run.Metadata.Delay, run.Metadata.Length
			var in []datafile.Sample
			for _, s := range run.Samples[se.Name] {
				if sent := sentAt(s); sent >= run.Metadata.T0+se.Start-0.01 && sent < run.Metadata.T0+se.Start+se.Duration-0.01 {
					in = append(in, s)
				}
			}
			run.Samples[se.Name] = in
		}},
		{name: "the same ping in a file without the job's window: the whole run", change: func(run *datafile.Run) {
			se := run.Series[0]
			var in []datafile.Sample
			for _, s := range run.Samples[se.Name] {
				if sent := sentAt(s); sent >= run.Metadata.T0+run.Metadata.Delay-0.01 && sent < run.Metadata.T0+run.Metadata.Delay+run.Metadata.Length-0.01 {
					in = append(in, s)
				}
			}
			run.Samples[se.Name] = in
		}, want: []string{"Ping (ms) ICMP has 50 of its 70 grid points"}},
		{name: "a flent file's series name no host", change: func(run *datafile.Run) {
			run.Samples["Ping (ms) ICMP"] = run.Samples["Ping (ms) ICMP"][5:]
			for i := range run.Series {
				run.Series[i].Host = ""
			}
		}},
		{name: "an incomplete run is not checked", change: func(run *datafile.Run) {
			run.Samples["Ping (ms) ICMP"] = run.Samples["Ping (ms) ICMP"][:10]
			run.Incomplete = true
		}},
	} {
		run := syntheticRun(4, false)
		c.change(run)
		from, to := math.Inf(-1), inf
		if c.to != 0 {
			from, to = run.Metadata.T0+c.from, run.Metadata.T0+c.to
		}
		got := GridWarnings(run, from, to)
		if len(got) != len(c.want) {
			t.Errorf("%s: warnings %q, want %d", c.name, got, len(c.want))
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("%s: warning %q, want %q...", c.name, got[i], c.want[i])
			}
		}
	}
	// The summary carries them, and the text table prints them under its rows.
	run := syntheticRun(1, false)
	run.Samples["Ping (ms) ICMP"] = run.Samples["Ping (ms) ICMP"][5:]
	var b strings.Builder
	if err := Write(&b, "text", []Summary{Summarize(run)}, Columns{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\n Warning: Ping (ms) ICMP has 65 of its 70 grid points") {
		t.Errorf("text summary:\n%s", b.String())
	}
}

// addRR adds a request/response client's latency that ran while the streams did
// (delay 2 s, length 10 s): an interval mean each step, where keep says (nil: every
// step); window says whether the series carries its job's window.
func addRR(run *datafile.Run, window bool, keep func(k int) bool) {
	m := run.Metadata
	se := datafile.Series{Name: "TCP RR latency", Kind: datafile.KindRR, Units: "ms", Host: "client", Measure: datafile.MeasureRTT}
	if window {
		se.Start, se.Duration = m.Delay, m.Length
	}
	run.Series = append(run.Series, se)
	for k := 1; k <= 50; k++ {
		if keep == nil || keep(k) {
			run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: m.T0 + m.Delay + float64(k)*m.Step, V: 0.3, Dur: m.Step})
		}
	}
}
