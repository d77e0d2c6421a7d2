package tcstats

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

// FuzzFlatten feeds `tc -s -j qdisc show` output to Flatten, seeded with the real
// fixtures. Whatever the bytes: no panic; and what it returns can become series
// names ("qdisc HOST:DEV WHERE STAT", which reports split at spaces): WHERE and STAT
// are non-empty and hold no white space or control characters, every value is
// finite, and the same output flattens the same way every time.
func FuzzFlatten(f *testing.F) {
	paths, err := filepath.Glob("testdata/tc-s-j.*.json")
	if err != nil || len(paths) == 0 {
		f.Fatalf("no fixtures: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`[{"kind":"cake","handle":"1:","root":true,"tins":[{"drops":1},{"drops":2}],"a":{"b":{"c":3}}}]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		stats, err := Flatten(raw)
		if err != nil {
			return
		}
		for name, v := range stats {
			where, stat, ok := strings.Cut(name, " ")
			if !ok || where == "" || stat == "" || !printableWord(where) || !printableWord(stat) {
				t.Fatalf("statistic %q is not WHERE STAT", name)
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s = %v", name, v)
			}
			_ = Units(name)
			_ = IsCounter(name)
		}
		again, err := Flatten(raw)
		if err != nil || !reflect.DeepEqual(stats, again) {
			t.Fatalf("flattened twice, different: %v\n%v\n%v", err, stats, again)
		}
		if keys := SortedKeys(stats); len(keys) != len(stats) {
			t.Fatalf("%d keys of %d", len(keys), len(stats))
		}
	})
}

// printableWord says whether s has no white space and no control characters.
func printableWord(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
