package tests

import (
	"io/fs"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/runners"
)

// FuzzParse feeds test definitions to Parse and a --te KEY=VALUE to Resolve.
// Whatever the bytes: no panic, errors name the file, a definition that parses
// writes out to one that parses the same, and a plan keeps what a run relies on:
// flows numbered 1..n per direction, series names unique, at most MaxStreams
// streams, and something to run.
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
jobs:
  - {name: l, kind: tcp-listen, host: server, target: server}
  - name: s
    kind: tcp-streams
    host: client
    connect: l
    params:
      flows:
        - {direction: upload, count: "${up}"}
        - {direction: download, count: "${down}"}
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
	awaited, streams := 0, 0
	next := map[string]int{"upload": 1, "download": 1}
	names := map[string]bool{}
	for _, j := range plan.Jobs {
		if !j.Background {
			awaited += len(j.Series)
		}
		for _, s := range j.Series {
			if names[s.Name] {
				t.Fatalf("series %q planned twice", s.Name)
			}
			names[s.Name] = true
			if s.Kind != datafile.KindTCP {
				continue
			}
			streams++
			if s.Flow != next[s.Direction] {
				t.Fatalf("%s is flow %d of its direction, want %d", s.Name, s.Flow, next[s.Direction])
			}
			next[s.Direction]++
		}
	}
	if awaited == 0 {
		t.Fatal("a plan that runs nothing")
	}
	if streams > runners.MaxStreams {
		t.Fatalf("%d streams, more than MaxStreams (%d)", streams, runners.MaxStreams)
	}
	for n := range d.Parameters {
		if _, ok := plan.Parameters[n]; !ok {
			t.Fatalf("parameter %s missing from the plan", n)
		}
	}
}
