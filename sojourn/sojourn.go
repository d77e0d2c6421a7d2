// Package sojourn measures how long packets wait in a host's qdiscs, from inside
// the kernel: BPF programs on the qdisc_enqueue and qdisc_dequeue tracepoints stamp
// each packet as its device's root qdisc takes it and histogram its wait when the
// qdisc gives it up, per qdisc (an mq's children each their own); a third, on
// net_dev_start_xmit, counts the packets that passed an empty qdisc straight to
// the driver as waits of 0. It needs a kernel with BTF and those tracepoints, and
// CAP_BPF and CAP_PERFMON (root).
package sojourn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// MaxDevices is the most devices one Tracer traces (MAX_DEVS in bpf/sojourn.c).
const MaxDevices = 16

// MaxBulk is the longest bulk dequeue the programs follow (MAX_BULK in
// bpf/sojourn.c): packets past it are counted in Hist.BeyondBulk.
const MaxBulk = 256

// Key names one qdisc's histogram: the root of a device's tx queue (or the
// device's), and the class of packets counted.
type Key struct {
	Ifindex, Handle, Parent uint32
	Class                   Class
}

// Class is which of a qdisc's packets a histogram counts.
type Class uint32

const (
	// All is every packet (each GSO segment one).
	All Class = 0
	// Echo is the ICMP and ICMPv6 echo requests and replies: a ping's probes,
	// which a flow-queuing qdisc keeps apart from the bulk flows.
	Echo Class = 1
)

// Hist is what a qdisc's packets waited since the tracer started: the buckets'
// counts, the exact sum and maximum, and the dequeued packets that had no stamp
// (requeued after a first dequeue, or cut inside the qdisc where Tracer.Segments
// says those are not followed) or were past the longest bulk dequeue followed;
// and the packets that went to the driver past the qdisc, which they found empty
// (a qdisc with TCQ_F_CAN_BYPASS: pfifo, bfifo, fq_codel, pfifo_fast), counted in
// Counts too, with a wait of 0.
type Hist struct {
	Counts                Counts
	SumNs, MaxNs          uint64
	Unstamped, BeyondBulk uint64
	Bypassed              uint64
}

// Tracer is the loaded programs, attached.
type Tracer struct {
	objs  sojournObjects
	links []link.Link
	// Devs are the traced devices by ifindex.
	Devs map[uint32]string
	// Segments is why segments a qdisc cuts from a GSO skb (dualpi2's and cake's
	// split-gso) are not followed, nil when they are: those qdiscs' segments then
	// count as unstamped. Tracing __skb_gso_segment's return needs fexit, which
	// some kernels (and architectures) lack where tracepoints work.
	Segments error
}

// Open loads the programs and traces devs, devices of this process's network
// namespace (the calling thread's: a caller that setns(2)s locks its thread), at
// most MaxDevices. Its errors say what is missing: BTF, the tracepoints, the
// privilege.
//
// kernel holds the kernel's BTF once decoded, for the CO-RE relocations and the
// attach targets: every Open given the same one decodes it once between them. The
// decode is a large part of a load: in the VM lab's emulated guest an Open took
// 1.2 s with it and 0.55-0.8 s without; on a 2-core EPYC, 125 and 80 ms. Nil
// decodes it for this Open alone (once for its two loads).
func Open(devs []string, kernel *btf.Cache) (*Tracer, error) {
	if len(devs) > MaxDevices {
		return nil, fmt.Errorf("sojourn traces at most %d devices of a host, not %d", MaxDevices, len(devs))
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("the kernel has no BTF (/sys/kernel/btf/vmlinux: %w): build it with CONFIG_DEBUG_INFO_BTF", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return nil, fmt.Errorf("this process's network namespace: %w", err)
	}
	t := &Tracer{Devs: map[uint32]string{}}
	var ifindexes [MaxDevices]uint32
	for i, d := range devs {
		ifi, err := net.InterfaceByName(d)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", d, err)
		}
		ifindexes[i] = uint32(ifi.Index)
		t.Devs[uint32(ifi.Index)] = d
	}
	spec, err := loadSojourn()
	if err != nil {
		return nil, fmt.Errorf("load the sojourn programs: %w", err)
	}
	for name, v := range map[string]any{"netns_ino": uint32(st.Ino), "n_devs": uint32(len(devs)), "ifindexes": ifindexes} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("sojourn: set %s: %w", name, err)
		}
	}
	// The tracepoints' programs and the maps first; the segments' program after,
	// on its own, so that a kernel without fexit still gets the rest.
	var core struct {
		sojournMaps
		OnEnqueue *ebpf.Program `ebpf:"on_enqueue"`
		OnDequeue *ebpf.Program `ebpf:"on_dequeue"`
		OnXmit    *ebpf.Program `ebpf:"on_xmit"`
	}
	if kernel == nil {
		kernel = btf.NewCache()
	}
	if err := spec.LoadAndAssign(&core, &ebpf.CollectionOptions{Cache: kernel}); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load the sojourn programs: the kernel's verifier refused them: %w", err)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("load the sojourn programs: this kernel lacks what they need: %w", err)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("load the sojourn programs: not permitted (they need root, or CAP_BPF and CAP_PERFMON): %w", err)
		}
		return nil, fmt.Errorf("load the sojourn programs: %w", err)
	}
	t.objs.sojournMaps, t.objs.OnEnqueue, t.objs.OnDequeue, t.objs.OnXmit = core.sojournMaps, core.OnEnqueue, core.OnDequeue, core.OnXmit
	// In the order a packet meets them: the driver's last, so that none that
	// went through a qdisc before the others were attached is taken for one that
	// passed it (the first read is the baseline for what was under way).
	for _, p := range []struct {
		name string
		prog *ebpf.Program
	}{{"qdisc_enqueue", t.objs.OnEnqueue}, {"qdisc_dequeue", t.objs.OnDequeue}, {"net_dev_start_xmit", t.objs.OnXmit}} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("attach to the %s tracepoint: %w", p.name, err)
		}
		t.links = append(t.links, l)
	}
	t.Segments = t.followSegments(spec, kernel)
	return t, nil
}

// followSegments loads and attaches the program that stamps segments cut inside a
// qdisc, sharing the tracepoints' maps; its error says why it could not.
func (t *Tracer) followSegments(spec *ebpf.CollectionSpec, kernel *btf.Cache) error {
	var seg struct {
		OnSegment *ebpf.Program `ebpf:"on_segment"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"stamps": t.objs.Stamps}, Cache: kernel}
	if err := spec.LoadAndAssign(&seg, opts); err != nil {
		return fmt.Errorf("load the program on __skb_gso_segment's return: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: seg.OnSegment, AttachType: ebpf.AttachTraceFExit})
	if err != nil {
		seg.OnSegment.Close()
		return fmt.Errorf("attach to __skb_gso_segment's return: %w", err)
	}
	t.objs.OnSegment = seg.OnSegment
	t.links = append(t.links, l)
	return nil
}

// Read is every traced qdisc's histogram so far, summed over the CPUs.
func (t *Tracer) Read() (map[Key]Hist, error) {
	out := map[Key]Hist{}
	var k sojournQdiscKey
	var perCPU []sojournHist
	it := t.objs.Hists.Iterate()
	for it.Next(&k, &perCPU) {
		h := Hist{Counts: Counts{}}
		for _, c := range perCPU {
			for b, n := range c.Count {
				if n > 0 {
					h.Counts[b] += n
				}
			}
			h.SumNs += c.SumNs
			h.MaxNs = max(h.MaxNs, c.MaxNs)
			h.Unstamped += c.Unstamped
			h.BeyondBulk += c.BeyondBulk
			h.Bypassed += c.Bypassed
		}
		out[Key{Ifindex: k.Ifindex, Handle: k.Handle, Parent: k.Parent, Class: Class(k.Class)}] = h
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("sojourn: read the histograms: %w", err)
	}
	return out, nil
}

// MaxConns is how many connection-and-queue entries the programs count
// (MAX_CONNS in bpf/sojourn.c): past it a new connection is not counted.
const MaxConns = 16384

// ConnKey is a connection's packets through one tx queue of a traced device:
// the queue, its qdisc (an mq's child, or the root every queue shares), and
// the connection as the packets' headers name it. Ports are TCP's and UDP's;
// an ICMP echo's identifier is both; other protocols have none.
type ConnKey struct {
	Ifindex        uint32
	TxQueue        uint16
	Handle, Parent uint32
	Proto          uint8
	Src, Dst       netip.AddrPort
}

// ConnCount is what went through: packets (each GSO segment one) and bytes.
type ConnCount struct {
	Packets, Bytes uint64
}

// Conns is every connection's packets through each tx queue of the traced
// devices, since the tracer started.
func (t *Tracer) Conns() (map[ConnKey]ConnCount, error) {
	out := map[ConnKey]ConnCount{}
	var k sojournConnKey
	var v sojournConnCount
	it := t.objs.Conns.Iterate()
	for it.Next(&k, &v) {
		out[connKey(k)] = ConnCount{Packets: v.Packets, Bytes: v.Bytes}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("sojourn: read the connections' counts: %w", err)
	}
	return out, nil
}

// connKey is the map's key as Go has it.
func connKey(k sojournConnKey) ConnKey {
	addr := func(b [16]uint8) netip.Addr {
		if k.Family == 4 {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16(b)
	}
	return ConnKey{Ifindex: k.Ifindex, TxQueue: k.Txq, Handle: k.Handle, Parent: k.Parent, Proto: k.Proto,
		Src: netip.AddrPortFrom(addr(k.Src), k.Sport), Dst: netip.AddrPortFrom(addr(k.Dst), k.Dport)}
}

// Close detaches and unloads the programs.
func (t *Tracer) Close() error {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}
