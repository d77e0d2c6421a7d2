package qdisc

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/bloatbench/bloatbench/remote"
)

// SysctlState is one sysctl's value on a host, as found before a setup set it.
type SysctlState struct {
	Host  string `json:"host"`
	Key   string `json:"key"`
	Value string `json:"value"`
}

// sysctlPath is the /proc/sys file of a sysctl name. Names are checked (sysctlKeyRE)
// before they get here: dots only separate words.
func sysctlPath(key string) string { return "/proc/sys/" + strings.ReplaceAll(key, ".", "/") }

// readSysctl reads one value, with the kernel's tabs between words made single spaces
// (tcp_rmem prints "4096\t131072\t6291456"; a setup writes it with spaces).
func readSysctl(ctx context.Context, r Runner, host, key string) (string, error) {
	out, err := r.Output(ctx, remote.Command("cat", sysctlPath(key)), nil)
	if err != nil {
		return "", fmt.Errorf("host %s: read sysctl %s: %w", host, key, err)
	}
	return strings.Join(strings.Fields(string(out)), " "), nil
}

// sysctlKeys are a setup's sysctl names in order, so that journals and commands
// come out the same each time.
func sysctlKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// SnapshotSysctls reads the setup's sysctls on a host before it changes them.
func (s *Setup) SnapshotSysctls(ctx context.Context, r Runner, host string) ([]SysctlState, error) {
	var out []SysctlState
	for _, k := range sysctlKeys(s.Sysctls) {
		v, err := readSysctl(ctx, r, host, k)
		if err != nil {
			return nil, fmt.Errorf("%w (setup %s sets it: is the name right for this kernel?)", err, s.Name)
		}
		out = append(out, SysctlState{Host: host, Key: k, Value: v})
	}
	return out, nil
}

// SysctlOps set the setup's sysctls.
func (s *Setup) SysctlOps() []Op {
	var ops []Op
	for _, k := range sysctlKeys(s.Sysctls) {
		ops = append(ops, Op{Argv: []string{"tee", sysctlPath(k)}, Stdin: s.Sysctls[k]})
	}
	return ops
}

// ApplySysctls sets the setup's sysctls on a host and reads them back. An
// optional sysctl (OptionalSysctls) the kernel refuses is left as it was and
// named in refused, a warning for the run; any other failure is an error.
func (s *Setup) ApplySysctls(ctx context.Context, r Runner, host string) (done, refused []string, err error) {
	var ops []Op
	var optional []string
	for _, k := range sysctlKeys(s.Sysctls) {
		if _, ok := s.OptionalSysctls[k]; ok {
			optional = append(optional, k)
			continue
		}
		ops = append(ops, Op{Argv: []string{"tee", sysctlPath(k)}, Stdin: s.Sysctls[k]})
	}
	done, err = run(ctx, r, host, ops)
	if err != nil {
		return done, nil, fmt.Errorf("host %s: apply setup %s: %w", host, s.Name, err)
	}
	left := map[string]bool{}
	for _, k := range optional {
		d, err := run(ctx, r, host, []Op{{Argv: []string{"tee", sysctlPath(k)}, Stdin: s.Sysctls[k]}})
		done = append(done, d...)
		if err != nil {
			if ctx.Err() != nil {
				return done, refused, fmt.Errorf("host %s: apply setup %s: %w", host, s.Name, err)
			}
			left[k] = true
			refused = append(refused, fmt.Sprintf("host %s: %s = %s, which %s would like, was refused (%v): the run goes on without it", host, k, s.Sysctls[k], s.OptionalSysctls[k], err))
		}
	}
	for _, k := range sysctlKeys(s.Sysctls) {
		if left[k] {
			continue
		}
		v, err := readSysctl(ctx, r, host, k)
		if err != nil {
			return done, refused, err
		}
		if want := strings.Join(strings.Fields(s.Sysctls[k]), " "); v != want {
			return done, refused, fmt.Errorf("host %s: setup %s: the kernel reads back %s = %q, not %q", host, s.Name, k, v, want)
		}
	}
	return done, refused, nil
}

// RestoreSysctls writes back the values found before, those of one host, and checks
// them. A value that is back already is not written again.
func RestoreSysctls(ctx context.Context, r Runner, host string, before []SysctlState) error {
	for _, st := range before {
		if st.Host != host {
			continue
		}
		v, err := readSysctl(ctx, r, host, st.Key)
		if err == nil && v == st.Value {
			continue
		}
		if _, err := run(ctx, r, host, []Op{{Argv: []string{"tee", sysctlPath(st.Key)}, Stdin: st.Value}}); err != nil {
			return fmt.Errorf("host %s: restore sysctl %s: %w", host, st.Key, err)
		}
		if v, err := readSysctl(ctx, r, host, st.Key); err != nil || v != st.Value {
			return fmt.Errorf("host %s: sysctl %s was not put back: it reads %q, was %q (%v)", host, st.Key, v, st.Value, err)
		}
	}
	return nil
}

// AppliedSysctls are the values the setup sets on host, as the kernel reads them back
// (words single-spaced), for the journal: restore puts back only a sysctl that still
// has them.
func (s *Setup) AppliedSysctls(host string) []SysctlState {
	var out []SysctlState
	for _, k := range sysctlKeys(s.Sysctls) {
		out = append(out, SysctlState{Host: host, Key: k, Value: strings.Join(strings.Fields(s.Sysctls[k]), " ")})
	}
	return out
}

// SysctlOutcome is what RestoreSysctlsJournaled did with each of a host's sysctls.
type SysctlOutcome struct {
	Restored, AsFound []string // keys
	// Changed are "key = now (the run set X, found Y)" for the sysctls left alone.
	Changed []string
}

// PlanSysctl decides as PlanRestore does for one sysctl: found and now are its values
// before the run and now, applied what the run set ("" when the journal does not say).
func PlanSysctl(found, applied, now string) Verdict {
	switch {
	case now == found:
		return AsFound
	case applied == "":
		return Unknown
	case now != applied:
		return Changed
	}
	return PutBack
}

// RestoreSysctlsJournaled puts back the sysctls a journal found on host that are still
// as its run set them (applied; all of them when force is set, or when the journal
// does not say), and leaves alone, and names, those changed since. The error wraps
// ErrChangedSince when some were left; a read or write that fails stops it.
func RestoreSysctlsJournaled(ctx context.Context, r Runner, host string, before, applied []SysctlState, force bool) (SysctlOutcome, error) {
	var out SysctlOutcome
	set := map[string]string{}
	for _, a := range applied {
		if a.Host == host {
			set[a.Key] = a.Value
		}
	}
	for _, st := range before {
		if st.Host != host {
			continue
		}
		now, err := readSysctl(ctx, r, host, st.Key)
		if err != nil {
			return out, err
		}
		switch PlanSysctl(st.Value, set[st.Key], now) {
		case AsFound:
			out.AsFound = append(out.AsFound, st.Key)
			continue
		case Changed:
			if !force {
				out.Changed = append(out.Changed, fmt.Sprintf("%s = %q (the run set %q, found %q)", st.Key, now, set[st.Key], st.Value))
				continue
			}
		}
		if err := RestoreSysctls(ctx, r, host, []SysctlState{st}); err != nil {
			return out, err
		}
		out.Restored = append(out.Restored, st.Key)
	}
	if len(out.Changed) > 0 {
		return out, fmt.Errorf("host %s: sysctls %w, and not as found either, so bloatbench leaves them alone: %s", host, ErrChangedSince, strings.Join(out.Changed, "; "))
	}
	return out, nil
}

// identityScript prints who a host is: its machine-id, and its network namespace
// (two lab hosts in namespaces of one machine share the machine-id, and are told
// apart by it). Either may be missing on an odd system; the rest still says much.
// A machine without a machine-id (an empty /etc/machine-id, as images made for a
// first boot have) is named by its boot_id instead: the initial network namespace
// of every kernel has the same inode, so two such VMs would be one host, and a run
// on both would find its own lock on the other's device.
const identityScript = `id=$(cat /etc/machine-id 2>/dev/null)
[ -n "$id" ] || id=$(cat /var/lib/dbus/machine-id 2>/dev/null)
[ -n "$id" ] || { b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null) && [ -n "$b" ] && id="boot-$b"; }
echo "$id"
readlink /proc/self/ns/net 2>/dev/null
true`

// IdentityHere is identityScript's identity of the host this process runs on, read
// by the process itself: an agent tells it in its hello, with no command run.
func IdentityHere() (string, error) {
	return identityFrom("/etc/machine-id", "/var/lib/dbus/machine-id", "/proc/sys/kernel/random/boot_id")
}

// identityFrom is IdentityHere with the files it reads named (tests move them).
func identityFrom(machineID, dbusID, bootID string) (string, error) {
	first := func(path string) string {
		b, _ := os.ReadFile(path)
		return strings.TrimSpace(string(b))
	}
	id := first(machineID)
	if id == "" {
		id = first(dbusID)
	}
	if id == "" {
		if b := first(bootID); b != "" {
			id = "boot-" + b
		}
	}
	ns, _ := os.Readlink("/proc/self/ns/net")
	s := strings.Join(strings.Fields(id+" "+ns), " ")
	if s == "" {
		return "", fmt.Errorf("the host has no /etc/machine-id and no /proc/self/ns/net")
	}
	return s, nil
}

// HostIdentity is what names a host whatever the inventory calls it or the address
// it is reached at: "MACHINE-ID net:[INODE]". "" with an error when it says nothing.
func HostIdentity(ctx context.Context, r Runner) (string, error) {
	out, err := r.Output(ctx, remote.Command("sh", "-c", identityScript), nil)
	if err != nil {
		return "", fmt.Errorf("read the host's machine-id: %w", err)
	}
	id := strings.Join(strings.Fields(string(out)), " ")
	if id == "" {
		return "", fmt.Errorf("the host has no /etc/machine-id and no /proc/self/ns/net")
	}
	return id, nil
}
