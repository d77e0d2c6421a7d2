package testbed

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
)

// lockedLog is a log safe for concurrent writes, so that the race detector sees
// only what runLogged itself does.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// A build's stdout and stderr both reach the log and the tail an error quotes,
// from one writer at a time (run with -race: they were two goroutines' writes).
func TestRunLoggedTailOfBothStreams(t *testing.T) {
	var log lockedLog
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 200 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done; echo "E: the last words" >&2; exit 3`)
	err := runLogged(cmd, &log)
	if err == nil {
		t.Fatal("exit 3 gave no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "exit status 3") || !strings.HasSuffix(msg, "E: the last words") || strings.Count(msg, "\n") > 20 {
		t.Errorf("error %q: want the exit status then the last 20 lines, the last one E: the last words", msg)
	}
	if n := strings.Count(log.b.String(), "\n"); n != 401 {
		t.Errorf("the log has %d lines, want 401", n)
	}
}

// --rtt and --loss become the netem every run of the lab puts on the endpoints
// behind the router; without a router there is nowhere off the bottleneck for it.
func TestVMPathEmulation(t *testing.T) {
	cases := []struct {
		o    VMOptions
		want string // the netem spec, or the error's words
	}{
		{VMOptions{Router: true}, "none"},
		{VMOptions{Router: true, RTT: 50 * time.Millisecond}, "delay 25000us loss  limit 10000"},
		{VMOptions{Router: true, RTT: 5 * time.Millisecond, Loss: "0.5%"}, "delay 2500us loss 0.5% limit 10000"},
		{VMOptions{Router: true, Loss: "1%"}, "delay  loss 1% limit 10000"},
		{VMOptions{RTT: 50 * time.Millisecond}, "error: --rtt and --loss need --router"},
		{VMOptions{Router: true, Loss: "1"}, `error: --rtt/--loss: netem.loss: "1"`},
		{VMOptions{Router: true, RTT: -time.Second}, "error: --rtt -1s"},
	}
	for _, c := range cases {
		got := "none"
		_, err := c.o.check()
		if err == nil {
			if n, _ := c.o.netem(); n != nil {
				got = fmt.Sprintf("delay %s loss %s limit %d", n.Delay, n.Loss, n.Limit)
			}
		} else {
			got = "error: " + err.Error()
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: got %q, want %q", c.o, got, c.want)
		}
	}
}

// The VM lab's inventory carries the seeds' setups: they survive the file and
// resolve, each with BQL's limit_max, its title saying so, and the variants their
// offloads and channels.
func TestVMSetups(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vmlab.yaml")
	inv := &inventory.Inventory{Hosts: map[string]*inventory.Host{
		"client": {SSH: "root@127.0.0.1:2201", TestIP: "198.18.128.1"},
		"server": {SSH: "root@127.0.0.1:2202", TestIP: "198.18.144.2"},
	}, Client: "client", Server: "server", Setups: vmSetups()}
	if err := inv.Write(path, ""); err != nil {
		t.Fatal(err)
	}
	back, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"mq+dualpi2+bql":        "MQ + DUALPI2, BQL 6056",
		"cake-no-split-gso+bql": "CAKE (no-split-gso), BQL 6056",
		"pfifo_fast+bql-gso":    "PFIFO_FAST, BQL 6056, GSO off",
		"pfifo_fast+bql-1q-gso": "PFIFO_FAST, BQL 6056, 1 queue, GSO off",
		"mq+dualpi2+bql-steer":  "MQ + DUALPI2, BQL 6056, steered to tx-0",
	} {
		s, err := qdisc.Resolve(name, back)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if s.Title != want || s.BQL == nil || s.BQL.LimitMax == nil || *s.BQL.LimitMax != VMBQLLimit {
			t.Errorf("%s: title %q, BQL %+v", name, s.Title, s.BQL)
		}
	}
	s, _ := qdisc.Resolve("pfifo_fast+bql-1q-gso", back)
	if gso, ok := s.Offloads["gso"]; !ok || gso || s.Channels["combined"] != 1 {
		t.Errorf("pfifo_fast+bql-1q-gso: offloads %v, channels %v", s.Offloads, s.Channels)
	}
	if s, _ := qdisc.Resolve("mq+dualpi2+bql-steer", back); s == nil || s.Steer == nil || s.Steer.TxQueue != 0 || s.MQ == nil || s.MQ.Kind != "dualpi2" {
		t.Errorf("mq+dualpi2+bql-steer: %+v", s)
	}
	if _, ok := back.Setups["htb+fq_codel+bql"]; ok {
		t.Error("a setup that needs a rate got a +bql variant")
	}
}

// The VM lab's line rate is a setup of the taps: tbf at the rate, run in the lab's
// namespace.
func TestLineShaping(t *testing.T) {
	if s := (&VMOptions{}).LineShaping(); s != nil {
		t.Errorf("no rate: %+v, want no shaping", s)
	}
	got := inNetNS("bbvm1", (&VMOptions{Rate: "10mbit"}).LineShaping().Commands("tap0", 1))
	want := "tc -n bbvm1 qdisc replace dev tap0 root handle 1: tbf rate 10mbit burst 4500 limit 65536"
	if len(got) != 1 || strings.Join(got[0], " ") != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// testbed up --vm --router --rtt writes the path into the inventory it writes:
// half the RTT each way as netem on both endpoints' test devices, behind the
// router, with the lab's netem limit; the bottlenecks stay the router's, and a
// lab without --rtt and --loss has no path.
func TestVMInventoryPath(t *testing.T) {
	for _, c := range []struct {
		rtt  time.Duration
		want string
	}{
		{50 * time.Millisecond, "netem delay 25000us limit 10000 on [client:test0 server:test0]; bottlenecks [router:test0 router:test1]"},
		{0, "no netem on []; bottlenecks [router:test0 router:test1]"},
	} {
		dir := t.TempDir()
		l := &Lab{Name: "bbvm3", Index: 3, Dir: dir, Inventory: filepath.Join(dir, "vmlab.yaml"),
			VM:        &VMState{Kernel: "7.3.4", Guests: vmPlan(3, true, dir)},
			VMOptions: &VMOptions{Router: true, RTT: c.rtt, Rate: "10mbit", Queues: 4}}
		for i := range l.VM.Guests {
			l.VM.Guests[i].SSHPort = 2200 + i
		}
		if err := l.writeVMInventory(); err != nil {
			t.Fatal(err)
		}
		inv, err := inventory.Load(l.Inventory)
		if err != nil {
			t.Fatal(err)
		}
		var path, bottlenecks []string
		for _, d := range inv.PathDevices {
			path = append(path, d.Host+":"+d.Dev)
		}
		for _, d := range inv.Bottleneck {
			bottlenecks = append(bottlenecks, d.Host+":"+d.Dev)
		}
		got := "no netem"
		if n := inv.Netem; n != nil {
			got = fmt.Sprintf("netem delay %s limit %d", n.Delay, n.Limit)
			if n.Loss != "" {
				got += " loss " + n.Loss
			}
		}
		got += fmt.Sprintf(" on %v; bottlenecks %v", path, bottlenecks)
		if got != c.want {
			t.Errorf("--rtt %v: %s\nwant %s", c.rtt, got, c.want)
		}
	}
}

// writeELF writes a relocatable x86-64 ELF file with sections of the given names
// and sizes (zeros), as a kernel module's layout is: what moduleDebugBytes reads.
func writeELF(t *testing.T, path string, sections []elfSection) {
	t.Helper()
	shstr := []byte{0}
	var data bytes.Buffer
	const ehsize = 64
	hdrs := []elf.Section64{{}} // index 0 is the null section
	for _, s := range append(sections, elfSection{".shstrtab", 0}) {
		name := uint32(len(shstr))
		shstr = append(append(shstr, s.name...), 0)
		body := make([]byte, s.size)
		typ := elf.SHT_PROGBITS
		if s.name == ".shstrtab" {
			body, typ = shstr, elf.SHT_STRTAB
		}
		hdrs = append(hdrs, elf.Section64{Name: name, Type: uint32(typ), Off: uint64(ehsize + data.Len()), Size: uint64(len(body)), Addralign: 1})
		data.Write(body)
	}
	h := elf.Header64{Type: uint16(elf.ET_REL), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Shoff: uint64(ehsize + data.Len()), Ehsize: ehsize, Shentsize: 64, Shnum: uint16(len(hdrs)), Shstrndx: uint16(len(hdrs) - 1)}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var out bytes.Buffer
	for _, v := range []any{h, data.Bytes(), hdrs} {
		if err := binary.Write(&out, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

type elfSection struct {
	name string
	size int
}

// A --module is checked before any guest boots: a file that is no kernel module is
// refused naming it, and one that carries debug sections gets a warning of what
// they cost each boot (fw_cfg is slow under emulation) and how to be rid of them.
func TestVMModuleChecked(t *testing.T) {
	dir := t.TempDir()
	module := func(name string, sections ...elfSection) string {
		p := filepath.Join(dir, name)
		writeELF(t, p, sections)
		return p
	}
	text := filepath.Join(dir, "notes.ko")
	if err := os.WriteFile(text, []byte("not a module\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		module string
		want   string // the error's words, or the log's ("" for none)
	}{
		{module("stripped.ko", elfSection{".text", 4096}, elfSection{".modinfo", 64}), ""},
		{module("small-debug.ko", elfSection{".text", 4096}, elfSection{".modinfo", 64}, elfSection{".debug_info", 32 << 10}), ""},
		{module("debug.ko", elfSection{".text", 4096}, elfSection{".modinfo", 64}, elfSection{".debug_info", 400 << 10}, elfSection{".rela.debug_info", 300 << 10}, elfSection{".debug_line", 200 << 10}),
			"debug.ko: 900 KB of it are debug sections, which each guest reads through fw_cfg at about 100 KB/s: about 9 s more of every boot; a copy made with `strip --strip-debug`"},
		{module("object.ko", elfSection{".text", 4096}), "error: --module " + filepath.Join(dir, "object.ko") + ": an ELF file without a .modinfo section, so not a kernel module"},
		{text, "error: --module " + text + ": not a kernel module: "},
	}
	for _, c := range cases {
		o := VMOptions{Modules: []string{c.module}}
		got := ""
		if warnings, err := o.check(); err != nil {
			got = "error: " + err.Error()
		} else {
			got = strings.Join(warnings, "\n")
		}
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: got %q, want %q", filepath.Base(c.module), got, c.want)
		}
	}
}
