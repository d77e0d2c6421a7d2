// Package tcstats reads a qdisc's statistics from `tc -s -j qdisc show`, or from
// the kernel's netlink dump under the same names: named numbers whatever the
// qdisc kinds, and which are counters. The samplers that read them each step need
// nothing else of package qdisc (setups, journals, hosts).
package tcstats

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// Flatten turns `tc -s -j qdisc show` output into named numbers, whatever the kinds:
// "root drops", "1:1 ecn_mark" (a qdisc is named by its parent, since the kernel picks
// children's handles), "root tin0.drops" for cake's per-tin arrays, "root a.b" for
// nested objects. Options are configuration, not statistics, and are left out.
// Names are tc's with '-' written '_': iproute2 prints dualpi2's "delay-c" and
// "pkts-in-l" where other kinds print "ecn_mark".
func Flatten(raw []byte) (map[string]float64, error) {
	var qs []map[string]any
	if err := json.Unmarshal(raw, &qs); err != nil {
		return nil, fmt.Errorf("parse tc -s -j qdisc show: %w", err)
	}
	out := map[string]float64{}
	for _, q := range qs {
		id, _ := q["parent"].(string)
		if r, _ := q["root"].(bool); r || id == "" {
			id = "root"
		}
		for _, k := range sortedKeys(q) {
			switch k {
			case "kind", "handle", "parent", "root", "refcnt", "options":
				continue
			}
			flatten(out, word(id)+" ", k, q[k])
		}
		if q["kind"] == "dualpi2" {
			for _, k := range []string{"delay_c", "delay_l"} {
				if name := word(id) + " " + k; out[name] == DualPI2DelayClamped {
					out[name] = 0
				}
			}
		}
	}
	return out, nil
}

// DualPI2DelayClamped is what dualpi2 prints for a queue's delay when the queue's
// head was stamped after the dump read the clock: it reads both without the qdisc's
// lock, and the negative difference, clamped to a u32 of microseconds, reads as 71
// minutes (seen in the VM lab once in 150 samples). The delay is about 0, and
// Flatten records it so.
const DualPI2DelayClamped = 1<<32 - 1

// flatten adds v's numbers under prefix+key. Keys are visited in order, so that
// names that collide ({"a.b": 1, "a": {"b": 2}}) end the same way every time.
func flatten(out map[string]float64, prefix, key string, v any) {
	key = word(strings.ReplaceAll(key, "-", "_"))
	switch x := v.(type) {
	case float64:
		out[prefix+key] = x
	case map[string]any:
		for _, k := range sortedKeys(x) {
			flatten(out, prefix, key+"."+k, x[k])
		}
	case []any:
		name := strings.TrimSuffix(key, "s") // cake's "tins" -> tin0, tin1 ...
		for i, y := range x {
			if m, ok := y.(map[string]any); ok {
				for _, k := range sortedKeys(m) {
					flatten(out, prefix, fmt.Sprintf("%s%d.%s", name, i, k), m[k])
				}
			}
		}
	}
}

// word makes s one word of a series name ("qdisc HOST:DEV WHERE STAT", which
// reports split at spaces): white space and control characters become '_', and
// nothing becomes "_". tc prints no such names; a broken or hostile tc could.
func word(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, s)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// gauges are statistics that say how things are now; every other number tc prints
// is a counter since the qdisc was made, reported as a rate of its per-step deltas.
var gauges = map[string]bool{
	"backlog": true, "qlen": true, "maxpacket": true, "new_flows_len": true, "old_flows_len": true,
	// fq_pie, pie
	"prob": true, "delay": true, "avg_dq_rate": true,
	// dualpi2
	"delay_c": true, "delay_l": true, "maxq": true, "memory_used": true, "max_memory_used": true, "memory_limit": true,
	"credit": true,
	// cake, per tin and overall
	"threshold_rate": true, "target_us": true, "interval_us": true, "peak_delay_us": true, "avg_delay_us": true,
	"base_delay_us": true, "sparse_flows": true, "bulk_flows": true, "unresponsive_flows": true,
	"max_pkt_len": true, "flow_quantum": true, "capacity_estimate": true, "memory_used_bytes": true,
	"backlog_bytes": true, "avg_hdr_offset": true, "max_adj_size": true, "min_adj_size": true,
	"max_network_size": true, "min_network_size": true,
	// BQL
	"inflight": true, "limit": true,
}

// IsCounter says whether a flattened statistic ("root drops", "root tin1.backlog") is
// a counter.
func IsCounter(name string) bool {
	f := name
	if i := strings.LastIndexAny(f, " ."); i >= 0 {
		f = f[i+1:]
	}
	return !gauges[f]
}

// Units of a flattened statistic, for people.
func Units(name string) string {
	f := name
	if i := strings.LastIndexAny(f, " ."); i >= 0 {
		f = f[i+1:]
	}
	switch {
	case strings.Contains(f, "bytes") || f == "backlog" || f == "inflight" || f == "limit" || strings.HasPrefix(f, "memory") || strings.HasSuffix(f, "memory_used"):
		return "bytes"
	case strings.HasSuffix(f, "_us"):
		return "us"
	case f == "delay_c" || f == "delay_l" || f == "delay":
		return "us"
	case f == "prob":
		return "prob"
	case strings.HasSuffix(f, "rate"):
		return "bytes/s"
	}
	return "pkts"
}

// SortedKeys lists a flattened map's names in order.
func SortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
