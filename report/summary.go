// Package report turns data files into what people read: summary tables in the
// layout of flent's (the one kernel cover letters carry), as text, markdown, CSV or
// JSON. It reads data files only and never talks to hosts.
package report

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/bloatbench/bloatbench/datafile"
)

// Row is one line of a summary. Avg and Median are NaN when there are no points.
type Row struct {
	Name   string
	Avg    float64
	Median float64
	Points int
	Units  string
}

// Summary of one run.
type Summary struct {
	Test       string
	Title      string
	Time       string // the run's start, as "2006-01-02 15:04:05"
	File       string
	Incomplete bool
	Error      string
	Rows       []Row
}

// IdleSuffix names the ping row taken before the streams start.
const IdleSuffix = " idle"

// Summarize computes a run's summary.
//
// Ping is summarised from the raw replies: the plain row over the window in which the
// streams run (delay .. delay+length), the idle row over the lead-in before it; the
// lead-out, while queues drain, is in neither. Throughput is put on the step grid
// first, so the computed series (sum and avg over flows) have true medians.
func Summarize(run *datafile.Run) Summary {
	m := run.Metadata
	s := Summary{
		Test: m.Test, Title: m.Title, File: run.Path,
		Incomplete: run.Incomplete, Error: run.Error,
	}
	if !m.StartTime.IsZero() {
		s.Time = m.StartTime.Format("2006-01-02 15:04:05")
	}
	loadStart, loadEnd := m.T0+m.Delay, m.T0+m.Delay+m.Length
	grid := GridOf(m)
	type group struct {
		prefix string
		units  string
		flows  [][]float64
	}
	groups := map[string]*group{}
	var order []string
	for _, se := range run.Series {
		samples := run.Samples[se.Name]
		switch se.Kind {
		case datafile.KindPing:
			var loaded, idle []float64
			for _, x := range samples {
				if x.Lost {
					continue
				}
				switch {
				case x.T < loadStart:
					idle = append(idle, x.V)
				case x.T <= loadEnd:
					loaded = append(loaded, x.V)
				}
			}
			s.Rows = append(s.Rows, rowOf(se.Name, se.Units, loaded), rowOf(se.Name+IdleSuffix, se.Units, idle))
		case datafile.KindTCP:
			aligned := AlignIntervals(grid, samples)
			s.Rows = append(s.Rows, rowOf(se.Name, se.Units, defined(aligned)))
			prefix := "TCP " + se.Direction
			g := groups[prefix]
			if g == nil {
				g = &group{prefix: prefix, units: se.Units}
				groups[prefix] = g
				order = append(order, prefix)
			}
			g.flows = append(g.flows, aligned)
		}
	}
	for _, p := range order {
		g := groups[p]
		var sums, avgs []float64
		for k := 0; k < grid.N; k++ {
			sum, n := 0.0, 0
			for _, f := range g.flows {
				if !math.IsNaN(f[k]) {
					sum += f[k]
					n++
				}
			}
			if n > 0 {
				sums = append(sums, sum)
				avgs = append(avgs, sum/float64(n))
			}
		}
		s.Rows = append(s.Rows, rowOf(p+" sum", g.units, sums), rowOf(p+" avg", g.units, avgs))
	}
	s.Rows = append(s.Rows, bottleneckRows(run, loadStart, loadEnd)...)
	sortRows(s.Rows)
	return s
}

func sortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool { return naturalLess(rows[i].Name, rows[j].Name) })
}

func rowOf(name, units string, xs []float64) Row {
	return Row{Name: name, Units: units, Avg: Mean(xs), Median: Median(xs), Points: len(xs)}
}

// naturalLess orders names as flent does (by name), but with runs of digits compared
// as numbers, so that flow 10 follows flow 9.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da != "" && db != "" {
			na, _ := strconv.Atoi(da)
			nb, _ := strconv.Atoi(db)
			if na != nb {
				return na < nb
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) })
	if i < 0 {
		return s
	}
	return s[:i]
}
