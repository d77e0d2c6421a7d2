package main

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// limitHeapToAddressSpace tells the garbage collector about an address-space
// limit (ulimit -v), which the Go runtime does not read: without it the runtime
// maps new memory where a collection would have freed enough, and dies of "out of
// memory" far below the limit (it reserves about 1.2 GB of address space at start,
// so under ulimit -v 2000000 a heap of 700 MB is all there is). The soft limit is
// three quarters of what is left; GOMEMLIMIT, when set, is the user's and wins.
func limitHeapToAddressSpace() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return
	}
	used := vmSize()
	if used <= 0 || uint64(used) >= rl.Cur {
		return
	}
	debug.SetMemoryLimit(int64(rl.Cur-uint64(used)) / 4 * 3)
}

// vmSize is the process's mapped address space in bytes, from /proc/self/status;
// 0 when it cannot be read.
func vmSize() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
