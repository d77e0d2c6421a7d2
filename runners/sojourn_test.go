package runners

import (
	"strings"
	"testing"
)

// The loopback device has no qdisc (noqueue) wherever it is up: a tracer on it
// would trace nothing, unless the run's setup gives it one.
func TestNoQueue(t *testing.T) {
	qdiscs, err := rootQdiscs()
	if err != nil {
		t.Fatal(err)
	}
	if qdiscs["lo"] != "noqueue" {
		t.Fatalf("lo's root qdisc is %q, want noqueue (links: %v)", qdiscs["lo"], qdiscs)
	}
	for _, c := range []struct {
		name string
		devs []Dev
		idle bool
	}{
		{"noqueue, left so", []Dev{{Name: "lo"}}, true},
		{"noqueue, changed by the setup", []Dev{{Name: "lo", Changed: true}}, false},
		{"a device the kernel does not list", []Dev{{Name: "lo"}, {Name: "bbnosuch0"}}, false},
		{"no device", nil, false},
	} {
		why := noQueue(JobSpec{Devs: c.devs})
		if (why != "") != c.idle {
			t.Errorf("%s: noQueue said %q, want idle %v", c.name, why, c.idle)
		}
		if c.idle && !strings.Contains(why, "[lo]") {
			t.Errorf("%s: %q does not name the device", c.name, why)
		}
	}
}
