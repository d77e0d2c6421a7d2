package qdisc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/google/renameio/v2"
)

// journalVersion 2 added ethtool features, filters and htb class details (tc -d -raw)
// to each state; version 3 what the run applied (Applied, SysctlsApplied) and the
// hosts' identities. Older journals are still read and compared on what they have.
const journalVersion = 3

// Journal is what a controller changed on its hosts, written before it changes
// anything, so that `bloatbench restore` can put the hosts back after a controller
// that was killed.
type Journal struct {
	Version   int                        `json:"version"`
	PID       int                        `json:"pid"`
	Created   time.Time                  `json:"created"`
	Setup     string                     `json:"setup"`
	Inventory string                     `json:"inventory"`
	Hosts     map[string]*inventory.Host `json:"hosts"` // enough to reconnect without the inventory
	States    []*State                   `json:"states"`
	// Sysctls are the values the setup's sysctls had on each host.
	Sysctls []SysctlState `json:"sysctls,omitempty"`
	// Applied are the devices as read back after the setup went on, one per state
	// that got that far. Restore puts a device back only while it is still so: a
	// device changed by hand since (or by a later run) is not the run's to undo.
	Applied []*State `json:"applied,omitempty"`
	// SysctlsApplied are the values the setup sets, per host, for the same check.
	SysctlsApplied []SysctlState `json:"sysctls_applied,omitempty"`
	// Identities are the hosts as they told who they are (HostIdentity) when the
	// run started, so that a journal is matched to a machine, not to a name for it.
	Identities map[string]HostID `json:"identities,omitempty"`
	// Controller is the machine the run's controller ran on, with PID.
	Controller string `json:"controller,omitempty"`
	path       string
}

// HostID is how a journal knows a host again: the SSH address it was reached at,
// and what the host says it is (machine-id and network namespace), which stays
// the same under another name or address for it.
type HostID struct {
	Addr string `json:"addr,omitempty"`
	ID   string `json:"id,omitempty"`
}

// Same says whether a and b are one host: by identity when both know theirs (an
// address can name another machine later, and one machine has several), else by
// address.
func (a HostID) Same(b HostID) bool {
	if a.ID != "" && b.ID != "" {
		return a.ID == b.ID
	}
	return a.Addr != "" && a.Addr == b.Addr
}

// SetApplied records st as what the run left its device as, replacing an earlier
// record of the device.
func (j *Journal) SetApplied(st *State) {
	for i, a := range j.Applied {
		if a.Host == st.Host && a.Dev == st.Dev {
			j.Applied[i] = st
			return
		}
	}
	j.Applied = append(j.Applied, st)
}

// AppliedOf is what the run left host's dev as, nil when the journal does not say
// (an older journal, or a run killed before its read-back was written).
func (j *Journal) AppliedOf(host, dev string) *State {
	for _, a := range j.Applied {
		if a.Host == host && a.Dev == dev {
			return a
		}
	}
	return nil
}

// Keep drops from the journal every device and every host's sysctls that keep does
// not want, then rewrites it, or removes it when nothing is left: what restore has
// settled is not retried, nor makes a later run refuse.
func (j *Journal) Keep(keepDev func(st *State) bool, keepSysctls func(host string) bool) error {
	var states, applied []*State
	for _, st := range j.States {
		if keepDev(st) {
			states = append(states, st)
			if a := j.AppliedOf(st.Host, st.Dev); a != nil {
				applied = append(applied, a)
			}
		}
	}
	var sv, sa []SysctlState
	for _, s := range j.Sysctls {
		if keepSysctls(s.Host) {
			sv = append(sv, s)
		}
	}
	for _, s := range j.SysctlsApplied {
		if keepSysctls(s.Host) {
			sa = append(sa, s)
		}
	}
	j.States, j.Applied, j.Sysctls, j.SysctlsApplied = states, applied, sv, sa
	if len(j.States) == 0 && len(j.Sysctls) == 0 {
		return j.Remove()
	}
	return j.Save(filepath.Dir(j.path))
}

// NewJournal starts a journal of this process for setup, from the inventory at path.
func NewJournal(setup, inventoryPath string) *Journal {
	hn, _ := os.Hostname()
	return &Journal{Version: journalVersion, PID: os.Getpid(), Created: time.Now(), Setup: setup, Inventory: inventoryPath,
		Hosts: map[string]*inventory.Host{}, Identities: map[string]HostID{}, Controller: hn}
}

// JournalDir is where journals live: $XDG_STATE_HOME/bloatbench/journal, or
// ~/.local/state/bloatbench/journal. It is "" when neither XDG_STATE_HOME nor the
// home directory is known: FindJournalDir says why, and Save, Journals and the
// device locks refuse a "" folder with that reason rather than use the working
// directory, where a later restore would not look.
func JournalDir() string {
	dir, _ := FindJournalDir()
	return dir
}

// FindJournalDir is JournalDir, or an error naming XDG_STATE_HOME and HOME.
func FindJournalDir() (string, error) {
	if base := os.Getenv("XDG_STATE_HOME"); base != "" {
		return filepath.Join(base, "bloatbench", "journal"), nil
	}
	home, err := inventory.HomeDir()
	if err != nil {
		return "", fmt.Errorf("find the journal folder: XDG_STATE_HOME is not set and %w; or set XDG_STATE_HOME", err)
	}
	return filepath.Join(home, ".local", "state", "bloatbench", "journal"), nil
}

// checkJournalDir refuses an empty journal folder (JournalDir when it found none).
func checkJournalDir(dir string) error {
	if dir != "" {
		return nil
	}
	if _, err := FindJournalDir(); err != nil {
		return err
	}
	return errors.New("no journal folder given")
}

// Save writes the journal to dir (once, creating the file) or rewrites it. Paths go in
// absolute: an inventory named as hosts.yaml names its keys relative to the directory
// the run started in, and `restore` may run from another. The data is synced before
// the rename that publishes it and the folder after, so that a crash or power cut
// just after a host was changed leaves the journal, not an empty file or none.
func (j *Journal) Save(dir string) error {
	if j.path == "" {
		if err := checkJournalDir(dir); err != nil {
			return err
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("journal folder %s: %w", dir, err)
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return fmt.Errorf("create journal folder: %w", err)
		}
		j.path = filepath.Join(abs, fmt.Sprintf("%s-%d.json", j.Created.UTC().Format("20060102T150405.000000"), j.PID))
	}
	out, err := j.absolute()
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	if err := writeSynced(j.path, b); err != nil {
		return fmt.Errorf("write journal %s (is the disk full?): %w", j.path, err)
	}
	return nil
}

// absolute is a copy of j whose inventory, key and known_hosts paths are absolute; the
// inventory's own hosts stay as they are.
func (j *Journal) absolute() (*Journal, error) {
	c := *j
	abs := func(p string) (string, error) {
		if p == "" || filepath.IsAbs(p) {
			return p, nil
		}
		return filepath.Abs(p)
	}
	var err error
	if c.Inventory, err = abs(j.Inventory); err != nil {
		return nil, err
	}
	c.Hosts = make(map[string]*inventory.Host, len(j.Hosts))
	for name, h := range j.Hosts {
		if h == nil {
			continue
		}
		hc := *h
		if hc.IdentityFile, err = abs(h.IdentityFile); err != nil {
			return nil, fmt.Errorf("host %s: identity_file: %w", name, err)
		}
		if hc.KnownHosts, err = abs(h.KnownHosts); err != nil {
			return nil, fmt.Errorf("host %s: known_hosts: %w", name, err)
		}
		c.Hosts[name] = &hc
	}
	return &c, nil
}

// writeSynced replaces path with b: a synced temporary file beside it, renamed over
// it (renameio), then the folder synced so that the rename itself is on disk.
// Beside it, not in $TMPDIR: renameio would otherwise probe with files of its own
// in both folders whether a rename between them works.
func writeSynced(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := renameio.WriteFile(path, b, 0o600, renameio.WithTempDir(dir)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Remove deletes the journal: its hosts are as they were.
func (j *Journal) Remove() error {
	if j.path == "" {
		return nil
	}
	if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove journal: %w", err)
	}
	// Else a crash could bring the journal back, and restore would undo a later run.
	if err := syncDir(filepath.Dir(j.path)); err != nil {
		return fmt.Errorf("remove journal %s: sync its folder: %w", j.path, err)
	}
	return nil
}

// LoadJournal reads a journal file.
func LoadJournal(path string) (*Journal, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	if j.Version < 1 || j.Version > journalVersion {
		return nil, fmt.Errorf("journal %s: version %d is not one this bloatbench reads (1 to %d): restore with the bloatbench that wrote it", path, j.Version, journalVersion)
	}
	for _, st := range append(append([]*State(nil), j.States...), j.Applied...) {
		if st == nil {
			return nil, fmt.Errorf("journal %s: an empty state", path)
		}
		st.legacy = j.Version == 1
	}
	// The names in a journal become paths and arguments of root's commands on the
	// hosts (tee /proc/sys/KEY, ip link del dev IFB): a file edited or planted in the
	// folder would be a root script. Each is checked as when the setup first made
	// it, before anything runs.
	if err := j.validate(); err != nil {
		return nil, fmt.Errorf("journal %s: %w; bloatbench ran nothing from it (a journal bloatbench wrote passes: was it edited?)", path, err)
	}
	// Absolute, as Save writes it and as the hosts' marks name it.
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	j.path = path
	return &j, nil
}

// Journals lists the journal files in dir, oldest first (their names begin with
// the time they were made).
func Journals(dir string) ([]string, error) {
	if err := checkJournalDir(dir); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	return files, nil
}

// NewestFirst orders journals for restore: the newest first, so that on a device
// two crashed runs left, the later run's snapshot (the earlier's setup) is undone
// first and the earliest snapshot, the device as first found, is put back last.
func NewestFirst(js []*Journal) {
	sort.SliceStable(js, func(a, b int) bool {
		if !js[a].Created.Equal(js[b].Created) {
			return js[a].Created.After(js[b].Created)
		}
		return js[a].path > js[b].path
	})
}

// ErrBusy marks a bottleneck that another run, or a restore, holds.
var ErrBusy = errors.New("the bottleneck is in use")

// ErrJournalGone marks a journal removed while restore waited: its run put the hosts
// back itself.
var ErrJournalGone = errors.New("journal removed: its run restored the hosts itself")

// Holder is who holds a bottleneck, written into its lock file for whoever is refused.
type Holder struct {
	PID      int       `json:"pid"`
	Hostname string    `json:"hostname"` // the controller's
	Started  time.Time `json:"started"`
	What     string    `json:"what"` // "run of setup X", "restore of JOURNAL"
}

// DeviceLock holds a bottleneck (a device on a host) for this process: two runs on it
// would each snapshot the other's setup as the state to put back, and a restore while
// a run is live would pull the setup from under it. It is an flock(2) on a file next
// to the journals, so the kernel drops it when the process ends, however it ends: a
// SIGKILLed controller leaves its journal for `restore`, but no stale lock.
type DeviceLock struct {
	f    *os.File
	path string
	more []*DeviceLock // the same device's other keys (LockDeviceOf)
}

// LockDeviceOf takes the locks of device dev on the host known as id, in dir: one by
// its address, and one by its identity when it has one. A run and a restore that
// share either key meet: two inventories that reach one machine by different
// addresses by the identity, a journal from before identities by the address.
func LockDeviceOf(dir, host string, id HostID, dev, what string) (*DeviceLock, error) {
	l, err := LockDevice(dir, host, id.Addr, dev, what)
	if err != nil || id.ID == "" {
		return l, err
	}
	byID, err := LockDevice(dir, host, "id-"+id.ID, dev, what)
	if err != nil {
		l.Unlock()
		return nil, err
	}
	l.more = append(l.more, byID)
	return l, nil
}

// LockDevice takes the lock of device dev on the host whose SSH address is addr
// (named host in messages), in dir, or says who holds it (wrapping ErrBusy). The
// lock is keyed by address, not inventory name, so that two inventories naming the
// same machine differently still meet.
func LockDevice(dir, host, addr, dev, what string) (*DeviceLock, error) {
	if err := checkJournalDir(dir); err != nil {
		return nil, fmt.Errorf("host %s: lock %s: %w", host, dev, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("host %s: lock %s: create %s: %w", host, dev, dir, err)
	}
	path := filepath.Join(dir, lockName(addr, dev))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host %s: lock %s: %w", host, dev, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		b, _ := io.ReadAll(f)
		f.Close()
		var h Holder
		who := "a process that has not yet written who it is (it is just starting)"
		if json.Unmarshal(b, &h) == nil && h.PID != 0 {
			who = fmt.Sprintf("bloatbench pid %d on controller %s since %s (%s)", h.PID, h.Hostname, h.Started.Format("2006-01-02 15:04:05 MST"), h.What)
		}
		return nil, fmt.Errorf("host %s (%s): device %s: %w: held by %s. Two runs on one bottleneck would each take the other's setup for the state to put back, so this one does not touch it: wait for that one to end, or stop it (Ctrl-C, or kill that pid there); the lock goes with its process (lock file %s)",
			host, addr, dev, ErrBusy, who, path)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("host %s: lock %s: flock %s: %w", host, dev, path, err)
	}
	hn, _ := os.Hostname()
	b, _ := json.Marshal(Holder{PID: os.Getpid(), Hostname: hn, Started: time.Now(), What: what})
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(b, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("host %s: lock %s: write %s: %w", host, dev, path, err)
	}
	return &DeviceLock{f: f, path: path}, nil
}

// lockName is the lock file of a device on a host: readable, and one name per
// (address, device) since every other byte is escaped.
func lockName(addr, dev string) string {
	esc := func(s string) string {
		var b strings.Builder
		for _, c := range []byte(s) {
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	return esc(dev) + "@" + esc(addr) + ".lock"
}

// Unlock lets the device go. The file stays: removing it would let a process that
// opened it just before lock the deleted file while a third locks a new one.
func (l *DeviceLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	// A child this process is forking at that moment holds a copy of the
	// descriptor, and with it the lock, until it execs (close-on-exec drops it
	// there): the next lock of this process (a batch's next run, a restore after
	// a refused run) would find the device busy. A fork holds syscall.ForkLock
	// until its child has exec'd, so taking it waits any such copy out.
	syscall.ForkLock.Lock()
	//lint:ignore SA2001 the wait for the lock is the point
	syscall.ForkLock.Unlock()
	for _, m := range l.more {
		if merr := m.Unlock(); err == nil {
			err = merr
		}
	}
	l.more = nil
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}

// LockForRestore takes the locks of st's device for `bloatbench restore`, next to the
// journal, by the address the host resolves to now and by the identity the journal
// recorded, and checks the journal is still there once it holds them (a run that
// ended meanwhile removes its journal after putting the hosts back).
func (j *Journal) LockForRestore(st *State, addr string) (*DeviceLock, error) {
	id := HostID{Addr: addr, ID: j.Identities[st.Host].ID}
	l, err := LockDeviceOf(filepath.Dir(j.path), st.Host, id, st.Dev, "restore of "+j.path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(j.path); errors.Is(err, os.ErrNotExist) {
		l.Unlock()
		return nil, fmt.Errorf("journal %s: %w", j.path, ErrJournalGone)
	}
	return l, nil
}
