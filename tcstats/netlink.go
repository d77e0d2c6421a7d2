package tcstats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Netlink reads a device's qdisc statistics from the kernel itself (an
// RTM_GETQDISC dump on one netlink socket, kept open), under the names Flatten
// gives tc's: the samplers read every bottleneck once a step, and a tc process
// per read, even a long-lived `tc -batch`, costs a round trip through another
// process and its JSON (about 0.3 ms of CPU per read here). Only the statistics
// every qdisc has are read this way: a qdisc that reports anything else (an
// AQM's extended statistics, a rate estimator, hardware counters, shared
// blocks) makes Read return ErrNeedsTC, and the caller asks tc, which knows how
// each kind prints them.
//
// The socket is a blocking one, read with plain system calls (the kernel has
// the dump's first batch ready when the send returns, so no read waits): through
// Go's netpoller, as github.com/mdlayher/netlink's Conn reads, a read took 56 us
// here with four receives and eight futex calls; this way 14 us, one send and
// two receives. The attributes are decoded with that library's decoder.
type Netlink struct {
	fd    int
	seq   uint32
	buf   []byte
	index map[string]int // device name -> ifindex, found once
}

// netlinkTimeout bounds a dump's wait for the kernel's answer.
const netlinkTimeout = 5 * time.Second

// DialNetlink opens the socket, in the calling thread's network namespace.
func DialNetlink() (*Netlink, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(netlinkTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	// A dump's messages come in batches the size of the reader's buffer, up to
	// 32 KB; a batch longer than the buffer would be cut (MSG_TRUNC).
	return &Netlink{fd: fd, buf: make([]byte, 64<<10), index: map[string]int{}}, nil
}

// Close releases the socket.
func (n *Netlink) Close() error { return unix.Close(n.fd) }

// ErrNeedsTC is what Read returns for a device with a qdisc whose statistics
// only tc can name.
var ErrNeedsTC = errors.New("a qdisc reports statistics only tc prints")

// maxQdiscs bounds what one dump may hold for a device, and maxBatches the
// batches of a whole dump (every device's qdiscs): a device has a root, an
// ingress and one child per tx queue or class, and an mq of 4096 queues is far
// more than any bottleneck here.
const (
	maxQdiscs  = 1 << 13
	maxBatches = 1 << 12
)

// Read dumps dev's qdiscs and flattens their statistics, named as Flatten names
// tc's JSON of the same dump. ErrNeedsTC: ask tc for this device.
func (n *Netlink) Read(dev string) (map[string]float64, error) {
	idx, ok := n.index[dev]
	if !ok {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", dev, err)
		}
		idx = ifi.Index
		n.index[dev] = idx
	}
	// The request tc sends: the kernel dumps every device's qdiscs whatever the
	// index, and tc keeps those of its device, as the parser does.
	n.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+20)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.RTM_GETQDISC)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], n.seq)
	binary.NativeEndian.PutUint32(req[unix.NLMSG_HDRLEN+4:], uint32(int32(idx)))
	if err := unix.Sendto(n.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink qdisc dump for %s: %w", dev, err)
	}
	d := dump{seq: n.seq, ifindex: idx, out: map[string]float64{}}
	for batches := 0; !d.done; batches++ {
		if batches == maxBatches {
			return nil, fmt.Errorf("netlink qdisc dump for %s: more than %d batches", dev, maxBatches)
		}
		nr, _, flags, _, err := unix.Recvmsg(n.fd, n.buf, nil, 0)
		if err != nil {
			// A dump cut short leaves its rest in the socket; later reads skip
			// it by its sequence number.
			return nil, fmt.Errorf("netlink qdisc dump for %s: %w", dev, err)
		}
		if flags&unix.MSG_TRUNC != 0 {
			return nil, fmt.Errorf("netlink qdisc dump for %s: a batch longer than %d bytes", dev, len(n.buf))
		}
		if err := d.batch(n.buf[:nr]); err != nil {
			return nil, err
		}
	}
	if d.found == 0 {
		// The device went away and may be back under another index (an IFB made
		// again): look it up afresh next time, and say so now.
		delete(n.index, dev)
		return nil, fmt.Errorf("netlink qdisc dump: no qdisc on %s (index %d)", dev, idx)
	}
	if d.needsTC {
		return nil, ErrNeedsTC
	}
	return d.out, nil
}

// dump is one dump's state as its batches come: the qdiscs of ifindex
// flattened into out, found how many, needsTC when one of them has statistics
// only tc can name (the dump is still read to its end, leaving the socket
// clean), done at NLMSG_DONE.
type dump struct {
	seq     uint32
	ifindex int
	out     map[string]float64
	found   int
	needsTC bool
	done    bool
}

// batch takes one received batch of messages. Every length is checked against
// the batch: the bytes come from the kernel, and a short or odd one is an
// error, not a read past it.
func (d *dump) batch(b []byte) error {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return fmt.Errorf("netlink qdisc dump: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Seq != d.seq {
			continue // the rest of an earlier dump cut short
		}
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			d.done = true
			return nil
		case unix.NLMSG_ERROR:
			if len(m.Data) < 4 {
				return errors.New("netlink qdisc dump: a short error message")
			}
			d.done = true
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				return fmt.Errorf("netlink qdisc dump: %w", unix.Errno(-code))
			}
			return nil
		case unix.RTM_NEWQDISC:
		default:
			continue
		}
		if len(m.Data) < 20 {
			return fmt.Errorf("netlink qdisc dump: a message of %d bytes, shorter than its tcmsg", len(m.Data))
		}
		if int(int32(binary.NativeEndian.Uint32(m.Data[4:]))) != d.ifindex {
			continue
		}
		if d.found++; d.found > maxQdiscs {
			return fmt.Errorf("netlink qdisc dump: more than %d qdiscs on one device", maxQdiscs)
		}
		if d.needsTC {
			continue
		}
		parent := binary.NativeEndian.Uint32(m.Data[12:])
		if err := parseQdisc(d.out, parent, m.Data[20:]); errors.Is(err, ErrNeedsTC) {
			d.needsTC = true
		} else if err != nil {
			return err
		}
	}
	return nil
}

// Attribute numbers of linux/rtnetlink.h (TCA_*) and linux/gen_stats.h
// (TCA_STATS_*).
const (
	tcaKind         = 1
	tcaOptions      = 2
	tcaStats        = 3
	tcaXstats       = 4
	tcaRate         = 5
	tcaFcnt         = 6
	tcaStats2       = 7
	tcaStab         = 8
	tcaPad          = 9
	tcaDumpInvis    = 10
	tcaChain        = 11
	tcaHWOffload    = 12
	tcaIngressBlock = 13
	tcaEgressBlock  = 14

	statsBasic     = 1
	statsRateEst   = 2
	statsQueue     = 3
	statsApp       = 4
	statsRateEst64 = 5
	statsPad       = 6
	statsBasicHW   = 7
	statsPkt64     = 8

	tcHRoot = 0xffffffff // TC_H_ROOT, a root qdisc's parent
)

// parseQdisc adds one qdisc's statistics as Flatten names them: "ID STAT", ID
// the qdisc's parent as tc prints it ("root" for a root).
func parseQdisc(out map[string]float64, parent uint32, attrs []byte) error {
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return fmt.Errorf("netlink qdisc dump: %w", err)
	}
	var stats2 []byte
	for ad.Next() {
		switch ad.Type() {
		case tcaStats2:
			stats2 = ad.Bytes()
		case tcaXstats, tcaIngressBlock, tcaEgressBlock, tcaRate, tcaFcnt, tcaStab, tcaChain:
			// tc prints these (an AQM's statistics, blocks, a size table's
			// numbers) in ways of its own.
			return ErrNeedsTC
		case tcaKind, tcaOptions, tcaStats, tcaPad, tcaDumpInvis, tcaHWOffload:
			// The kind, options and offload flag are not statistics; TCA_STATS
			// is the old copy of what TCA_STATS2 holds.
		default:
			return ErrNeedsTC // newer than this reader
		}
	}
	if err := ad.Err(); err != nil {
		return fmt.Errorf("netlink qdisc dump: %w", err)
	}
	if stats2 == nil {
		return ErrNeedsTC // a kernel that sends only the old TCA_STATS
	}
	id := "root"
	if parent != tcHRoot && parent != 0 {
		id = classID(parent)
	}
	return parseStats2(out, id+" ", stats2)
}

// parseStats2 reads TCA_STATS2's basic and queue statistics, which tc prints
// as bytes, packets (the 32-bit count, as tc does), drops, overlimits,
// requeues, backlog and qlen.
func parseStats2(out map[string]float64, prefix string, b []byte) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return fmt.Errorf("netlink qdisc statistics: %w", err)
	}
	for ad.Next() {
		v := ad.Bytes()
		switch ad.Type() {
		case statsBasic: // struct gnet_stats_basic: u64 bytes, u32 packets
			if len(v) < 12 {
				return fmt.Errorf("netlink qdisc statistics: basic of %d bytes", len(v))
			}
			out[prefix+"bytes"] = float64(binary.NativeEndian.Uint64(v))
			out[prefix+"packets"] = float64(binary.NativeEndian.Uint32(v[8:]))
		case statsQueue: // struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits
			if len(v) < 20 {
				return fmt.Errorf("netlink qdisc statistics: queue of %d bytes", len(v))
			}
			u := func(i int) float64 { return float64(binary.NativeEndian.Uint32(v[4*i:])) }
			out[prefix+"qlen"] = u(0)
			out[prefix+"backlog"] = u(1)
			out[prefix+"drops"] = u(2)
			out[prefix+"requeues"] = u(3)
			out[prefix+"overlimits"] = u(4)
		case statsPad, statsPkt64:
			// tc prints the 32-bit packet count whatever the 64-bit one says.
		case statsApp, statsRateEst, statsRateEst64, statsBasicHW:
			return ErrNeedsTC
		default:
			return ErrNeedsTC
		}
	}
	if err := ad.Err(); err != nil {
		return fmt.Errorf("netlink qdisc statistics: %w", err)
	}
	return nil
}

// classID prints a handle as tc does (sprint_tc_classid): "1:", ":5", "1:5".
func classID(h uint32) string {
	maj, min := h>>16, h&0xffff
	switch {
	case maj == 0:
		return fmt.Sprintf(":%x", min)
	case min == 0:
		return fmt.Sprintf("%x:", maj)
	}
	return fmt.Sprintf("%x:%x", maj, min)
}
