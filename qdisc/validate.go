package qdisc

import (
	"fmt"
	"path/filepath"
	"regexp"

	"github.com/bloatbench/bloatbench/inventory"
)

// What a journal may hold, as the setup and the snapshot script first made it. Every
// value that becomes part of a path (sysctl keys, device and queue names) or an
// argument of a command that deletes something (the IFB) is checked against these
// again when a journal is read back: quoting keeps a name one word, but only these
// checks keep "../../etc/shadow" from being a sysctl key, or eth0 from being the IFB
// that restore deletes.
var (
	queueRE    = regexp.MustCompile(`^tx-[0-9]{1,5}$`)
	numberRE   = regexp.MustCompile(`^[0-9]{1,20}$`)
	maskRE     = regexp.MustCompile(`^[0-9a-f]{1,8}(,[0-9a-f]{1,8})*$`)
	signedRE   = regexp.MustCompile(`^-?[0-9]{1,10}$`)
	tcIDRE     = regexp.MustCompile(`^[0-9a-f]{1,8}:[0-9a-f]{0,8}$`)
	tcSizeRE   = regexp.MustCompile(`^[0-9]{1,20}(\.[0-9]+)?[A-Za-z]{0,4}$`) // 30Mbit, 1600b, 2Kb
	featureRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	linkTypeRE = regexp.MustCompile(`^[a-z]{1,16}$`)
)

// validate checks every name and value in the journal that restore would put into
// a command.
func (j *Journal) validate() error {
	for name, h := range j.Hosts {
		// As the inventory checks them: the journal connects to these on its own.
		if err := inventory.CheckHostName(name); err != nil {
			return fmt.Errorf("host %q: %w", name, err)
		}
		if h == nil {
			return fmt.Errorf("host %s: empty", name)
		}
		if _, _, _, err := inventory.SplitSSH(h.SSH); err != nil {
			return fmt.Errorf("host %s: ssh: %w", name, err)
		}
		// Run as root through sudo when the login is not root: only a clean absolute path.
		if h.AgentPath != "" && (!filepath.IsAbs(h.AgentPath) || filepath.Clean(h.AgentPath) != h.AgentPath) {
			return fmt.Errorf("host %s: agent_path %q is not a clean absolute path", name, h.AgentPath)
		}
	}
	for i, st := range j.States {
		if j.Hosts[st.Host] == nil {
			return fmt.Errorf("state %d: host %q is not among the journal's hosts", i+1, st.Host)
		}
		if err := st.validate(); err != nil {
			return fmt.Errorf("state %d (%s:%s): %w", i+1, st.Host, st.Dev, err)
		}
	}
	for i, st := range j.Applied {
		if err := st.validate(); err != nil {
			return fmt.Errorf("applied state %d (%s:%s): %w", i+1, st.Host, st.Dev, err)
		}
	}
	for _, sv := range append(append([]SysctlState(nil), j.Sysctls...), j.SysctlsApplied...) {
		if err := validSysctl(sv); err != nil {
			return err
		}
	}
	for _, sv := range j.Sysctls {
		if j.Hosts[sv.Host] == nil {
			return fmt.Errorf("sysctl %s: host %q is not among the journal's hosts", sv.Key, sv.Host)
		}
	}
	return nil
}

// validSysctl applies the rule a setup's sysctls pass (Resolve) to one read back.
func validSysctl(sv SysctlState) error {
	if sv.Host == "" {
		return fmt.Errorf("sysctl %q: no host", sv.Key)
	}
	if !sysctlKeyRE.MatchString(sv.Key) {
		return fmt.Errorf("host %s: %q is not a sysctl name (net.ipv4.tcp_ecn)", sv.Host, sv.Key)
	}
	if !sysctlValueRE.MatchString(sv.Value) {
		return fmt.Errorf("host %s: sysctl %s: %q is not a plain value", sv.Host, sv.Key, sv.Value)
	}
	return nil
}

// validate checks a device state's names and values.
func (st *State) validate() error {
	if st.Host == "" {
		return fmt.Errorf("no host")
	}
	if err := inventory.CheckDevName(st.Dev); err != nil {
		return err
	}
	if st.IFB != nil && st.IFB.Name != IFBName(st.Dev) {
		// Restore deletes the IFB it finds: only the one a setup makes for this device.
		return fmt.Errorf("IFB %q is not %s's (%s)", st.IFB.Name, st.Dev, IFBName(st.Dev))
	}
	for _, b := range st.BQL {
		if !queueRE.MatchString(b.Queue) {
			return fmt.Errorf("%q is not a tx queue name (tx-N)", b.Queue)
		}
		if !numberRE.MatchString(b.LimitMax) || !numberRE.MatchString(b.LimitMin) {
			return fmt.Errorf("queue %s: BQL limits %q, %q are not numbers", b.Queue, b.LimitMax, b.LimitMin)
		}
	}
	for _, x := range st.XPS {
		if !queueRE.MatchString(x.Queue) {
			return fmt.Errorf("%q is not a tx queue name (tx-N)", x.Queue)
		}
		if len(x.CPUs) > 1200 || !maskRE.MatchString(x.CPUs) {
			return fmt.Errorf("queue %s: XPS mask %q is not a CPU mask (hex groups joined by commas)", x.Queue, x.CPUs)
		}
	}
	for k, v := range st.Offloads {
		if !contains(offloads, k) || v != "on" && v != "off" {
			return fmt.Errorf("offload %q = %q: the offloads are gso, tso, gro, each on or off", k, v)
		}
	}
	for k, v := range st.Features {
		if w := wanted(v); !featureRE.MatchString(k) || w != "on" && w != "off" {
			return fmt.Errorf("ethtool feature %q = %q: not a feature name with on or off", k, v)
		}
	}
	for k, v := range st.Channels {
		if !contains(channelKinds, k) || !numberRE.MatchString(v) {
			return fmt.Errorf("channels %q = %q: the channels are rx, tx, other, combined, each a count", k, v)
		}
	}
	qdiscs := st.Qdiscs
	if st.IFB != nil {
		qdiscs = append(append([]TCQdisc(nil), qdiscs...), st.IFB.Qdiscs...)
	}
	for _, q := range qdiscs {
		if !kindRE.MatchString(q.Kind) {
			return fmt.Errorf("qdisc kind %q", q.Kind)
		}
		if !tcIDRE.MatchString(q.Handle) || q.Parent != "" && !tcIDRE.MatchString(q.Parent) {
			return fmt.Errorf("qdisc %s: handle %q or parent %q is not a tc id (1:, 1:10)", q.Kind, q.Handle, q.Parent)
		}
	}
	for _, c := range st.Classes {
		if !tcIDRE.MatchString(c.ClassID) || c.Parent != "root" && !tcIDRE.MatchString(c.Parent) {
			return fmt.Errorf("class %q (parent %q) is not a tc id (1:10)", c.ClassID, c.Parent)
		}
		if !kindRE.MatchString(c.Kind) {
			return fmt.Errorf("class %s: kind %q", c.ClassID, c.Kind)
		}
		for _, v := range []string{c.Rate, c.Ceil, c.Burst, c.Cburst} {
			if !tcSizeRE.MatchString(v) {
				return fmt.Errorf("class %s: %q is not a rate or size as tc prints them", c.ClassID, v)
			}
		}
		if c.MPU != "" && !tcSizeRE.MatchString(c.MPU) {
			return fmt.Errorf("class %s: mpu %q is not a size", c.ClassID, c.MPU)
		}
		for _, v := range []string{c.Prio, c.Quantum} {
			if v != "" && !numberRE.MatchString(v) {
				return fmt.Errorf("class %s: %q is not a number", c.ClassID, v)
			}
		}
		if c.Overhead != "" && !signedRE.MatchString(c.Overhead) || c.Linklayer != "" && !linkTypeRE.MatchString(c.Linklayer) {
			return fmt.Errorf("class %s: overhead %q or linklayer %q", c.ClassID, c.Overhead, c.Linklayer)
		}
	}
	return nil
}
