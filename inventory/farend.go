package inventory

import (
	"fmt"
	"net"
	"strings"
)

// FarEnd is a run as flent has it: this machine is the client, and the host that
// -H names is the far end, the server, reached over SSH as ~/.ssh/config says.
type FarEnd struct {
	// SSH is what -H gave: [user@]host[:port] or an alias from ~/.ssh/config.
	SSH string
	// TestIP is the far end's address on the test network, ClientTestIP this
	// machine's (the address its packets to TestIP leave from).
	TestIP, ClientTestIP string
	// Bottlenecks are devices a setup changes and the run samples, as
	// HOST:DEV with HOST "client" (or "local") or "server" (or the SSH value).
	Bottlenecks []string
}

// The hosts of a far-end inventory, by their roles.
const (
	FarEndClient = "client"
	FarEndServer = "server"
)

// CheckFarEnd checks what the user gave for a far-end run (-H, --test-ip if
// given, --bottleneck) before anything is looked up or dialled: its errors are
// usage errors, naming the flag.
func CheckFarEnd(f FarEnd) error {
	_, err := farEndBottlenecks(f)
	if err == nil && f.TestIP != "" && net.ParseIP(f.TestIP) == nil {
		err = fmt.Errorf("--test-ip %q is not an IP address", f.TestIP)
	}
	return err
}

func farEndBottlenecks(f FarEnd) ([]Bottleneck, error) {
	if f.SSH == "" || f.SSH == LocalSSH {
		return nil, fmt.Errorf("-H %q: name the far end (user@host, an address or an alias from ~/.ssh/config)", f.SSH)
	}
	if _, _, _, err := SplitSSH(f.SSH); err != nil {
		return nil, fmt.Errorf("-H: %w", err)
	}
	var bs []Bottleneck
	for _, b := range f.Bottlenecks {
		host, dev, ok := strings.Cut(b, ":")
		switch host {
		case FarEndClient, LocalSSH:
			host = FarEndClient
		case FarEndServer, f.SSH:
			host = FarEndServer
		default:
			ok = false
		}
		if !ok || dev == "" {
			return nil, fmt.Errorf("--bottleneck %q: write HOST:DEV, HOST client (this machine) or server (%s), e.g. server:eth1", b, f.SSH)
		}
		if err := CheckDevName(dev); err != nil {
			return nil, fmt.Errorf("--bottleneck %q: %w", b, err)
		}
		bs = append(bs, Bottleneck{Host: host, Dev: dev})
	}
	return bs, nil
}

// ForFarEnd is the inventory of a far-end run, checked as a file's would be; its
// errors name the flag they come from.
func ForFarEnd(f FarEnd) (*Inventory, error) {
	bs, err := farEndBottlenecks(f)
	if err != nil {
		return nil, err
	}
	for flag, ip := range map[string]string{"--test-ip": f.TestIP, "the client's test address": f.ClientTestIP} {
		if net.ParseIP(ip) == nil {
			return nil, fmt.Errorf("%s %q is not an IP address", flag, ip)
		}
	}
	inv := &Inventory{
		Path:   "-H " + f.SSH,
		Client: FarEndClient, Server: FarEndServer,
		Hosts: map[string]*Host{
			FarEndClient: {SSH: LocalSSH, TestIP: f.ClientTestIP},
			FarEndServer: {SSH: f.SSH, TestIP: f.TestIP},
		},
		Bottleneck: bs,
	}
	if err := inv.check(map[string]int{}); err != nil {
		return nil, err
	}
	return inv, nil
}
