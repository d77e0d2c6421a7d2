package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
)

// Which tx queue of a multi-queue bottleneck each probe and flow went through.
// mq gives each tx queue a qdisc of its own, and the kernel picks a packet's
// queue by its flow's hash (or XPS): a probe may land in a child that holds
// none of the flows it is compared with, and then measures an idle qdisc
// behind a ring of its own, whatever its class. The runners declare each
// probe's and flow's connection (datafile.KindConn), the sojourn tracer counts
// every connection's packets through each tx queue (datafile.KindConnQueue),
// and this matches the two.

// QueueUse is the tx queues one probe's or flow's packets went through, on
// every traced bottleneck device.
type QueueUse struct {
	Series string `json:"series"`
	// Probe says the series is a probe's round trips; else it is load (a flow).
	Probe  bool         `json:"probe"`
	Conns  []string     `json:"conns"`
	Queues []QueueCount `json:"queues"`
}

// QueueCount is a series' packets through one tx queue of a device.
type QueueCount struct {
	Dev string `json:"dev"` // HOST:DEV
	// Queue is the tx queue ("tx-2"), Qdisc its qdisc as tc names its parent:
	// an mq child ("1:3"), or "root" for a qdisc every queue shares.
	Queue   string  `json:"queue"`
	Qdisc   string  `json:"qdisc"`
	Packets float64 `json:"packets"`
	Bytes   float64 `json:"bytes"`
}

// place is a queue's place in a device, as a warning names it: "1:3 (tx-2)",
// or the shared qdisc's "root".
func (q QueueCount) place() string {
	if q.Qdisc == "root" {
		return "root"
	}
	return q.Qdisc + " (" + q.Queue + ")"
}

// loadShare is the share of the flows' bytes on a device (of the device that
// carried the most) from which it carried their load, not just their ACKs; and
// of the bytes of the flow that carried the most there, from which a flow is
// part of that load (rrul's downloads on the device of its uploads' data).
const loadShare = 0.1

// QueueUses are the run's probes and flows with the tx queues they went
// through, in the run's series order; nil when the file has no connections
// or no counts of them (a file from before them, a run without the tracer).
func QueueUses(run *datafile.Run) []QueueUse {
	type counted struct {
		conn datafile.Conn
		q    QueueCount
	}
	var counts []counted
	conns := map[string][]datafile.Conn{}
	var order []string
	for _, se := range run.Series {
		switch datafile.Classify(se).Role {
		case datafile.RoleConn:
			c, ok := datafile.ParseConn(se.Conn)
			if !ok || se.Of == "" {
				continue
			}
			of := datafile.PairName(se.Of, se.Pair)
			if conns[of] == nil {
				order = append(order, of)
			}
			conns[of] = append(conns[of], c)
		case datafile.RoleConnQueue:
			c, ok := datafile.ParseConn(se.Conn)
			if !ok || se.Dev == "" {
				continue
			}
			// Counts since the tracer began: the largest is the run's.
			var n, b float64
			for _, x := range run.Samples[se.Name] {
				n, b = math.Max(n, x.V), math.Max(b, float64(x.Bytes))
			}
			if n > 0 {
				counts = append(counts, counted{c, QueueCount{Dev: se.Host + ":" + se.Dev, Queue: se.Queue, Qdisc: se.Stat, Packets: n, Bytes: b}})
			}
		}
	}
	if len(counts) == 0 || len(order) == 0 {
		return nil
	}
	probe := map[string]bool{}
	for _, se := range run.Series {
		probe[se.Name] = datafile.IsRTT(se)
	}
	var out []QueueUse
	for _, of := range order {
		u := QueueUse{Series: of, Probe: probe[of]}
		byPlace := map[[3]string]*QueueCount{}
		for _, c := range conns[of] {
			u.Conns = append(u.Conns, c.String())
			for _, k := range counts {
				if !c.Matches(k.conn) {
					continue
				}
				key := [3]string{k.q.Dev, k.q.Queue, k.q.Qdisc}
				if byPlace[key] == nil {
					q := k.q
					q.Packets, q.Bytes = 0, 0
					byPlace[key] = &q
				}
				byPlace[key].Packets += k.q.Packets
				byPlace[key].Bytes += k.q.Bytes
			}
		}
		for _, q := range byPlace {
			u.Queues = append(u.Queues, *q)
		}
		sort.Slice(u.Queues, func(i, j int) bool {
			a, b := u.Queues[i], u.Queues[j]
			if a.Dev != b.Dev {
				return a.Dev < b.Dev
			}
			return naturalLess(a.Queue, b.Queue)
		})
		out = append(out, u)
	}
	return out
}

// loadQueues are, per device that carried the flows' load, the qdiscs (by
// place) that held it, each with the flows that went through it most: a flow
// that moved queues (TCP rehashes after a timeout) leaves a few packets behind
// in the first, which make no load there.
func loadQueues(uses []QueueUse) map[string]map[string][]string {
	perDev := map[string]float64{}
	type flowOn struct {
		bytes  float64
		places map[string]float64
	}
	flows := map[string]map[string]*flowOn{} // device, flow
	var order []string
	for _, u := range uses {
		if u.Probe {
			continue
		}
		order = append(order, u.Series)
		for _, q := range u.Queues {
			perDev[q.Dev] += q.Bytes
			if flows[q.Dev] == nil {
				flows[q.Dev] = map[string]*flowOn{}
			}
			f := flows[q.Dev][u.Series]
			if f == nil {
				f = &flowOn{places: map[string]float64{}}
				flows[q.Dev][u.Series] = f
			}
			f.bytes += q.Bytes
			f.places[q.place()] += q.Bytes
		}
	}
	var most float64
	for _, b := range perDev {
		most = math.Max(most, b)
	}
	out := map[string]map[string][]string{}
	for dev, b := range perDev {
		if b <= 0 || b < loadShare*most {
			continue
		}
		var biggest float64
		for _, f := range flows[dev] {
			biggest = math.Max(biggest, f.bytes)
		}
		out[dev] = map[string][]string{}
		for _, name := range order {
			f := flows[dev][name]
			if f == nil || f.bytes < loadShare*biggest {
				continue
			}
			main, mainBytes := "", -1.0
			for p, pb := range f.places {
				if pb > mainBytes || pb == mainBytes && naturalLess(p, main) {
					main, mainBytes = p, pb
				}
			}
			out[dev][main] = append(out[dev][main], name)
		}
	}
	return out
}

// ProbeQueueWarnings are the probes that, on a device that carried the flows'
// load, went through no tx queue's qdisc that held it, or through some of
// those and not the others: each measured a queue the load was not in, or part
// of the load it is compared with.
func ProbeQueueWarnings(uses []QueueUse) []string {
	load := loadQueues(uses)
	var out []string
	for _, u := range uses {
		if !u.Probe {
			continue
		}
		devs := map[string][]string{}
		var devOrder []string
		for _, q := range u.Queues {
			if load[q.Dev] == nil {
				continue
			}
			if devs[q.Dev] == nil {
				devOrder = append(devOrder, q.Dev)
			}
			devs[q.Dev] = append(devs[q.Dev], q.place())
		}
		for _, dev := range devOrder {
			var with, without []string
			for _, p := range sortedPlaces(load[dev]) {
				held := p + ", which held " + strings.Join(load[dev][p], ", ")
				if slices.Contains(devs[dev], p) {
					with = append(with, held)
				} else {
					without = append(without, held)
				}
			}
			switch {
			case len(with) == 0:
				out = append(out, fmt.Sprintf("probe %s went through %s %s, and the flows it is compared with through %s: it measured a queue that held none of their load (a setup's steer: puts them on one tx queue, docs/setups.md)",
					u.Series, dev, strings.Join(devs[dev], ", "), strings.Join(without, "; ")))
			case len(without) > 0:
				out = append(out, fmt.Sprintf("probe %s went through %s %s; not %s: it measured part of the load it is compared with (a setup's steer: puts them on one tx queue, docs/setups.md)",
					u.Series, dev, strings.Join(with, "; "), strings.Join(without, "; ")))
			}
		}
	}
	return out
}

// sortedPlaces are a device's load queues in order.
func sortedPlaces(m map[string][]string) []string {
	var out []string
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return naturalLess(out[i], out[j]) })
	return out
}

// maxNamesInQueue is how many series a queue's line names before it counts the
// rest: 128 flows must not make a line of 128 names.
const maxNamesInQueue = 6

// QueuesText is a line per device that carried the flows' load, saying which
// probes and flows went through each of its tx queues' qdiscs; "" when none.
func QueuesText(uses []QueueUse) string {
	load := loadQueues(uses)
	var devs []string
	for d := range load {
		devs = append(devs, d)
	}
	sort.Strings(devs)
	var lines []string
	for _, dev := range devs {
		names := map[string][]string{}
		flows := map[string]int{}
		var places []string
		for _, u := range uses {
			for _, q := range u.Queues {
				if q.Dev != dev {
					continue
				}
				p := q.place()
				if names[p] == nil && flows[p] == 0 {
					places = append(places, p)
				}
				if !u.Probe && len(names[p]) >= maxNamesInQueue {
					flows[p]++
					continue
				}
				names[p] = append(names[p], u.Series)
			}
		}
		sort.Slice(places, func(i, j int) bool { return naturalLess(places[i], places[j]) })
		var parts []string
		for _, p := range places {
			s := strings.Join(names[p], ", ")
			if flows[p] > 0 {
				s += fmt.Sprintf(" and %d more flows", flows[p])
			}
			parts = append(parts, p+": "+s)
		}
		lines = append(lines, fmt.Sprintf("Tx queues of %s: %s", dev, strings.Join(parts, "; ")))
	}
	return strings.Join(lines, "\n")
}
