package tests

import (
	"io/fs"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParse feeds test definitions to Parse and a --te KEY=VALUE to Resolve.
// Whatever the bytes: no panic, errors name the file, a definition that parses
// writes out to one that parses the same, and a plan keeps what a run relies on:
// flows numbered 1..n per direction, known directions, congestion control names
// the kernel accepts, at most MaxStreams streams, and something to run.
func FuzzParse(f *testing.F) {
	err := fs.WalkDir(files, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		f.Add(data, "download_streams", "8")
		f.Add(data, "cc", "cubic,bbr")
		f.Add(data, "upload_streams", "1025")
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	// Two groups, each within MaxStreams, more than it together.
	f.Add([]byte(`name: rrul_like
parameters:
  up: {default: "600"}
  down: {default: "600"}
streams:
  - {direction: upload, count: up}
  - {direction: download, count: down}
ping: true
`), "up", "1")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		const name = "tests/fuzz/test.yaml"
		d, err := Parse(name, data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if d.Name == "" {
			t.Fatal("a definition without a name parsed")
		}
		out, err := yaml.Marshal(d)
		if err != nil {
			t.Fatalf("a parsed definition does not encode: %v", err)
		}
		back, err := Parse(name, out)
		if err != nil {
			t.Fatalf("the definition written back does not parse: %v\n%s", err, out)
		}
		if again, _ := yaml.Marshal(back); string(again) != string(out) {
			t.Fatalf("written back and read, the definition changed:\n%s\n---\n%s", out, again)
		}
		for _, set := range []map[string]string{nil, {key: value}} {
			plan, err := d.Resolve(set)
			if err != nil {
				continue
			}
			checkPlan(t, d, plan)
		}
	})
}

func checkPlan(t *testing.T, d *Definition, plan *Plan) {
	t.Helper()
	if len(plan.Flows) == 0 && !plan.Ping {
		t.Fatal("a plan that runs nothing")
	}
	if len(plan.Flows) > MaxStreams {
		t.Fatalf("%d streams, more than MaxStreams (%d)", len(plan.Flows), MaxStreams)
	}
	next := map[string]int{Upload: 1, Download: 1}
	for _, fl := range plan.Flows {
		if fl.Direction != Upload && fl.Direction != Download {
			t.Fatalf("flow of direction %q", fl.Direction)
		}
		if fl.Index != next[fl.Direction] {
			t.Fatalf("%s is flow %d of its direction, want %d", fl.Name(), fl.Index, next[fl.Direction])
		}
		next[fl.Direction]++
		if fl.CC != "" && !validCC(fl.CC) {
			t.Fatalf("%s: congestion control %q", fl.Name(), fl.CC)
		}
	}
	for n := range d.Parameters {
		if _, ok := plan.Parameters[n]; !ok {
			t.Fatalf("parameter %s missing from the plan", n)
		}
	}
}
