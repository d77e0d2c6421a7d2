package testbed

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
)

// The guest image's recipe: both files are part of the cache key, so editing either
// rebuilds the image.
var (
	//go:embed vm/build.sh
	buildScript []byte
	//go:embed vm/init
	guestInit []byte
)

// VMOptions choose the VM lab's kernel and its test link.
type VMOptions struct {
	// Rate is the test link's line rate, enforced on the host side with flow control
	// back into the guests (see vmLink); "" = as fast as emulation goes.
	Rate string `json:"rate,omitempty"`
	// Queues is the number of queue pairs of the guests' virtio-net test device.
	Queues int `json:"queues"`
	// Kernel is a linux-image .deb or a bzImage to boot instead of the default.
	Kernel string `json:"kernel,omitempty"`
	// Modules are .ko files each guest loads at boot (a qdisc under development).
	Modules []string `json:"modules,omitempty"`
	// MemoryMB per guest.
	MemoryMB int `json:"memory_mb"`
	// Router puts a third guest between client and server, forwarding: the setups
	// apply to its two test devices. Its senders are elsewhere, so TCP small queues
	// (which keeps a local sender's packets in the qdisc to a few per flow) does not
	// shape the queue under test, as on a real router.
	Router bool `json:"router,omitempty"`
	// RTT and Loss emulate the path with netem on the endpoints' test devices,
	// behind the router (so the router's qdiscs stay the ones under test): RTT/2 of
	// delay and Loss of the packets each way. They need Router.
	RTT  time.Duration `json:"rtt,omitempty"`
	Loss string        `json:"loss,omitempty"`
	// CacheDir holds built images; "" = $XDG_CACHE_HOME/bloatbench/vm.
	CacheDir string `json:"-"`
	// Log receives the build's and the boot's progress.
	Log io.Writer `json:"-"`
}

// VMState is what `testbed down` needs of a VM lab.
type VMState struct {
	NetNS  string   `json:"netns"` // holds the bridge joining the guests' taps
	PIDs   []int    `json:"pids"`
	Image  string   `json:"image"`
	Kernel string   `json:"kernel_release"`
	Guests []VMNode `json:"guests"`
}

// VMNode is one guest.
type VMNode struct {
	Role    string   `json:"role"`
	SSHPort int      `json:"ssh_port"`
	Links   []VMLink `json:"links"`
	Route   string   `json:"route,omitempty"` // "NET via GW", towards the far side of a router
	Console string   `json:"console"`
}

// VMLink is one of a guest's test devices and the tap behind it.
type VMLink struct {
	Dev    string `json:"dev"`
	Tap    string `json:"tap"`
	MAC    string `json:"mac"`
	IP     string `json:"ip"`     // with its prefix length
	Bridge string `json:"bridge"` // in the lab's namespace
	Shaped bool   `json:"shaped"` // the tap's egress runs at the lab's rate
}

// TestIP is the address the other side reaches the guest at.
func (g VMNode) TestIP() string { ip, _, _ := strings.Cut(g.Links[0].IP, "/"); return ip }

// vmPlan lays out lab n: client and server on one bridge, or with a router, each on
// its own bridge with one of the router's devices. Addresses are from RFC 2544's
// 198.18.0.0/15: the client's link 198.18.(128+n).0/24, the server's, behind a
// router, 198.18.(144+n).0/24.
func vmPlan(n int, router bool, dir string) []VMNode {
	mac := func(kind, i int) string { return fmt.Sprintf("52:54:00:bb:%02x:%02x", n, kind<<4|i) }
	node := func(role string) VMNode {
		return VMNode{Role: role, Console: filepath.Join(dir, role+".console")}
	}
	c, s := node("client"), node("server")
	cnet, snet := fmt.Sprintf("198.18.%d", 128+n), fmt.Sprintf("198.18.%d", 144+n)
	if !router {
		c.Links = []VMLink{{Dev: TestDev, Tap: fmt.Sprintf("bbvm%dc", n), MAC: mac(2, 0), IP: cnet + ".1/24", Bridge: "br0", Shaped: true}}
		s.Links = []VMLink{{Dev: TestDev, Tap: fmt.Sprintf("bbvm%ds", n), MAC: mac(2, 1), IP: cnet + ".2/24", Bridge: "br0", Shaped: true}}
		return []VMNode{c, s}
	}
	r := node("router")
	c.Links = []VMLink{{Dev: TestDev, Tap: fmt.Sprintf("bbvm%dc", n), MAC: mac(2, 0), IP: cnet + ".1/24", Bridge: "brc", Shaped: true}}
	s.Links = []VMLink{{Dev: TestDev, Tap: fmt.Sprintf("bbvm%ds", n), MAC: mac(2, 1), IP: snet + ".2/24", Bridge: "brs", Shaped: true}}
	r.Links = []VMLink{
		{Dev: TestDev, Tap: fmt.Sprintf("bbvm%drc", n), MAC: mac(2, 2), IP: cnet + ".254/24", Bridge: "brc"},
		{Dev: "test1", Tap: fmt.Sprintf("bbvm%drs", n), MAC: mac(3, 2), IP: snet + ".254/24", Bridge: "brs"},
	}
	c.Route = fmt.Sprintf("%s.0/24 via %s.254", snet, cnet)
	s.Route = fmt.Sprintf("%s.0/24 via %s.254", cnet, snet)
	return []VMNode{c, s, r}
}

// vmSndbuf bounds the bytes each tap queue of QEMU may have in flight on the host.
// Past it, QEMU's writes wait and it stops taking packets off the guest's virtio tx
// ring, so the queue builds in the guest's qdisc (where the setup under test is) and
// BQL sees a device that pushes back, as a real NIC at that line rate would. QEMU's
// own documentation gives sndbuf as its flow control. The bound is per tap queue and
// lets one more packet through, so the device offers the host no TSO: packets stay
// MTU-sized (the guest still builds GSO packets in its qdiscs and segments them in
// software) and the host holds a few packets, not a few 64 KB ones.
const vmSndbuf = 4096

// vmBootTimeout bounds a guest's boot under software emulation.
const vmBootTimeout = 3 * time.Minute

// check refuses options that cannot make a lab, fills in the defaults, and returns
// the warnings the --module files deserve.
func (o *VMOptions) check() (warnings []string, err error) {
	if o.Rate != "" && !rateRE.MatchString(o.Rate) {
		return nil, fmt.Errorf("--rate %q: write a tc rate such as 20mbit", o.Rate)
	}
	if (o.RTT != 0 || o.Loss != "") && !o.Router {
		return nil, fmt.Errorf("--rtt and --loss need --router: netem goes on the endpoints behind the router, off the bottleneck, so that the qdisc under test stays the one that queues (without a router the endpoints' devices are the bottlenecks)")
	}
	if o.RTT < 0 || o.RTT > time.Minute {
		return nil, fmt.Errorf("--rtt %v: from 0 to 1m", o.RTT)
	}
	if _, err := o.netem(); err != nil {
		return nil, err
	}
	if o.Queues == 0 {
		o.Queues = 4
	}
	if o.Queues < 1 || o.Queues > 8 {
		return nil, fmt.Errorf("--queues %d: from 1 to 8", o.Queues)
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 512
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, f := range append([]string{o.Kernel}, o.Modules...) {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return o.checkModules()
}

// checkModules refuses a --module that is no kernel module, and warns of one whose
// debug sections will slow every boot.
func (o *VMOptions) checkModules() (warnings []string, err error) {
	for _, m := range o.Modules {
		if !strings.HasSuffix(m, ".ko") {
			return nil, fmt.Errorf("--module %s: give a kernel module file (.ko, not compressed)", m)
		}
		debug, err := moduleDebugBytes(m)
		if err != nil {
			return nil, err
		}
		if debug > 64<<10 {
			warnings = append(warnings, fmt.Sprintf("--module %s: %d KB of it are debug sections, which each guest reads through fw_cfg at about %d KB/s: about %.0f s more of every boot; a copy made with `strip --strip-debug` is the same module, loaded sooner",
				m, debug>>10, fwCfgBytesPerSecond/1000, float64(debug)/fwCfgBytesPerSecond))
		}
	}
	return warnings, nil
}

// fwCfgBytesPerSecond is about how fast a guest reads a file from QEMU's fw_cfg,
// which hands it over a byte an I/O port access, each a trip through the
// emulation: a dualpi2 module of 910 KB made a VM lab's boot 9 s longer than the
// same module stripped to 37 KB.
const fwCfgBytesPerSecond = 100_000

// moduleDebugBytes checks that f is a kernel module (an ELF file with a .modinfo
// section: the guest's insmod would refuse anything else, later and less clearly)
// and says how many of its bytes are debug sections.
func moduleDebugBytes(f string) (int64, error) {
	e, err := elf.Open(f)
	if err != nil {
		return 0, fmt.Errorf("--module %s: not a kernel module: %w", f, err)
	}
	defer e.Close()
	if e.Section(".modinfo") == nil {
		return 0, fmt.Errorf("--module %s: an ELF file without a .modinfo section, so not a kernel module", f)
	}
	var n int64
	for _, s := range e.Sections {
		// With their relocations (.rela.debug_info), which strip --strip-debug
		// takes too: about half of an unstripped module's debug bytes.
		name := strings.TrimPrefix(strings.TrimPrefix(s.Name, ".rela"), ".rel")
		if strings.HasPrefix(name, ".debug") || strings.HasPrefix(name, ".zdebug") {
			n += int64(s.FileSize)
		}
	}
	return n, nil
}

// Image is a built guest image in the cache.
type Image struct {
	Dir     string
	Vmlinuz string
	Initrd  string
	Kernel  string // release
}

// EnsureImage returns the cached image for these options, building it when missing:
// a few minutes from cold (downloads, a debootstrap to build sch_dualpi2.ko).
func EnsureImage(ctx context.Context, o VMOptions) (Image, error) {
	if _, err := o.check(); err != nil {
		return Image{}, err
	}
	return ensureImage(ctx, o)
}

// ensureImage is EnsureImage for options already checked: UpVM's, which read each
// --module's ELF once.
func ensureImage(ctx context.Context, o VMOptions) (Image, error) {
	cache := o.CacheDir
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return Image{}, fmt.Errorf("find a cache folder: %w (set XDG_CACHE_HOME)", err)
		}
		cache = filepath.Join(base, "bloatbench", "vm")
	}
	h := sha256.New()
	h.Write(buildScript)
	h.Write(guestInit)
	kdeb := ""
	if o.Kernel != "" && isDeb(o.Kernel) {
		kdeb = o.Kernel
		if err := hashFile(h, kdeb); err != nil {
			return Image{}, err
		}
	}
	dir := filepath.Join(cache, hex.EncodeToString(h.Sum(nil))[:16])
	img := Image{Dir: dir, Vmlinuz: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.gz")}
	if !fileExists(filepath.Join(dir, "kver")) {
		if err := buildImage(ctx, o, dir, kdeb); err != nil {
			return Image{}, err
		}
	}
	kv, err := os.ReadFile(filepath.Join(dir, "kver"))
	if err != nil {
		return Image{}, fmt.Errorf("read image %s: %w", dir, err)
	}
	img.Kernel = strings.TrimSpace(string(kv))
	if o.Kernel != "" && !isDeb(o.Kernel) {
		// A bare bzImage boots with the default image's userland; modules of another
		// release will not load, so what the lab needs must be built in.
		img.Vmlinuz, img.Kernel = o.Kernel, ""
	}
	return img, nil
}

func isDeb(p string) bool { return strings.HasSuffix(p, ".deb") }

func hashFile(h io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	return nil
}

func buildImage(ctx context.Context, o VMOptions, dir, kdeb string) error {
	need := map[string]string{"debootstrap": "debootstrap", "cpio": "cpio", "xz": "xz-utils", "dpkg-deb": "dpkg", "apt-get": "apt", "busybox": "busybox-static", "depmod": "kmod"}
	for tool, pkg := range need {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("building the VM image needs %s: apt-get install %s (or run scripts/install-deps --vm)", tool, pkg)
		}
	}
	if !fileExists("/bin/busybox") {
		return errors.New("building the VM image needs a static /bin/busybox: apt-get install busybox-static")
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create the image cache: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return fmt.Errorf("create the image cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	script, init := filepath.Join(tmp, "build.sh"), filepath.Join(tmp, "init")
	if err := os.WriteFile(script, buildScript, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(init, guestInit, 0o755); err != nil {
		return err
	}
	args := []string{script, filepath.Join(tmp, "image")}
	if kdeb != "" {
		args = append(args, kdeb)
	}
	fmt.Fprintf(o.Log, "building the VM image into %s (a few minutes, once)\n", dir)
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Env = append(os.Environ(), "INIT="+init)
	if err := runLogged(cmd, o.Log); err != nil {
		return fmt.Errorf("build the VM image: %w", err)
	}
	// Renaming is the commit: an interrupted build leaves no image that looks whole.
	if err := os.Rename(filepath.Join(tmp, "image"), dir); err != nil && !fileExists(filepath.Join(dir, "kver")) {
		return fmt.Errorf("store the VM image: %w", err)
	}
	return nil
}

// runLogged runs cmd with its stdout and stderr on log, and returns its error
// followed by the last lines of that output.
func runLogged(cmd *exec.Cmd, log io.Writer) error {
	var tail tailBuffer
	// One writer for both: exec.Cmd then copies them through one pipe, so one
	// goroutine writes the tail and log (two writers were two goroutines writing
	// the tail at once).
	w := io.MultiWriter(log, &tail)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, tail.String())
	}
	return nil
}

// tailBuffer keeps the last lines written to it, for error messages.
type tailBuffer struct{ lines []string }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.lines = append(t.lines, strings.Split(strings.TrimRight(string(p), "\n"), "\n")...)
	if len(t.lines) > 20 {
		t.lines = t.lines[len(t.lines)-20:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.Join(t.lines, "\n") }

// UpVM boots a VM lab: two QEMU guests (client and server) whose multi-queue
// virtio-net test devices are joined by a bridge in a namespace of their own, each
// reached over SSH through a port QEMU forwards from 127.0.0.1. It writes an
// inventory to out ("" = inside the lab's folder).
func UpVM(ctx context.Context, o VMOptions, out string) (lab *Lab, err error) {
	warnings, err := o.check()
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintln(o.Log, w)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the VM lab needs root (taps, a bridge in a namespace): run as root")
	}
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		return nil, errors.New("the VM lab needs qemu-system-x86_64: apt-get install qemu-system-x86 (or scripts/install-deps --vm)")
	}
	for _, t := range []string{"ip", "tc"} {
		if _, err := lookPath(t); err != nil {
			return nil, fmt.Errorf("the VM lab needs %s: apt-get install iproute2", t)
		}
	}
	if !fileExists("/dev/net/tun") {
		return nil, errors.New("the VM lab needs /dev/net/tun (modprobe tun)")
	}
	img, err := ensureImage(ctx, o)
	if err != nil {
		return nil, err
	}
	n, dir, err := claim("bbvm", 16, func(n int) string { return fmt.Sprintf("bbvm%d", n) })
	if err != nil {
		return nil, err
	}
	lab = &Lab{Name: fmt.Sprintf("bbvm%d", n), Index: n, Dir: dir, VMOptions: &o,
		VM: &VMState{NetNS: fmt.Sprintf("bbvm%d", n), Image: img.Dir, Kernel: img.Kernel}}
	if err := lab.bring(ctx, qemuBackend{qemu: qemu, img: img}, out); err != nil {
		return nil, err
	}
	return lab, nil
}

// qemuBackend is the VM lab: QEMU guests on taps, joined by a bridge in a namespace
// of the lab's own.
type qemuBackend struct {
	qemu string // the emulator's path
	img  Image
}

func (b qemuBackend) build(ctx context.Context, lab *Lab) error {
	o, dir := lab.VMOptions, lab.Dir
	userKey, err := newKey(filepath.Join(dir, "id_ed25519"))
	if err != nil {
		return err
	}
	authorized := ssh.MarshalAuthorizedKey(userKey)
	var known []string
	for i, g := range vmPlan(lab.Index, o.Router, dir) {
		if g.SSHPort, err = freePort(); err != nil {
			return err
		}
		hostPub, err := newKey(filepath.Join(dir, g.Role+"_host_key"))
		if err != nil {
			return err
		}
		known = append(known, knownhosts.Line([]string{knownhosts.Normalize(fmt.Sprintf("127.0.0.1:%d", g.SSHPort))}, hostPub))
		pid, err := lab.boot(ctx, b.qemu, b.img, g, i, authorized)
		if err != nil {
			return err
		}
		lab.VM.PIDs = append(lab.VM.PIDs, pid)
		lab.VM.Guests = append(lab.VM.Guests, g)
		if err := lab.save(); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(strings.Join(known, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	if err := lab.vmLink(ctx); err != nil {
		return err
	}
	for _, g := range lab.VM.Guests {
		kv, err := waitReady(ctx, g, o.Log)
		if err != nil {
			return err
		}
		if lab.VM.Kernel == "" {
			lab.VM.Kernel = kv // a bare bzImage: what the guest says it runs
		}
	}
	return nil
}

func (qemuBackend) writeInventory(l *Lab) error                { return l.writeVMInventory() }
func (qemuBackend) teardown(ctx context.Context, l *Lab) error { return l.vmDown(ctx) }

// LineShaping is the VM lab's line rate, as a setup of the taps that carry the test
// link: tbf at the rate, with a burst of three packets and 64 KB of queue, or nil
// for none.
func (o *VMOptions) LineShaping() *qdisc.Setup {
	if o.Rate == "" {
		return nil
	}
	return &qdisc.Setup{Name: "line", Root: &qdisc.Qdisc{Kind: "tbf", Args: []string{"rate", o.Rate, "burst", "4500", "limit", "65536"}}}
}

// freePort asks the kernel for a free port on 127.0.0.1 for QEMU to forward.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// boot starts one guest, daemonised, and returns QEMU's pid.
func (l *Lab) boot(ctx context.Context, qemu string, img Image, g VMNode, i int, authorized []byte) (int, error) {
	o := l.VMOptions
	mgmtMAC := fmt.Sprintf("52:54:00:bb:%02x:%02x", l.Index, 0x10+i)
	// The guest's init sources this: every value is made here, from numbers.
	guest := fmt.Sprintf("NAME=%s-%s\nMGMT_MAC=%s\nQUEUES=%d\nROUTE='%s'\n", l.Name, g.Role, mgmtMAC, o.Queues, g.Route)
	for j, k := range g.Links {
		guest += fmt.Sprintf("LINK%d='%s %s %s'\n", j, k.Dev, k.MAC, k.IP)
	}
	if len(g.Links) > 1 {
		guest += "FORWARD=1\n"
	}
	files := map[string]string{"guest": filepath.Join(l.Dir, g.Role+".env"), "authorized_keys": filepath.Join(l.Dir, "authorized_keys"),
		"hostkey": filepath.Join(l.Dir, g.Role+"_host_key")}
	if err := os.WriteFile(files["guest"], []byte(guest), 0o600); err != nil {
		return 0, err
	}
	if err := os.WriteFile(files["authorized_keys"], authorized, 0o600); err != nil {
		return 0, err
	}
	pidFile := filepath.Join(l.Dir, g.Role+".pid")
	args := []string{
		"-name", l.Name + "-" + g.Role,
		"-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", strconv.Itoa(o.MemoryMB),
		"-display", "none", "-monitor", "none", "-serial", "file:" + g.Console,
		"-no-reboot", "-daemonize", "-pidfile", pidFile,
		"-kernel", img.Vmlinuz, "-initrd", img.Initrd,
		"-append", "console=ttyS0 panic=-1 quiet",
		// restrict=on: the management port reaches nothing but the forwarded sshd.
		"-netdev", fmt.Sprintf("user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:%d-:22", g.SSHPort),
		"-device", "virtio-net-pci,netdev=mgmt,mac=" + mgmtMAC,
	}
	for j, k := range g.Links {
		args = append(args,
			"-netdev", fmt.Sprintf("tap,id=test%d,ifname=%s,script=no,downscript=no,vhost=off,queues=%d,sndbuf=%d", j, k.Tap, o.Queues, vmSndbuf),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=test%d,mac=%s,mq=on,vectors=%d,host_tso4=off,host_tso6=off,host_ufo=off,host_ecn=off,gso=off", j, k.MAC, 2*o.Queues+2))
	}
	for name, f := range files {
		args = append(args, "-fw_cfg", "name=opt/bloatbench/"+name+",file="+f)
	}
	for j, m := range o.Modules {
		abs, err := filepath.Abs(m)
		if err != nil {
			return 0, err
		}
		args = append(args, "-fw_cfg", fmt.Sprintf("name=opt/bloatbench/module%d,file=%s", j, abs))
	}
	fmt.Fprintf(o.Log, "booting %s-%s (kernel %s)\n", l.Name, g.Role, img.Vmlinuz)
	if b, err := exec.CommandContext(ctx, qemu, args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("start QEMU for %s: %w: %s", g.Role, err, strings.TrimSpace(string(b)))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("QEMU for %s wrote no pid file: %w", g.Role, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("QEMU's pid file %s: %w", pidFile, err)
	}
	return pid, nil
}

// vmLink moves both guests' taps into the lab's namespace, bridges them, and shapes
// each tap's egress (towards its guest) at the lab's rate. tbf's queue stays small
// because QEMU's sndbuf stops the sender first: the standing queue is the guest's.
func (l *Lab) vmLink(ctx context.Context) error {
	ns := l.VM.NetNS
	steps := [][]string{
		{"ip", "netns", "add", ns},
		// br_netfilter (when the host has it) orphans bridged packets, which frees
		// QEMU's sndbuf at once and with it the flow control; the lab's frames have
		// no business with the host's firewall anyway.
		{"ip", "netns", "exec", ns, "sh", "-c", "for f in /proc/sys/net/bridge/bridge-nf-call-*; do [ -e \"$f\" ] && echo 0 > \"$f\"; done; true"},
	}
	bridges := map[string]bool{}
	for _, g := range l.VM.Guests {
		for _, k := range g.Links {
			if !bridges[k.Bridge] {
				bridges[k.Bridge] = true
				steps = append(steps, []string{"ip", "-n", ns, "link", "add", k.Bridge, "type", "bridge"},
					[]string{"ip", "-n", ns, "link", "set", k.Bridge, "up"})
			}
			steps = append(steps,
				[]string{"ip", "link", "set", k.Tap, "netns", ns},
				[]string{"ip", "-n", ns, "link", "set", k.Tap, "master", k.Bridge},
				[]string{"ip", "-n", ns, "link", "set", k.Tap, "up"})
			if line := l.VMOptions.LineShaping(); line != nil && k.Shaped {
				steps = append(steps, inNetNS(ns, line.Commands(k.Tap, 1))...)
			}
		}
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return fmt.Errorf("VM lab link: %w", err)
		}
	}
	return nil
}

// waitReady follows a guest's console until its init says sshd is up, and returns
// the kernel release the guest runs.
func waitReady(ctx context.Context, g VMNode, log io.Writer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, vmBootTimeout)
	defer cancel()
	seen := map[string]bool{}
	for {
		b, _ := os.ReadFile(g.Console)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "@@module") && !seen[line] {
				seen[line] = true
				fmt.Fprintf(log, "%s: %s\n", g.Role, strings.TrimPrefix(line, "@@"))
			}
			if strings.HasPrefix(line, "@@ready") {
				fmt.Fprintf(log, "%s is up: %s\n", g.Role, strings.TrimPrefix(line, "@@ready "))
				f := strings.Fields(line)
				return f[len(f)-1], waitBanner(ctx, g.SSHPort)
			}
			if strings.HasPrefix(line, "@@fail") {
				return "", fmt.Errorf("guest %s: %s (console: %s)", g.Role, strings.TrimPrefix(line, "@@fail "), g.Console)
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("guest %s did not come up within %v; its console is %s:\n%s", g.Role, vmBootTimeout, g.Console, lastLines(b, 15))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitBanner waits for sshd's banner through QEMU's forward (which accepts
// connections before anything in the guest listens).
func waitBanner(ctx context.Context, port int) error {
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "SSH-") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no sshd answers on 127.0.0.1:%d", port)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (l *Lab) writeVMInventory() error {
	inv := &inventory.Inventory{Hosts: map[string]*inventory.Host{}, Client: "client", Server: "server", Testbed: l.Name}
	for _, g := range l.VM.Guests {
		inv.Hosts[g.Role] = &inventory.Host{SSH: fmt.Sprintf("root@127.0.0.1:%d", g.SSHPort), TestIP: g.TestIP(),
			IdentityFile: filepath.Join(l.Dir, "id_ed25519"), KnownHosts: filepath.Join(l.Dir, "known_hosts")}
		// With a router the bottlenecks are its two devices, else each end's.
		if l.VMOptions.Router == (g.Role == "router") {
			for _, k := range g.Links {
				// The guest's virtio-net cannot tell the line rate the host holds
				// it to: the inventory does, for the drain rate's row beside it.
				inv.Bottleneck = append(inv.Bottleneck, inventory.Bottleneck{Host: g.Role, Dev: k.Dev, Rate: l.VMOptions.Rate})
			}
		}
	}
	inv.Setups = vmSetups()
	link := "unshaped"
	if l.VMOptions.Rate != "" {
		link = "line rate " + l.VMOptions.Rate
	}
	if l.VMOptions.Router {
		link += ", a router guest between them"
	}
	if n, _ := l.VMOptions.netem(); n != nil {
		// Every run puts it on and takes it off again, journaled like a setup.
		inv.Netem = n
		for _, g := range l.VM.Guests {
			if g.Role != "router" {
				inv.PathDevices = append(inv.PathDevices, inventory.Bottleneck{Host: g.Role, Dev: g.Links[0].Dev})
			}
		}
		link += fmt.Sprintf(", path RTT %v and loss %s each way (netem on the endpoints)", l.VMOptions.RTT, cmp.Or(l.VMOptions.Loss, "0%"))
	}
	comment := fmt.Sprintf("# VM lab %s: kernel %s in QEMU, virtio-net with %d queue pairs, %s.\n"+
		"# Written by `bloatbench testbed up --vm`; `bloatbench testbed down -H %s` removes it.\n",
		l.Name, l.VM.Kernel, l.VMOptions.Queues, link, filepath.Base(l.Inventory))
	return inv.Write(l.Inventory, comment)
}

// VMBQLLimit is the BQL limit_max of the VM lab's "+bql" setups: four MTU-sized
// packets. At the lab's line rates virtio-net's ring would otherwise hold most of
// the queue, and the qdisc under test would see little of it (as on real hardware
// without BQL); the seeds quote BQL holding ~15000 bytes at 100 Mbit/s.
const VMBQLLimit = 6056

// vmSetups are the setups the VM lab's inventory carries, which docs/labs.md's
// commands and the VM stage name: every built-in that needs no rate with BQL's
// limit_max at VMBQLLimit ("mq+dualpi2+bql"), and the seeds' variants of them: GSO
// off ("-gso", seed 004's matrix, and each skb one packet) and one queue instead of
// the device's several ("-1q": ethtool -L combined 1, seed 004's one tx queue),
// and the mq setups with every packet steered to tx queue 0 ("-steer": the
// queues stay four, but a test's flows and probes meet in mq's child 1:1, as
// the L4S tests' per-class probes need).
func vmSetups() map[string]*inventory.SetupSpec {
	limit := VMBQLLimit
	out := map[string]*inventory.SetupSpec{}
	for _, name := range qdisc.BuiltinNames() {
		s, err := qdisc.Lookup(name, nil)
		if err != nil || s.NeedsRate() {
			continue
		}
		out[name+"+bql"] = &inventory.SetupSpec{Extends: name, Title: fmt.Sprintf("%s, BQL %d", s.Title, limit),
			BQL: &inventory.BQLSpec{LimitMax: &limit}}
	}
	gsoOff := map[string]string{"gso": "off"}
	for _, base := range []string{"pfifo_fast+bql", "mq+fq_codel+bql"} {
		out[base+"-gso"] = &inventory.SetupSpec{Extends: base, Title: out[base].Title + ", GSO off", Offloads: gsoOff}
	}
	out["pfifo_fast+bql-1q"] = &inventory.SetupSpec{Extends: "pfifo_fast+bql", Title: out["pfifo_fast+bql"].Title + ", 1 queue",
		Channels: map[string]int{"combined": 1}}
	out["pfifo_fast+bql-1q-gso"] = &inventory.SetupSpec{Extends: "pfifo_fast+bql-1q", Title: out["pfifo_fast+bql"].Title + ", 1 queue, GSO off",
		Offloads: gsoOff}
	txq0 := 0
	for _, base := range []string{"mq+dualpi2+bql", "mq+fq_codel+bql", "mq+fq_pie+bql"} {
		out[base+"-steer"] = &inventory.SetupSpec{Extends: base, Title: out[base].Title + ", steered to tx-0",
			Steer: &inventory.SteerSpec{TxQueue: &txq0}}
	}
	return out
}

// vmNetemLimit is the packets netem holds on a path device: tc's 1000 would drop at
// the lab's top rates with a long RTT (600 Mbit/s over 25 ms is 1250 full packets),
// and a path must not drop what the qdisc under test should.
const vmNetemLimit = 10000

// netem is the path emulation the lab's runs put on the endpoints, nil for none.
func (o *VMOptions) netem() (*inventory.NetemSpec, error) {
	if o.RTT == 0 && o.Loss == "" {
		return nil, nil
	}
	n := &inventory.NetemSpec{Loss: o.Loss, Limit: vmNetemLimit}
	if o.RTT > 0 {
		n.Delay = fmt.Sprintf("%dus", (o.RTT / 2).Microseconds())
	}
	if _, err := qdisc.NetemArgs(n, "--rtt/--loss: netem"); err != nil {
		return nil, err
	}
	return n, nil
}

// vmDown stops the guests and removes the namespace, which takes the bridge with it;
// the taps go with QEMU.
func (l *Lab) vmDown(ctx context.Context) error {
	var errs []error
	// The guests by the name QEMU was given, too: a lab killed between starting a
	// guest and saving its pid has one nobody recorded.
	for _, pid := range append(l.VM.PIDs, qemuPIDs(l.Name)...) {
		if !isQEMU(pid) {
			continue // gone, or the number was reused by something else
		}
		syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(5 * time.Second)
		for isQEMU(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if isQEMU(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if l.VM.NetNS != "" && fileExists(filepath.Join("/run/netns", l.VM.NetNS)) {
		if err := run(ctx, "ip", "netns", "del", l.VM.NetNS); err != nil {
			errs = append(errs, err)
		}
	}
	// A tap QEMU made but vmLink never moved is still in the host's namespace.
	for _, g := range l.VM.Guests {
		for _, k := range g.Links {
			if linkExists(k.Tap) {
				run(ctx, "ip", "link", "del", k.Tap)
			}
		}
	}
	if err := os.RemoveAll(l.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", l.Dir, err))
	}
	return errors.Join(errs...)
}

// qemuPIDs finds the QEMU processes of the named lab by their -name NAME-ROLE.
func qemuPIDs(lab string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("qemu-system")) && bytes.Contains(b, []byte("\x00-name\x00"+lab+"-")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func isQEMU(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "qemu-system")
}
