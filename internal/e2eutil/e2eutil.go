// Package e2eutil holds what the test packages share: building the binary under
// test, a buffer a running command can write while a test reads, skipping the
// tests that need root when they are not run as root, and a qdisc's drain rate
// from a data file's byte counter.
package e2eutil

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// Build compiles ./cmd/bloatbench (pkg is its path from the test's folder) into a
// fresh temporary folder; remove the folder when done.
func Build(pkg string) (bin, dir string, err error) {
	dir, err = os.MkdirTemp("", "bloatbench-e2e")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "bloatbench")
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
	}
	return bin, dir, nil
}

// Main builds the binary under test (pkg, from the test's folder) into *bin, runs
// the tests, removes the build and exits with the tests' code; name prefixes a
// failure to build.
func Main(m interface{ Run() int }, name, pkg string, bin *string) {
	b, dir, err := Build(pkg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	*bin = b
	// Journals and device locks of the runs under test go in the build's folder, not
	// in the state folder of whoever runs the tests: the suite leaves nothing in
	// their home. A test may still set its own.
	os.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// NeedRoot skips t when the tests do not run as root, with one line that names
// the test and why it needs root: `go test ./...` as a user runs every other test,
// and `go test -v ./... | grep 'needs root'` lists these. As root it does nothing,
// so that `make test` runs them all and a missing tool or a broken lab fails them
// rather than skipping them.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root: %s", t.Name(), why)
	}
}

// LockedBuffer is a bytes.Buffer safe to write from a running command's output
// while a test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// DrainMbit is the rate (Mbit/s) a byte counter's samples rose at from the last
// at or before from to the last at or before to: a qdisc's drain over a stretch
// of a run. NaN without two such samples.
func DrainMbit(ss []datafile.Sample, from, to float64) float64 {
	var a, b *datafile.Sample
	for i := range ss {
		if ss[i].T <= from {
			a = &ss[i]
		}
		if ss[i].T <= to {
			b = &ss[i]
		}
	}
	if a == nil || b == nil || b.T <= a.T {
		return math.NaN()
	}
	return (b.V - a.V) * 8 / (b.T - a.T) / 1e6
}
