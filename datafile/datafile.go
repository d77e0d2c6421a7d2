// Package datafile defines bloatbench's data file: the contract between running a
// test and reporting on it.
//
// A data file is a sequence of gzip members, each holding whole lines of JSON (one
// record a line). The writer closes a member at every flush, so a controller that dies
// leaves a file whose complete members are readable; the reader takes every record
// up to the first damage and marks the run incomplete. `zcat FILE` shows the records.
package datafile

import (
	"encoding/json"
	"net/netip"
	"strings"
	"time"
)

// Format and Version identify the file; Version changes whenever a reader of an older
// version could misread a newer file.
const (
	Format  = "bloatbench-data"
	Version = 1
)

// Record types, the "type" key of every line.
const (
	TypeHeader  = "header"
	TypeSeries  = "series"
	TypeSamples = "samples"
	TypeEvent   = "event"
	TypeState   = "state"
	TypeEnd     = "end"
)

// Where a ping series' times come from (Series.Timestamps).
const (
	// StampsKernel: the kernel's software stamps both ways, the send stamp taken as
	// the probe enters the packet scheduler (SO_TIMESTAMPING TX_SCHED).
	StampsKernel = "kernel"
	// StampsKernelRX: the kernel's receive stamps; send times taken in user space
	// just before sendto.
	StampsKernelRX = "kernel-rx"
	// StampsUser: both taken in user space, around sendto and after recvmsg.
	StampsUser = "user"
)

// Metadata describes one run. Times are Unix seconds on the controller's clock.
type Metadata struct {
	Test        string            `json:"test"`
	Title       string            `json:"title"`
	Parameters  map[string]string `json:"parameters"`
	StartTime   time.Time         `json:"start_time"`
	T0          float64           `json:"t0"`
	Length      float64           `json:"length"`
	Delay       float64           `json:"delay"`
	Step        float64           `json:"step"`
	TotalLength float64           `json:"total_length"`
	Hosts       []Host            `json:"hosts"`
	ToolVersion string            `json:"tool_version"`
	CommandLine []string          `json:"command_line"`
	// Setup is the qdisc setup applied for this run, if any.
	Setup *Setup `json:"setup,omitempty"`
	// Path is the path emulation (netem) put on the inventory's path devices.
	Path *Path `json:"path,omitempty"`
	// Family is the address family of the test traffic, "ipv4" or "ipv6" (the
	// server's test_ip); files from before it have none, and were IPv4.
	Family string `json:"family,omitempty"`
	// Note is the free text given with --note.
	Note string `json:"note,omitempty"`
	// Aggregates are the series the test computes from others, which reports
	// compute as the file is read (flent's "TCP totals", "Ping (ms) avg").
	Aggregates []Aggregate `json:"aggregates,omitempty"`
	// Rates are the rates the bottleneck devices were configured to send at,
	// where the run could tell: each queue's drain rate is read beside it.
	Rates []DeviceRate `json:"rates,omitempty"`
	// GridLength is how far the step grid reaches where a file of another tool
	// has it reach past TotalLength (an old flent tcp_nup's x_values run 2.2 s
	// past its TOTAL_LENGTH, and flent's sums are over them); 0 = TotalLength.
	// Cuts still count back from TotalLength, as flent's do. In memory only.
	GridLength float64 `json:"-"`
}

// DeviceRate is a bottleneck device's configured rate and what configured it.
type DeviceRate struct {
	Host string  `json:"host"`
	Dev  string  `json:"dev"`
	Bits float64 `json:"bits_per_s"`
	// Source is the setup's shaper ("htb rate", "tbf rate", "cake bandwidth"),
	// "inventory" (the bottleneck's rate:) or "link speed" (the kernel's).
	Source string `json:"source"`
}

// Aggregate is a series computed on the step grid from the series whose names
// match a glob (path.Match): their sum or average at each step, or Jain's
// fairness index among them.
type Aggregate struct {
	Name   string `json:"name" yaml:"name"`
	Op     string `json:"op" yaml:"op"` // "sum", "avg", "fairness", "ratio"
	Series string `json:"series" yaml:"series"`
	// Over is a ratio's divisor: the sum of the series it matches, as Series'
	// sum is the dividend ("rate balance": classic flows over L4S flows).
	Over string `json:"over,omitempty" yaml:"over,omitempty"`
	// Exclude are names (or globs of them) the glob matches that the aggregate
	// leaves out (flent's
	// glob(..., exclude=[...])).
	Exclude []string `json:"exclude,omitempty" yaml:"exclude,omitempty"`
}

// FamilyOf is the Family of an address: "ipv6", "ipv4", or "" when ip is not one.
func FamilyOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	switch {
	case err != nil:
		return ""
	case a.Is4() || a.Is4In6():
		return "ipv4"
	}
	return "ipv6"
}

// Setup records what a run did to its bottlenecks, so a reader can do it again.
type Setup struct {
	Name    string        `json:"name"`
	Title   string        `json:"title"`
	Source  string        `json:"source"` // "built-in" or the inventory's file:line
	Devices []SetupDevice `json:"devices"`
}

// Path records the netem a run put on the path devices, off the bottleneck.
type Path struct {
	Netem string `json:"netem"` // tc's words after "netem"
	// L4S is tc's words after "netem" for the packets marked ECT(1) or CE, when
	// they take a netem of their own.
	L4S     string        `json:"l4s,omitempty"`
	Devices []SetupDevice `json:"devices"`
}

// SetupDevice is one bottleneck device: the commands run and the kernel's read-back.
type SetupDevice struct {
	Host     string          `json:"host"`
	Dev      string          `json:"dev"`
	Commands []string        `json:"commands"`
	ReadBack json.RawMessage `json:"read_back"` // tc -j qdisc show, BQL and offloads after applying
}

// State is a bottleneck's statistics before or after the run, like flent's
// tc_stats_pre and tc_stats_post.
type State struct {
	Phase string          `json:"phase"` // "pre" or "post"
	T     float64         `json:"t"`
	Host  string          `json:"host"`
	Dev   string          `json:"dev"`
	TC    json.RawMessage `json:"tc"` // tc -s -j qdisc show dev DEV
}

// Host is one endpoint as the run saw it.
type Host struct {
	Role     string `json:"role"` // "client" or "server"
	Name     string `json:"name"` // the inventory's host name
	SSH      string `json:"ssh"`
	TestIP   string `json:"test_ip"`
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	// ClockOffset is the agent's clock minus the controller's, in seconds, as
	// estimated at start; sample times in the file are already corrected by it.
	ClockOffset float64 `json:"clock_offset"`
	// ClockRTT is the round trip of the best offset probe: the offset's uncertainty.
	ClockRTT float64 `json:"clock_rtt"`
	// Facts is the host as found at the start of the run, before its setup:
	// "kernel.cmdline", "cpu.model", "sysctl.net.ipv4.tcp_ecn", "module.sch_cake",
	// "dev.eth0.driver", "dev.eth0.offload.generic-segmentation-offload",
	// "dev.eth0.bql.tx-0.limit_max", "dev.eth0.qdiscs"... Files from before it have
	// none.
	Facts map[string]string `json:"facts,omitempty"`
}

// Series declares one stream of samples.
type Series struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Units     string `json:"units"`
	Host      string `json:"host"` // the role of the host that measured it
	Direction string `json:"direction,omitempty"`
	Flow      int    `json:"flow,omitempty"`
	CC        string `json:"cc,omitempty"`
	Target    string `json:"target,omitempty"`
	// Timestamps says, for a ping series, where its probes' send and receive times
	// come from: StampsKernel, StampsKernelRX or StampsUser. Files written before it
	// existed (pro-bing) have none: their times were taken in user space.
	Timestamps string `json:"timestamps,omitempty"`
	// Counter is set for statistics that count since the qdisc was made: reports
	// use their per-step deltas.
	Counter bool `json:"counter,omitempty"`
	// Dev, Queue and Stat place a device statistic: the device, its tx queue
	// ("tx-0", BQL only) and the statistic ("root drops", "inflight"). Files from
	// before them carry the same in the name only ("qdisc HOST:DEV STAT").
	Dev   string `json:"dev,omitempty"`
	Queue string `json:"queue,omitempty"`
	Stat  string `json:"stat,omitempty"`
	// Marking is the DSCP (or TOS byte) the series' packets carried, as the test
	// wrote it ("EF", "CS1").
	Marking string `json:"marking,omitempty"`
	// Pair names the client/server pair of a run with several ("1", "2", ...);
	// the series' name ends with it (PairName).
	Pair string `json:"pair,omitempty"`
	// Measure says what a series' samples are where its kind alone does not:
	// MeasureRTT for a probe's round trips.
	Measure string `json:"measure,omitempty"`
	// Start and Duration are when the job that measured it ran: seconds after
	// t0, and for how long; a Duration of 0 is the whole run (a background job,
	// or a file from before them). Reports check a series' coverage over them.
	Start    float64 `json:"start,omitempty"`
	Duration float64 `json:"duration,omitempty"`
	// Of and Conn tie a flow or probe to the tx queues its packets went
	// through (conn.go): a KindConn series' Of is the series its connection
	// Conn carries; a KindConnQueue series' Conn is the connection it counts.
	Of   string `json:"of,omitempty"`
	Conn string `json:"conn,omitempty"`
}

// PairName is the name a series of pair p has in a run with several pairs: the
// name a test gives it, then the pair, so that each pair's rows sort together. No
// pair leaves the name as it is. Readers that match names (a test's aggregate
// globs, the report's own rows) match BaseName.
func PairName(name, pair string) string {
	if pair == "" {
		return name
	}
	return name + " (pair " + pair + ")"
}

// BaseName is the name a test gave a series, before PairName named it for its pair.
func BaseName(name, pair string) string {
	if pair == "" {
		return name
	}
	return strings.TrimSuffix(name, " (pair "+pair+")")
}

// HostPeer, as a series' Host in a job's plan, stands for the host the job talks
// to: the controller puts that host's role in its place (a stream's receiver).
const HostPeer = "@peer"

// Sample is one measurement. T is when it was taken (the end of the interval for
// throughput, the arrival of the reply for ping). V is the value in the series'
// units; the raw facts it came from are kept beside it.
type Sample struct {
	T     float64 `json:"t"`
	V     float64 `json:"v"`
	Dur   float64 `json:"dur,omitempty"`   // tcp: length of the interval, seconds
	Bytes int64   `json:"bytes,omitempty"` // tcp: payload bytes received in the interval
	Seq   int     `json:"seq,omitempty"`   // ping: ICMP sequence number
	Lost  bool    `json:"lost,omitempty"`  // ping: no reply came; V is meaningless
	// UserStamp says, of a probe's round trip on a socket that has the kernel's
	// stamps (the series' Timestamps), that a time of user space stood in for
	// one of them: the stamp did not come, and the round trip then holds the
	// prober's own wake-up or preemption. In Lost's padding, as N is: a Sample
	// stays 48 bytes.
	UserStamp bool `json:"user_stamp,omitempty"`
	// N is, for a histogram series (sojourn), the packets in the bucket whose time
	// V is, over the Dur seconds before T. Last, where it fits in Lost's padding: a
	// Sample stays 48 bytes.
	N uint32 `json:"n,omitempty"`
}

// Event is something worth knowing that is not a sample: a warning, a host's error.
type Event struct {
	T       float64 `json:"t"`
	Host    string  `json:"host,omitempty"`
	Level   string  `json:"level"`
	Message string  `json:"message"`
}

// End closes a run. A file without it, or with Complete false, is incomplete.
type End struct {
	T        float64 `json:"t"`
	Complete bool    `json:"complete"`
	Error    string  `json:"error,omitempty"`
}

// Record is one line of the file.
type Record struct {
	Type     string    `json:"type"`
	Format   string    `json:"format,omitempty"`
	Version  int       `json:"version,omitempty"`
	Metadata *Metadata `json:"metadata,omitempty"`
	Series   *Series   `json:"series,omitempty"`
	Name     string    `json:"name,omitempty"`
	Samples  []Sample  `json:"samples,omitempty"`
	Event    *Event    `json:"event,omitempty"`
	State    *State    `json:"state,omitempty"`
	End      *End      `json:"end,omitempty"`
}

// Run is a data file read back.
type Run struct {
	Path     string
	Metadata Metadata
	Series   []Series
	Samples  map[string][]Sample
	Events   []Event
	States   []State
	// Incomplete is true when the run did not end cleanly or the file is damaged;
	// Error says why.
	Incomplete bool
	Error      string
	// Reported holds, by series, a whole-run mean that the tool which measured the
	// series reported itself, which a summary without a cut prints as that tool's
	// reader does. Only files of other tools have them (flent's MEAN_VALUE); a run
	// of ours never has, and the data file does not carry them.
	Reported map[string]ReportedMean
	// GridCut names the series a file of another tool has on its step grid only
	// (flent's with no raw values: the sums and averages it computes among them). A
	// cut keeps their grid points from START to END with both ends, as flent's does.
	GridCut map[string]bool
	// Raw holds, by series, the raw values a file of another tool summarises a
	// series' row from while its samples are on the step grid (flent's netperf
	// raw_values: the flow's row is its raw samples, its sum and average the grid's).
	// In memory only, as Reported.
	Raw map[string][]Sample
}

// ReportedMean is a series' mean as its tool reported it, and the number of points
// its reader counts with it (flent: the points of its grid).
type ReportedMean struct {
	Mean   float64
	Points int
}

// Unix converts a time to the file's float seconds.
func Unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
