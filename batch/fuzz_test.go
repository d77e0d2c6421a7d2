package batch

import (
	"path/filepath"
	"testing"
)

// A batch file is whatever a user wrote: reading one never panics, and one that
// reads makes runs with distinct names, each of a known test.
func FuzzParse(f *testing.F) {
	f.Add([]byte("inventory: hosts.yaml\ntests:\n  - test: tcp_ndown\n    params: {download_streams: [4, 128], cc: [cubic, bbr]}\nsetups: [small]\nrepetitions: 2\n"))
	f.Add([]byte("inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nthresholds: [{metric: Ping loaded median, worse: +10%}]\nbefore: [{host: server, run: sysctl -w x=1}]\n"))
	f.Add([]byte("inventory: hosts.yaml\nlength: 1e308\ntests: [{test: tcp_4down}]\n"))
	f.Add([]byte("inventory: hosts.yaml\ntests: [{test: tcp_nup, params: {upload_streams: {a: b}}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Parse(filepath.Join("testdata", "fuzz.yaml"), data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, r := range b.Runs {
			if seen[r.ID] || r.ID == "" {
				t.Fatalf("run name %q twice or empty", r.ID)
			}
			seen[r.ID] = true
		}
		if b.Length <= 0 || b.Step <= 0 || b.Step > b.Length {
			t.Fatalf("length %v, step %v accepted", b.Length, b.Step)
		}
	})
}
