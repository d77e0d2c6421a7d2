package runners

import (
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bloatbench/bloatbench/datafile"
)

// TestSoftnetObserve: rates over the step per statistic, the host's over the CPUs
// in both reads, a 32-bit counter's wrap taken as one, per-core series on request.
func TestSoftnetObserve(t *testing.T) {
	type got struct {
		v     float64
		units string
	}
	out := map[string]got{}
	emit := func(se datafile.Series, x datafile.Sample) {
		if se.Kind != datafile.KindSoftnet || se.Host != "r1" || x.Dur != 0.5 || x.T != 100 {
			t.Errorf("series %+v sample %+v", se, x)
		}
		out[se.Name] = got{x.V, se.Units}
	}
	prev := map[uint32]procfs.SoftnetStat{
		0: {Processed: 1000, Dropped: 5, TimeSqueezed: 1},
		1: {Processed: math.MaxUint32 - 99, Dropped: 0}, // wraps in the step
		3: {Processed: 7},                               // goes offline
	}
	cur := map[uint32]procfs.SoftnetStat{
		0: {Processed: 1500, Dropped: 15, TimeSqueezed: 2, FlowLimitCount: 3},
		1: {Processed: 400, Dropped: 1},
		2: {Processed: 9}, // came online: no baseline yet
	}
	s := &softnetSampler{host: "r1", perCore: true}
	s.observe(prev, cur, 0.5, 100, emit)
	want := map[string]got{
		"softnet r1 all processed":    {(500 + 500) / 0.5, "pkts/s"},
		"softnet r1 cpu1 processed":   {500 / 0.5, "pkts/s"},
		"softnet r1 cpu0 dropped":     {10 / 0.5, "pkts/s"},
		"softnet r1 all dropped":      {11 / 0.5, "pkts/s"},
		"softnet r1 all time_squeeze": {1 / 0.5, "events/s"},
		"softnet r1 all flow_limit":   {3 / 0.5, "pkts/s"},
	}
	for name, w := range want {
		if out[name] != w {
			t.Errorf("%s = %+v, want %+v", name, out[name], w)
		}
	}
	for _, gone := range []string{"softnet r1 cpu2 processed", "softnet r1 cpu3 processed"} {
		if _, ok := out[gone]; ok {
			t.Errorf("%s emitted without a step", gone)
		}
	}
	if len(out) != 4*3 { // 4 statistics: all, cpu0, cpu1
		t.Errorf("%d series: %v", len(out), out)
	}
	out = map[string]got{}
	(&softnetSampler{host: "r1"}).observe(prev, cur, 0.5, 100, emit)
	if len(out) != 4 {
		t.Errorf("without per_core: %v", out)
	}
}

// TestSoftnetRead reads the file's layouts: before Linux 5.10 the CPU is the line's
// place; from 5.10 on a column says it, and offline CPUs have no line.
func TestSoftnetRead(t *testing.T) {
	cases := []struct {
		name, file string
		cpus       []uint32
		dropped    map[uint32]uint32
		numbered   bool
	}{
		{"4.19, 11 columns", "0000a000 00000002 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n" +
			"0000b000 00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000004\n",
			[]uint32{0, 1}, map[uint32]uint32{0: 2, 1: 16}, true},
		{"6.x, 15 columns, cpu 1 offline", "03e8d773 00001034 0000000d 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n" +
			"03d16f61 00000bc0 00000008 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000002 00000000 00000000\n",
			[]uint32{0, 2}, map[uint32]uint32{0: 0x1034, 2: 0xbc0}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "net", "softnet_stat"), []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := newSoftnetSampler(dir, JobSpec{Host: "h"}, false, Env{})
			if err != nil {
				t.Fatal(err)
			}
			byCPU, _, numbered, err := s.read()
			if err != nil {
				t.Fatal(err)
			}
			if numbered != c.numbered {
				t.Errorf("numbered %v, want %v", numbered, c.numbered)
			}
			if len(byCPU) != len(c.cpus) {
				t.Fatalf("cpus %v, want %v", byCPU, c.cpus)
			}
			for _, cpu := range c.cpus {
				if byCPU[cpu].Dropped != c.dropped[cpu] {
					t.Errorf("cpu %d dropped %d, want %d", cpu, byCPU[cpu].Dropped, c.dropped[cpu])
				}
			}
		})
	}
	s, err := newSoftnetSampler(t.TempDir(), JobSpec{}, false, Env{})
	if err == nil {
		_, _, _, err = s.read()
	}
	if err == nil {
		t.Error("a proc without net/softnet_stat read")
	}
}

// TestSoftnetCountsLoopback runs the kind on this machine's /proc: packets sent
// over loopback go through the receive backlog, and the host's processed rate,
// times each step's length, counts at least as many as were sent.
func TestSoftnetCountsLoopback(t *testing.T) {
	var mu sync.Mutex
	declared := map[string]datafile.Series{}
	samples := map[string][]datafile.Sample{}
	env := Env{
		Declare: func(se datafile.Series) { mu.Lock(); declared[se.Name] = se; mu.Unlock() },
		Emit: func(name string, x datafile.Sample) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := declared[name]; !ok {
				t.Errorf("sample of %s before its series", name)
			}
			if err := datafile.CheckSample(name, x); err != nil || x.V < 0 {
				t.Errorf("%s: %+v: %v", name, x, err)
			}
			samples[name] = append(samples[name], x)
		},
		Warn: func(msg string) { t.Errorf("warning: %s", msg) },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	job, started, err := Kinds()["softnet"].Start(ctx, JobSpec{Kind: "softnet", Host: "here", Step: 0.05}, env)
	if err != nil {
		t.Fatalf("start on this machine's /proc: %v", err)
	}
	if started.Message == "" {
		t.Error("no start message")
	}
	done := make(chan error, 1)
	go func() { done <- job.Run(ctx) }()
	processed := SoftnetSeries("here", "all", "processed")
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(samples[processed]) }
	waitFor := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d samples of %s, waited for %d", count(), processed, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(1)
	first := count()
	recv, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	send, err := net.Dial("udp", recv.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	const sent = 2000
	for range sent {
		if _, err := send.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback's receive runs in the sender's softirq: the packets are counted by
	// the time the next read after the sends is taken.
	waitFor(first + 2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0.0
	for _, x := range samples[processed][first:] {
		total += x.V * x.Dur
	}
	if total < sent*0.999 { // the rate times the step's length, in float
		t.Errorf("%.0f packets processed over the steps after %d were sent", total, sent)
	}
	for _, stat := range []string{"dropped", "time_squeeze", "flow_limit"} {
		if se, ok := declared[SoftnetSeries("here", "all", stat)]; !ok || se.Stat != stat {
			t.Errorf("no series of %s: %v", stat, declared)
		}
	}
}
