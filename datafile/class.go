package datafile

// Series kinds: every kind a runner declares. What the reports do with a series
// does not follow from its kind but from its Class: a kind that comes next
// declares what it measures (Series.Measure) and is summarised, compared, charted
// and shown live with no line of its own in the reports.
const (
	KindTCP   = "tcp"
	KindPing  = "ping"
	KindQdisc = "qdisc" // a bottleneck's qdisc statistic
	// KindSojourn is a qdisc's per-packet sojourn, measured in the kernel: a
	// histogram, each sample one bucket of one step (V its time in ms, N its packets).
	KindSojourn = "sojourn"
	KindBQL     = "bql" // a tx queue's BQL inflight or limit
	// KindShaper is the rate a bottleneck's shaper was set to, step by step,
	// under a setup's rate schedule.
	KindShaper   = "shaper"
	KindTCPInfo  = "tcpinfo"  // a TCP flow's TCP_INFO statistic (srtt, cwnd, ...)
	KindRR       = "rr"       // request/response latency and rate
	KindUDP      = "udp"      // a UDP flood's or scalable flow's rates and counts
	KindUDPProbe = "udpprobe" // a UDP probe's round trips, one-way delays and counts
	KindCPU      = "cpu"      // a host's CPU shares
	KindSoftnet  = "softnet"  // a host's softnet counters
)

// The Stat of a flow's TCP_INFO time counters (KindTCPInfo), each the
// milliseconds the step added: the time the sender had data to send
// (tcpi_busy_time), and of that the time the receiver's advertised window held
// it back (tcpi_rwnd_limited) and its own send buffer did (tcpi_sndbuf_limited).
// The summary warns of a flow limited by either for much of its time.
const (
	StatBusyTime      = "busy_time"
	StatRwndLimited   = "rwnd_limited"
	StatSndbufLimited = "sndbuf_limited"
)

// MeasureRTT marks a series whose samples are round trips, as a ping series'
// are: V the round trip in ms, T when the reply came (a lost probe: when it was
// sent), or for a request/response client the mean of the transactions of an
// interval (Dur) that ended at T. Reports split them into idle and loaded as they
// split ping's.
const MeasureRTT = "rtt"

// Role is what a series is to the reports.
type Role uint8

const (
	// RoleOwn is a test's own series (a request rate, a CPU share, a flood's
	// counts): one row of its own name over the run, a chart of its unit.
	RoleOwn Role = iota
	// RoleFlow is one TCP flow's goodput: summed and averaged per direction and
	// pair (flent's "TCP download sum"), drawn on the throughput axis.
	RoleFlow
	// RoleFlowStat is a statistic of one flow (TCP_INFO's srtt): its row, and
	// the flows of a direction folded into one.
	RoleFlowStat
	// RoleProbe is probes' round trips: whole-run, idle and loaded rows, the
	// latency axis, the live feed's latency.
	RoleProbe
	// RoleQdisc is a statistic of a bottleneck's qdisc (Dev, Stat).
	RoleQdisc
	// RoleTxQueue is a statistic of a bottleneck's tx queue, BQL's (Dev, Queue, Stat).
	RoleTxQueue
	// RoleSojourn is a qdisc's per-packet sojourn histogram (Dev, Stat).
	RoleSojourn
	// RoleShaper is the rate a bottleneck's shaper was set to (Dev).
	RoleShaper
	// RoleConn is a flow's or probe's connection (Of, Conn): no row, no chart.
	RoleConn
	// RoleConnQueue is a connection's packets through one tx queue of a
	// bottleneck (Dev, Queue, Stat, Conn): no row, no chart; the summary's
	// attribution of probes and flows to queues.
	RoleConnQueue
)

// Class is what the reports need to know of a series beyond its fields.
type Class struct {
	Role Role
	// ICMP is set for ICMP ping's round trips, the series whose rows flent prints
	// under the same names ("Ping (ms) ICMP"): the comparison's fixed rows, the
	// flent file's ping type, the distribution of every run's loaded ping. Other
	// probes' rows are their test's own.
	ICMP bool
}

// Classify is the one place that tells what a series is: from the kinds this
// version writes, and for any other kind (one that comes later, or a test's own)
// from what the series declares it measures. Files from before Measure carry the
// kinds alone, which is why the known kinds are read first.
func Classify(se Series) Class {
	switch se.Kind {
	case KindTCP:
		return Class{Role: RoleFlow}
	case KindTCPInfo:
		if se.Direction != "" {
			return Class{Role: RoleFlowStat}
		}
	case KindPing:
		return Class{Role: RoleProbe, ICMP: true}
	case KindQdisc:
		return Class{Role: RoleQdisc}
	case KindBQL:
		return Class{Role: RoleTxQueue}
	case KindSojourn:
		return Class{Role: RoleSojourn}
	case KindShaper:
		return Class{Role: RoleShaper}
	case KindConn:
		return Class{Role: RoleConn}
	case KindConnQueue:
		return Class{Role: RoleConnQueue}
	}
	if se.Measure == MeasureRTT {
		return Class{Role: RoleProbe}
	}
	return Class{Role: RoleOwn}
}

// IsRTT says whether a series' samples are probes' round trips: ping's, and any
// kind's that says so.
func IsRTT(se Series) bool { return Classify(se).Role == RoleProbe }

// Attribution says whether a role is the bookkeeping of which queue each
// connection went through: no row, grid or chart of its own.
func (r Role) Attribution() bool { return r == RoleConn || r == RoleConnQueue }

// Bottleneck says whether a role is a bottleneck's (its qdisc, tx queues,
// sojourn or shaper), not the test's.
func (r Role) Bottleneck() bool {
	return r == RoleQdisc || r == RoleTxQueue || r == RoleSojourn || r == RoleShaper
}
