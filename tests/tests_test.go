package tests

import (
	"strings"
	"testing"
)

func TestEmbeddedDefinitions(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"tcp_nup": 1, "tcp_ndown": 1, "tcp_4down": 4, "tcp_128down": 128}
	for _, d := range all {
		n, ok := want[d.Name]
		if !ok {
			continue
		}
		delete(want, d.Name)
		p, err := d.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
		if len(p.Flows) != n || !p.Ping {
			t.Errorf("%s: %d flows, ping %v; want %d and ping", d.Name, len(p.Flows), p.Ping, n)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing tests: %v", want)
	}
}

func TestResolve(t *testing.T) {
	d, err := Get("tcp_ndown")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		set     map[string]string
		flows   []string
		ccs     []string
		wantErr string
	}{
		{"default", nil, []string{"TCP download::1"}, []string{""}, ""},
		{"four", map[string]string{"download_streams": "4"},
			[]string{"TCP download::1", "TCP download::2", "TCP download::3", "TCP download::4"}, []string{"", "", "", ""}, ""},
		{"cc round robin", map[string]string{"download_streams": "3", "cc": "cubic,reno"},
			[]string{"TCP download::1", "TCP download::2", "TCP download::3"}, []string{"cubic", "reno", "cubic"}, ""},
		{"unknown key", map[string]string{"upload_streams": "4"}, nil, nil, `no parameter "upload_streams"`},
		{"not a number", map[string]string{"download_streams": "four"}, nil, nil, "whole number"},
		{"too many", map[string]string{"download_streams": "5000"}, nil, nil, "whole number"},
		{"bad cc", map[string]string{"cc": "cubic;reboot"}, nil, nil, "congestion control"},
		{"nothing", map[string]string{"download_streams": "0"}, nil, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := d.Resolve(c.set)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Flows) != len(c.flows) {
				t.Fatalf("flows %v", p.Flows)
			}
			for i, f := range p.Flows {
				if f.Name() != c.flows[i] || f.CC != c.ccs[i] {
					t.Errorf("flow %d = %s cc %q", i, f.Name(), f.CC)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"name: x\nbogus: 1\n": "field bogus not found",
		"description: y\n":    `missing key "name"`,
		"name: x\nstreams:\n  - {direction: sideways, count: n}\n":                                    "direction",
		"name: x\nstreams:\n  - {direction: upload, count: n}\n":                                      `names parameter "n"`,
		"name: x\nparameters: {n: {default: '1'}}\nstreams: [{direction: upload, count: n, cc: c}]\n": `names parameter "c"`,
	}
	for in, want := range cases {
		_, err := Parse("tests/x/test.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tests/x/test.yaml") {
			t.Errorf("%q: error %v, want %q with the file name", in, err, want)
		}
	}
}
