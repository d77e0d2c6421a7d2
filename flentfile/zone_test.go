package flentfile

import (
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// A sub-series "PARENT::KEY" of a series in the file is a row of its own, never a
// flow, whatever its name looks like and whether or not it has raw values.
func TestClassifySubSeries(t *testing.T) {
	f := file{
		Results: map[string][]*float64{
			"TCP upload BE": nil, "TCP upload BE::tcp_cwnd": nil, "TCP upload BE::tcp_rtt_var": nil,
			"TCP upload::1": nil, "TCP upload::1::tcp_cwnd": nil, "TCP download": nil, "TCP upload sum": nil,
			"TCP upload BE2 10.9.0.3": nil, "TCP upload::x::y": nil,
		},
		RawValues: map[string][]map[string]any{
			"TCP upload BE": {}, "TCP upload BE::tcp_cwnd": {{"t": 1.0, "val": 10.0}}, "TCP upload::1": {},
		},
	}
	for name, want := range map[string]string{
		"TCP upload BE":              datafile.KindTCP + " upload",
		"TCP upload BE::tcp_cwnd":    KindFlent, // raw values of its own (flent 1.0)
		"TCP upload BE::tcp_rtt_var": KindFlent, // grid only
		"TCP upload::1":              datafile.KindTCP + " upload",
		"TCP upload::1::tcp_cwnd":    KindFlent,
		"TCP download":               datafile.KindTCP + " download",
		"TCP upload sum":             kindSum + " upload",
		"TCP upload BE2 10.9.0.3":    datafile.KindTCP + " upload",
		"TCP upload::x::y":           KindFlent, // no parent, and no flow's name
	} {
		kind, dir := classify(name, f)
		got := kind
		if dir != "" {
			got += " " + dir
		}
		if got != want {
			t.Errorf("classify(%q) = %q, want %q", name, got, want)
		}
	}
}
