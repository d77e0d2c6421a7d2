package flentfile

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// flent 2.1.1's util.parse_date steps an hour at a time from a time without a
// zone towards the earliest raw timestamp until within 1800 s of it; zoneHours
// computes where that loop stops.
func TestZoneHours(t *testing.T) {
	at := time.Date(2015, 7, 12, 23, 18, 8, 117118000, time.UTC) // naive, read as UTC
	ts := float64(at.Unix())                                     // flent's timegm: whole seconds
	for _, tc := range []struct {
		name string
		minT float64
		want int
	}{
		{"a raw value at the time", ts, 0},
		{"16 s after, as T0 is after TIME", ts + 16.3, 0},
		{"CEST: the clock 2 h ahead of the raw values", ts - 2*3600 + 16.3, -2},
		{"EST: 5 h behind", ts + 5*3600 + 16.3, 5},
		{"1800 s before: within, no hour", ts - 1800, 0},
		{"1800 s after: within, no hour", ts + 1800, 0},
		{"1801 s before: one hour", ts - 1801, -1},
		{"1801 s after: one hour", ts + 1801, 1},
		{"IST: 5:30 ahead, 5 whole hours", ts - 5.5*3600 + 16.3, -5},
		{"5:30 ahead to the second: 5 hours leaves 1800 s", ts - 5.5*3600, -5},
		{"a week after", ts + 7*24*3600, 7 * 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := zoneHours(at, tc.minT)
			if err != nil || got != tc.want {
				t.Errorf("zoneHours = %d, %v; want %d", got, err, tc.want)
			}
			// flent's own loop, as it is.
			hours, step := 0, 1.0
			if !(ts < tc.minT) {
				step = -1
			}
			for x := ts; abs(x-tc.minT) > 1800; x += 3600 * step {
				hours -= int(step)
			}
			if -hours != tc.want {
				t.Errorf("flent's loop gives %d hours, the case says %d", -hours, tc.want)
			}
		})
	}
	if _, err := zoneHours(at, ts+200*366*24*3600); err == nil {
		t.Error("a time 200 years from the raw values: no error")
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TIME and T0 are moved by the zone flent guesses from the first of them without
// one; a time with a Z stays; a file without raw timestamps keeps its times.
func TestZoneTimes(t *testing.T) {
	utc := func(s string) time.Time {
		t.Helper()
		at, err := parseTime(s)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	// The raw values start when the run did, 2026-01-02 10:00:16 UTC.
	raw := map[string][]map[string]any{"Ping (ms) ICMP": {{"t": float64(time.Date(2026, 1, 2, 10, 0, 16, 0, time.UTC).Unix())}, {"val": 1.0}}}
	for _, tc := range []struct {
		name             string
		md               map[string]any
		raw              map[string][]map[string]any
		wantT0, wantTime string
	}{
		{"both UTC", map[string]any{"TIME": "2026-01-02T10:00:00.5Z", "T0": "2026-01-02T10:00:16.5Z"}, raw,
			"2026-01-02T10:00:16.5Z", "2026-01-02T10:00:00.5Z"},
		{"both local, 2 h ahead", map[string]any{"TIME": "2026-01-02T12:00:00.5", "T0": "2026-01-02T12:00:16.5"}, raw,
			"2026-01-02T10:00:16.5Z", "2026-01-02T10:00:00.5Z"},
		{"local T0 without TIME", map[string]any{"T0": "2026-01-02T05:00:16"}, raw,
			"2026-01-02T10:00:16Z", "2026-01-02T10:00:16Z"},
		{"local TIME, UTC T0", map[string]any{"TIME": "2026-01-02T12:00:00", "T0": "2026-01-02T10:00:16Z"}, raw,
			"2026-01-02T10:00:16Z", "2026-01-02T10:00:00Z"},
		{"no raw timestamps: as UTC", map[string]any{"TIME": "2026-01-02T12:00:00", "T0": "2026-01-02T12:00:16"}, nil,
			"2026-01-02T12:00:16Z", "2026-01-02T12:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0s, _ := tc.md["T0"].(string)
			if t0s == "" {
				t0s = tc.md["TIME"].(string)
			}
			times, _ := tc.md["TIME"].(string)
			if times == "" {
				times = t0s
			}
			t0, started, err := zoneTimes(tc.md, utc(t0s), utc(times), tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			if !t0.Equal(utc(tc.wantT0)) || !started.Equal(utc(tc.wantTime)) {
				t.Errorf("T0 %v, TIME %v; want %s, %s", t0, started, tc.wantT0, tc.wantTime)
			}
		})
	}
}

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

// Holds tells a flent file from a bloatbench one by its content, whatever the name.
func TestHolds(t *testing.T) {
	dir := t.TempDir()
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	for _, tc := range []struct {
		name string
		data []byte
		want bool
	}{
		{"flent.bb.json.gz", gz("{\n  \"metadata\": {\n    \"BATCH_NAME\": null"), true},
		{"flent.json", []byte(`{"version": 4, "x_values": []}`), true},
		{"export.flent.gz", gz(`{"metadata":{"NAME":"tcp_nup"},"version":4}`), true},
		{"run.bb.json.gz", gz(`{"type":"header","format":"bloatbench","metadata":{"t0":1}}` + "\n"), false},
		{"list.json", []byte(`[{"metadata": {}}]`), false},
		{"empty.gz", gz(""), false},
		{"garbage", []byte{0x1f, 0x8b, 0, 1, 2}, false},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := Holds(path); got != tc.want {
			t.Errorf("Holds(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if Holds(filepath.Join(dir, "missing")) {
		t.Error("Holds of a missing file")
	}
}
