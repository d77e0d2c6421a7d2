package flentfile

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// summariseBelow bounds the grids the fuzz target summarises and exports: bigger
// ones (up to datafile.MaxGridPoints) are legal but would make each run slow.
const summariseBelow = 100_000

// FuzzDecode feeds flent files' JSON to the importer, seeded with the files flent
// 2.1.1 made (ping, cpu and qdisc stats, VoIP) and bloatbench's own export. Whatever the bytes: no panic; and a run that
// imports keeps the reader's limits, has only series bloatbench summarises,
// summarises to finite numbers, and exports to a flent file that imports again with
// the same series.
func FuzzDecode(f *testing.F) {
	recorded, _ := filepath.Glob("testdata/recorded/*.flent.gz")
	for _, path := range append([]string{"testdata/ping.loopback.flent-2.1.1.flent.gz"}, recorded...) {
		fh, err := os.Open(path)
		if err != nil {
			f.Fatal(err)
		}
		zr, err := gzip.NewReader(fh)
		if err != nil {
			f.Fatal(err)
		}
		flentMade, err := io.ReadAll(zr)
		fh.Close()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(flentMade)
	}
	if golden, err := os.ReadFile("testdata/export.flent.json.golden"); err == nil {
		f.Add(golden)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		run, err := decode("fuzz.flent", bytes.NewReader(data))
		if err != nil {
			return
		}
		m := run.Metadata
		var names []string
		for _, se := range run.Series {
			names = append(names, se.Name)
			switch se.Kind {
			case datafile.KindPing, KindFlent:
			case datafile.KindTCP:
				if se.Direction != "upload" && se.Direction != "download" {
					t.Fatalf("%s: direction %q", se.Name, se.Direction)
				}
			default:
				t.Fatalf("%s: kind %q", se.Name, se.Kind)
			}
		}
		if err := datafile.CheckGrid("STEP_SIZE", m.Step, "TOTAL_LENGTH", m.TotalLength, len(run.Series)); err != nil {
			t.Fatalf("a grid the reader should refuse: %v", err)
		}
		for name, ss := range run.Samples {
			for _, s := range ss {
				if err := datafile.CheckSample(name, s); err != nil {
					t.Fatalf("sample let through: %v", err)
				}
			}
		}
		if datafile.GridPoints(m.TotalLength, m.Step) > summariseBelow {
			return
		}
		for _, r := range report.Summarize(run).Rows {
			for _, v := range []float64{r.Avg, r.Median, r.P99} {
				if math.IsInf(v, 0) {
					t.Fatalf("row %q: %v", r.Name, v)
				}
			}
		}
		out, err := encode(run)
		if err != nil {
			t.Fatalf("an imported run does not export: %v", err)
		}
		back, err := decode("fuzz-export.flent", bytes.NewReader(out))
		if err != nil {
			t.Fatalf("exported, the run does not import: %v", err)
		}
		var backNames []string
		for _, se := range back.Series {
			backNames = append(backNames, se.Name)
		}
		sort.Strings(names)
		sort.Strings(backNames)
		if !slices.Equal(names, backNames) {
			t.Fatalf("exported and imported, the series changed: %q, then %q", names, backNames)
		}
	})
}
