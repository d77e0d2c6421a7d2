package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/datafile"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds the bloatbench command once for the tests that run it as a
// process: its exit codes, its completion script in a real shell.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "bloatbench-cmd-test"); binErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "bloatbench"), ".").CombinedOutput()
		if err != nil {
			binErr = &buildError{err, out}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "bloatbench")
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + string(e.out) }

// runBinary runs the built command and returns what it wrote and its exit code.
func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// runApp runs the command tree in the test's process, as main does but for the
// terminal writers: what it wrote, and the exit code main would give.
func runApp(args ...string) (stdout, stderr string, code int) {
	app := newApp()
	var o, e bytes.Buffer
	app.Writer, app.ErrWriter = &o, &e
	err := app.Run(context.Background(), append([]string{"bloatbench"}, args...))
	code = reportError(&e, err)
	return o.String(), e.String(), code
}

// setupTree is the command tree as a run completes it: with the help verbs and
// flags and the completion verb that urfave/cli adds as it starts.
func setupTree(t testing.TB) *cli.Command {
	t.Helper()
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	if err := app.Run(context.Background(), []string{"bloatbench", "--help"}); err != nil {
		t.Fatal(err)
	}
	return app
}

// writeRun writes a small data file of a run of length and delay seconds, with a
// ping every step and a TCP flow, and returns its path.
func writeRun(t *testing.T, dir, name string, length, delay float64) string {
	t.Helper()
	path := filepath.Join(dir, name+datafile.Ext)
	w, err := datafile.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	t0 := datafile.Unix(start)
	total := length + 2*delay
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Header(datafile.Metadata{Test: "tcp_1down", Title: name, StartTime: start, T0: t0, Length: length, Delay: delay, Step: 0.5,
		TotalLength: total, Parameters: map[string]string{"download_streams": "1"}, Note: "a <note> & more",
		Hosts: []datafile.Host{{Role: "server", Name: "server", SSH: "root@198.19.0.6", TestIP: "198.18.0.2"}}}))
	must(w.AddSeries(datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms", Host: "client", Target: "198.18.0.2"}))
	must(w.AddSeries(datafile.Series{Name: "TCP download::1", Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client", Direction: "download", Flow: 1}))
	for k := 0; float64(k)*0.5 <= total; k++ {
		tk := t0 + float64(k)*0.5
		must(w.Append("Ping (ms) ICMP", []datafile.Sample{{T: tk + 0.001, V: 1 + float64(k%3), Seq: k}}))
		if tk > t0+delay && tk <= t0+delay+length {
			must(w.Append("TCP download::1", []datafile.Sample{{T: tk, V: 90, Dur: 0.5, Bytes: 5_625_000}}))
		}
	}
	must(w.Close(nil))
	return path
}
