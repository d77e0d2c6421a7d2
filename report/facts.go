package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
)

// FactDiffs lists the facts (the hosts as found: kernel, sysctls, modules, devices)
// that differ between runs, host by host: "server: sysctl.net.ipv4.tcp_ecn: "1"
// (runs 1-2), "2" (run 3)". A difference there, not the setup, may be what moved a
// number.
func FactDiffs(runs []*datafile.Run) []string {
	hosts := make([]map[string]map[string]string, len(runs))
	for i, r := range runs {
		hosts[i] = map[string]map[string]string{}
		for _, h := range r.Metadata.Hosts {
			if h.Facts != nil {
				hosts[i][h.Name] = h.Facts
			}
		}
	}
	type val struct {
		v    string
		runs []int
	}
	names := map[string]bool{}
	for _, h := range hosts {
		for n := range h {
			names[n] = true
		}
	}
	var out []string
	for _, n := range sortedKeys(names) {
		keys := map[string]bool{}
		present := 0
		for _, h := range hosts {
			if f, ok := h[n]; ok {
				present++
				for k := range f {
					keys[k] = true
				}
			}
		}
		if present < 2 {
			continue
		}
		for _, k := range sortedKeys(keys) {
			if k == "error" {
				continue
			}
			var vals []*val
			for i, h := range hosts {
				f, ok := h[n]
				if !ok {
					continue
				}
				v, ok := f[k]
				if !ok {
					v = "(none)"
				}
				var found *val
				for _, x := range vals {
					if x.v == v {
						found = x
					}
				}
				if found == nil {
					found = &val{v: v}
					vals = append(vals, found)
				}
				found.runs = append(found.runs, i+1)
			}
			if len(vals) < 2 {
				continue
			}
			var parts []string
			for _, x := range vals {
				parts = append(parts, fmt.Sprintf("%q (%s)", x.v, runList(x.runs)))
			}
			out = append(out, fmt.Sprintf("%s: %s: %s", n, k, strings.Join(parts, ", ")))
		}
	}
	return out
}

func runList(rs []int) string {
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		} else {
			parts = append(parts, fmt.Sprint(rs[i]))
		}
		i = j + 1
	}
	word := "run "
	if len(rs) > 1 {
		word = "runs "
	}
	return word + strings.Join(parts, ", ")
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WriteFactDiffs prints FactDiffs under a heading, or nothing when the runs' hosts
// were found alike (or recorded no facts). Host names and facts are the hosts' words,
// escaped for the format.
func WriteFactDiffs(w io.Writer, runs []*datafile.Run, markdown bool) {
	diffs := FactDiffs(runs)
	if len(diffs) == 0 {
		return
	}
	if markdown {
		fmt.Fprintf(w, "\n**The runs' hosts differ** (as found at each run's start; runs numbered in the order given):\n\n")
		for _, d := range diffs {
			fmt.Fprintf(w, "- %s\n", escapeMarkdown(d, true))
		}
		return
	}
	fmt.Fprintf(w, "\nThe runs' hosts differ (as found at each run's start; runs numbered in the order given):\n")
	for _, d := range diffs {
		fmt.Fprintf(w, " %s\n", EscapeText(d))
	}
}

// WriteMeta prints what a data file records of its run besides samples: the test,
// its parameters and timing, the note, the setup and what it ran, and every host
// with its facts. Nearly all of it is the file's or the hosts' words, so each line
// is escaped for the terminal as a whole, after formatting: a line break in a field
// shows as \n and cannot start a line of its own.
func WriteMeta(w io.Writer, path string, run *datafile.Run) {
	m := run.Metadata
	line := func(format string, args ...any) {
		fmt.Fprintf(w, "%s\n", EscapeText(fmt.Sprintf(format, args...)))
	}
	line("%s", path)
	line("  test %s, title %q, started %s", m.Test, m.Title, m.StartTime.Format("2006-01-02 15:04:05 MST"))
	line("  length %gs, delay %gs, step %gs, family %s, tool %s", m.Length, m.Delay, m.Step, orNone(m.Family), orNone(m.ToolVersion))
	if len(m.Parameters) > 0 {
		var ps []string
		for k, v := range m.Parameters {
			ps = append(ps, k+"="+v)
		}
		sort.Strings(ps)
		line("  parameters %s", strings.Join(ps, " "))
	}
	if m.Note != "" {
		line("  note %q", m.Note)
	}
	if len(m.CommandLine) > 0 {
		line("  command line %q", m.CommandLine)
	}
	if s := m.Setup; s != nil {
		line("  setup %s (%s, %s)", s.Name, s.Title, s.Source)
		for _, d := range s.Devices {
			line("    %s:%s", d.Host, d.Dev)
			for _, c := range d.Commands {
				line("      %s", c)
			}
		}
	}
	for _, h := range m.Hosts {
		line("  host %s (%s): %s, hostname %s, kernel %s, clock offset %+.3f ms", h.Name, h.Role, h.SSH, h.Hostname, h.Kernel, h.ClockOffset*1e3)
		keys := make([]string, 0, len(h.Facts))
		for k := range h.Facts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			line("    %s = %s", k, h.Facts[k])
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
