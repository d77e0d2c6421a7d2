package tcrate

import "testing"

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{
		{"100mbit", 100e6}, {"1.5gbit", 1.5e9}, {"30Mbit", 30e6}, {"1234Kbit", 1234e3},
		{"12500kbps", 100e6}, {"1mibit", 1 << 20}, {"800bit", 800}, {"10bps", 80},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "100", "mbit", "0mbit", "-1mbit", "1..2mbit", "10 mbit", "10furlongs", "1e400mbit"} {
		if v, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, v)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("100mbit")
	f.Add("1.5GBps")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := Parse(s); err == nil && !(v > 0) {
			t.Fatalf("Parse(%q) = %v without an error", s, v)
		}
	})
}
