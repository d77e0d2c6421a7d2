package qdisc

import (
	"context"
	"fmt"
	"maps"
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

// ApplySysctls sets the setup's sysctls on a host and reads them back.
func (s *Setup) ApplySysctls(ctx context.Context, r Runner, host string) ([]string, error) {
	done, err := run(ctx, r, host, s.SysctlOps())
	if err != nil {
		return done, fmt.Errorf("host %s: apply setup %s: %w", host, s.Name, err)
	}
	for _, k := range sysctlKeys(s.Sysctls) {
		v, err := readSysctl(ctx, r, host, k)
		if err != nil {
			return done, err
		}
		if want := strings.Join(strings.Fields(s.Sysctls[k]), " "); v != want {
			return done, fmt.Errorf("host %s: setup %s: the kernel reads back %s = %q, not %q", host, s.Name, k, v, want)
		}
	}
	return done, nil
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
