package runners

import (
	"encoding/binary"
	"syscall"
	"time"

	linux "golang.org/x/sys/unix"

	"github.com/bloatbench/bloatbench/datafile"
)

// Kernel timestamps for probes (ICMP today, UDP probes later): the receive time the
// kernel took when the reply entered its stack, and the send time it took when the
// probe entered the packet scheduler, so neither includes the time Go's netpoller or
// the scheduler took to hand the packet to us. What a socket could be given is
// recorded in the data file (datafile.Series.Timestamps).
//
// The send stamp is SOF_TIMESTAMPING_TX_SCHED, taken as the packet enters the qdisc,
// not TX_SOFTWARE, which the driver takes as the packet leaves it: a probe waiting in
// the sender's own queue (an upload test's bottleneck) must count that wait, as
// iputils' and fping's stamps before sendto do.

// rxFlags and txFlags are SO_TIMESTAMPING's flags for software receive stamps and
// for send stamps looped back on the error queue without the packet.
const (
	rxFlags = linux.SOF_TIMESTAMPING_RX_SOFTWARE | linux.SOF_TIMESTAMPING_SOFTWARE
	txFlags = linux.SOF_TIMESTAMPING_TX_SCHED | linux.SOF_TIMESTAMPING_OPT_TSONLY
)

// stamping is what a socket was given.
type stamping struct {
	rx string // "SO_TIMESTAMPING", "SO_TIMESTAMPNS" or "" (user space)
	tx bool   // send stamps come on the error queue
}

// label is the data file's name for it.
func (s stamping) label() string {
	switch {
	case s.rx != "" && s.tx:
		return datafile.StampsKernel
	case s.rx != "":
		return datafile.StampsKernelRX
	}
	return datafile.StampsUser
}

// describe says it in words, for logs and events.
func (s stamping) describe() string {
	rx, tx := "user space after recvmsg", "user space before sendto"
	if s.rx != "" {
		rx = "kernel (" + s.rx + ")"
	}
	if s.tx {
		tx = "kernel (SO_TIMESTAMPING TX_SCHED, error queue)"
	}
	return "receive times: " + rx + "; send times: " + tx
}

// enableStamps asks the kernel for the best stamps it gives on fd: SO_TIMESTAMPING
// for both directions, else receive stamps alone, else SO_TIMESTAMPNS, else none.
func enableStamps(sc sysCalls, fd int) stamping {
	if sc.setsockoptInt(fd, linux.SOL_SOCKET, linux.SO_TIMESTAMPING, rxFlags|txFlags) == nil {
		return stamping{rx: "SO_TIMESTAMPING", tx: true}
	}
	if sc.setsockoptInt(fd, linux.SOL_SOCKET, linux.SO_TIMESTAMPING, rxFlags) == nil {
		return stamping{rx: "SO_TIMESTAMPING"}
	}
	if sc.setsockoptInt(fd, linux.SOL_SOCKET, linux.SO_TIMESTAMPNS, 1) == nil {
		return stamping{rx: "SO_TIMESTAMPNS"}
	}
	return stamping{}
}

// recvStamps asks the kernel for each datagram's receive time (SO_TIMESTAMPNS,
// for rxStamp); best effort: without it, user space's times stand in.
func recvStamps(rc syscall.RawConn) {
	rc.Control(func(fd uintptr) { linux.SetsockoptInt(int(fd), linux.SOL_SOCKET, linux.SO_TIMESTAMPNS, 1) })
}

// rxStamp finds the kernel's receive time in a message's control data: an
// SCM_TIMESTAMPING's software stamp, else SCM_TIMESTAMPNS, else SCM_TIMESTAMP.
func rxStamp(oob []byte) (time.Time, bool) {
	msgs, err := linux.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level != linux.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case linux.SO_TIMESTAMPING:
			if t, ok := timespecs(m.Data); ok {
				return t, true
			}
		case linux.SO_TIMESTAMPNS:
			if t, ok := timespecs(m.Data); ok {
				return t, true
			}
		case linux.SO_TIMESTAMP:
			if t, ok := timeval(m.Data); ok {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// txStamp reads a send stamp from an error queue message's control data: a
// sock_extended_err of origin SO_EE_ORIGIN_TIMESTAMPING for a TX_SCHED stamp, and the
// SCM_TIMESTAMPING beside it. Anything else (a stamp of another kind, an ICMP error)
// is not one.
func txStamp(oob []byte) (time.Time, bool) {
	msgs, err := linux.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	var t time.Time
	var haveT, sched bool
	for _, m := range msgs {
		switch {
		case m.Header.Level == linux.SOL_SOCKET && m.Header.Type == linux.SO_TIMESTAMPING:
			t, haveT = timespecs(m.Data)
		case (m.Header.Level == linux.SOL_IP && m.Header.Type == linux.IP_RECVERR) ||
			(m.Header.Level == linux.SOL_IPV6 && m.Header.Type == linux.IPV6_RECVERR):
			if len(m.Data) < 16 /* struct sock_extended_err */ {
				return time.Time{}, false
			}
			origin := m.Data[4]
			info := binary.NativeEndian.Uint32(m.Data[8:12])
			sched = origin == linux.SO_EE_ORIGIN_TIMESTAMPING && info == linux.SCM_TSTAMP_SCHED
		}
	}
	return t, haveT && sched
}

// timespecs reads the first non-zero struct timespec of a cmsg: SCM_TIMESTAMPNS has
// one, SCM_TIMESTAMPING three (software, deprecated, hardware). 64-bit kernels lay
// them out as two int64s, 32-bit ones' old layout as two int32s.
func timespecs(b []byte) (time.Time, bool) {
	size := 16
	if len(b) == 8 || len(b) == 24 {
		size = 8
	}
	for i := 0; i+size <= len(b); i += size {
		var sec, nsec int64
		if size == 16 {
			sec, nsec = int64(binary.NativeEndian.Uint64(b[i:])), int64(binary.NativeEndian.Uint64(b[i+8:]))
		} else {
			sec, nsec = int64(int32(binary.NativeEndian.Uint32(b[i:]))), int64(int32(binary.NativeEndian.Uint32(b[i+4:])))
		}
		if sec != 0 || nsec != 0 {
			if nsec < 0 || nsec >= 1e9 {
				return time.Time{}, false
			}
			return time.Unix(sec, nsec), true
		}
	}
	return time.Time{}, false
}

// timeval reads SCM_TIMESTAMP's struct timeval.
func timeval(b []byte) (time.Time, bool) {
	var sec, usec int64
	switch len(b) {
	case 16:
		sec, usec = int64(binary.NativeEndian.Uint64(b)), int64(binary.NativeEndian.Uint64(b[8:]))
	case 8:
		sec, usec = int64(int32(binary.NativeEndian.Uint32(b))), int64(int32(binary.NativeEndian.Uint32(b[4:])))
	default:
		return time.Time{}, false
	}
	if (sec == 0 && usec == 0) || usec < 0 || usec >= 1e6 {
		return time.Time{}, false
	}
	return time.Unix(sec, usec*1000), true
}
