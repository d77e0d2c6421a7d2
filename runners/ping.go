package runners

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	probing "github.com/prometheus-community/pro-bing"

	"github.com/bloatbench/bloatbench/datafile"
)

// PingSpec runs ICMP echo from this host to Target.
type PingSpec struct {
	Series   string  `json:"series"`
	Target   string  `json:"target"`
	Interval float64 `json:"interval"` // seconds between probes
	Duration float64 `json:"duration"` // seconds of probing
	Size     int     `json:"size,omitempty"`
}

// MinPingInterval is the shortest probe interval accepted.
const MinPingInterval = 0.01

// lossWait is how long after the last probe a reply may still come.
const lossWait = time.Second

// RunPing probes Target every Interval for Duration and emits one sample per reply
// (its RTT in ms, at the time the reply arrived) and one per probe that got none
// (Lost, at the time it was sent).
func RunPing(ctx context.Context, spec PingSpec, emit Emit) error {
	if spec.Interval < MinPingInterval {
		return fmt.Errorf("ping interval %gs is below the minimum %gs", spec.Interval, MinPingInterval)
	}
	if net.ParseIP(spec.Target) == nil {
		return fmt.Errorf("ping target %q is not an IP address", spec.Target)
	}
	p := probing.New(spec.Target)
	interval := time.Duration(spec.Interval * float64(time.Second))
	count := int(spec.Duration/spec.Interval + 0.5)
	if count < 1 {
		count = 1
	}
	p.Interval = interval
	p.Count = count
	p.Timeout = time.Duration(spec.Duration*float64(time.Second)) + lossWait
	p.RecordRtts = false
	p.RecordTTLs = false
	if spec.Size > 0 {
		p.Size = spec.Size
	}
	// Raw ICMP sockets need root (or CAP_NET_RAW); otherwise use the kernel's
	// unprivileged ICMP sockets, which net.ipv4.ping_group_range must allow.
	p.SetPrivileged(os.Geteuid() == 0)
	var mu sync.Mutex
	sent := map[int]time.Time{}
	p.OnSend = func(pkt *probing.Packet) {
		mu.Lock()
		sent[pkt.Seq] = time.Now()
		mu.Unlock()
	}
	p.OnRecv = func(pkt *probing.Packet) {
		now := time.Now()
		mu.Lock()
		_, ok := sent[pkt.Seq]
		delete(sent, pkt.Seq)
		mu.Unlock()
		if ok {
			emit(spec.Series, datafile.Sample{T: unix(now), V: float64(pkt.Rtt) / float64(time.Millisecond), Seq: pkt.Seq})
		}
	}
	if err := p.RunWithContext(ctx); err != nil {
		return fmt.Errorf("ping %s: %w (raw ICMP needs root or CAP_NET_RAW; unprivileged ping needs net.ipv4.ping_group_range)", spec.Target, err)
	}
	if ctx.Err() != nil {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	seqs := make([]int, 0, len(sent))
	for seq := range sent {
		seqs = append(seqs, seq)
	}
	sort.Ints(seqs)
	for _, seq := range seqs {
		emit(spec.Series, datafile.Sample{T: unix(sent[seq]), Seq: seq, Lost: true})
	}
	return nil
}
