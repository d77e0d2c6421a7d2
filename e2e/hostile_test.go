package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Crafted files (testdata/hostilegen makes them: a few hundred bytes to a few MB
// of gzip that declare or hold far more than any run writes) through every report
// verb under an address-space limit of 2 GB: each ends within 20 s with a result
// or a clear error, never a Go fatal error, a panic or a kill.
func TestHostileFilesBounded(t *testing.T) {
	functional(t)
	dir := t.TempDir()
	gen := exec.CommandContext(t.Context(), "go", "run", "./testdata/hostilegen", "-o", dir)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("hostilegen: %v\n%s", err, out)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.gz"))
	if err != nil || len(files) < 10 {
		t.Fatalf("hostilegen wrote %d files (%v)", len(files), err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		// history reads batch folders: one holding this file as its only run.
		batch := filepath.Join(dir, "batch-"+name)
		must(t, os.MkdirAll(filepath.Join(batch, "data"), 0o755))
		must(t, os.Symlink(f, filepath.Join(batch, "data", name)))
		must(t, os.WriteFile(filepath.Join(batch, "runs.jsonl"),
			[]byte(`{"id":"r1","status":"ok","data":"data/`+name+`","started":"2026-12-02T10:00:00Z","ended":"2026-12-02T10:00:14Z"}`+"\n"), 0o644))
		for _, verb := range [][]string{
			{"summary", f},
			{"compare", f, f},
			{"export", "--flent", "-o", filepath.Join(dir, "out.flent.gz"), f},
			{"plot", "-o", filepath.Join(dir, "out.html"), f},
			{"history", "-o", filepath.Join(dir, "history.html"), batch},
		} {
			t.Run(name+"/"+verb[0], func(t *testing.T) {
				os.Remove(filepath.Join(dir, "out.flent.gz"))
				stdout, stderr, code := bbLimited(t, verb...)
				for _, bad := range []string{"fatal error", "panic:", "goroutine ", "signal: killed"} {
					if strings.Contains(stderr, bad) {
						t.Fatalf("exit %d with %q:\n%.2000s", code, bad, stderr)
					}
				}
				if code != 0 && code != 1 {
					t.Fatalf("exit %d:\n%.2000s", code, stderr)
				}
				if code == 1 && !strings.Contains(stderr, "bloatbench: ") {
					t.Fatalf("exit 1 without an error message:\n%.2000s", stderr)
				}
				checkHostileResult(t, name, verb[0], stdout, stderr, code)
			})
		}
	}
}

// checkHostileResult holds what some classes must print beyond surviving.
func checkHostileResult(t *testing.T, name, verb, stdout, stderr string, code int) {
	t.Helper()
	switch {
	case name == "long-event-mid-file.bb.json.gz" && verb == "summary":
		// The records before the 65 MiB event, and after it, are read; the
		// summary says where the file was cut.
		if code != 0 || !strings.Contains(stdout, "TCP download::1") || !strings.Contains(stdout, "70") ||
			!strings.Contains(stdout, "INCOMPLETE") || !strings.Contains(stdout, "record 4") || !strings.Contains(stdout, "left out") {
			t.Errorf("exit %d; want the flow's row of 70 points and INCOMPLETE naming record 4:\n%s\n%s", code, stdout, stderr)
		}
	case name == "osc52-hostname.bb.json.gz" && (verb == "summary" || verb == "compare"):
		if code != 0 || strings.ContainsAny(stdout, "\x1b\x07\u202e") {
			t.Errorf("exit %d; control bytes from the file reached the terminal:\n%q", code, stdout)
		}
	case strings.HasPrefix(name, "pings-at-t0") && verb == "summary":
		if code != 0 || !strings.Contains(stdout, "Ping (ms) ICMP") {
			t.Errorf("exit %d; want the ping's row:\n%s\n%s", code, stdout, stderr)
		}
	}
}

// bbLimited runs bloatbench under ulimit -v 2000000 (kB) with a 20 s limit.
func bbLimited(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `ulimit -v 2000000 && exec "$0" "$@"`, bin}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v did not end within 20 s", args)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
		if code < 0 {
			e.WriteString(fmt.Sprintf("\nsignal: killed (%v)", exit))
		}
	case err != nil:
		t.Fatalf("%v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Ctrl-C ends an offline verb even while its read is blocked: summary of a named
// pipe that never ends (the writer holds it open) exits 130 on SIGINT. The signal
// goes once summary has opened the pipe, so its handler is in place.
func TestInterruptEndsSummary(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "run.bb.json.gz")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "summary", fifo)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once summary has opened it
	must(t, err)
	defer w.Close()
	zw := gzip.NewWriter(w)
	zw.Write([]byte(`{"type":"header","format":"bloatbench-data","version":1,"metadata":{"t0":1000,"step":0.2,"total_length":14}}` + "\n"))
	zw.Flush()
	must(t, cmd.Process.Signal(os.Interrupt))
	err = cmd.Wait()
	var exit *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("summary after SIGINT: %v (context %v), want exit 130\n%s", err, ctx.Err(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr %q: want it to say interrupted", stderr.String())
	}
}

// What no report formats reaches the terminal inert too: a setup's title from an
// inventory (setups' table and --commands), and an error quoting a file name.
func TestTerminalOutputInert(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "hosts.yaml")
	yaml := "client: c\nserver: s\nhosts:\n  c: {ssh: root@192.0.2.1, test_ip: 198.18.0.1}\n  s: {ssh: root@192.0.2.2, test_ip: 198.18.0.2}\n" +
		"bottleneck: [{host: s, dev: eth1}]\n" +
		"setups:\n  evil: {extends: fq_codel, title: \"EVIL\\e]52;c;aGk=\\a\\u202eFQ\"}\n"
	if err := os.WriteFile(inv, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	evilFile := filepath.Join(dir, "run\x1b]0;pwned\x07.bb.json.gz")
	for _, args := range [][]string{
		{"setups", "-H", inv},
		{"setups", "-H", inv, "--commands", "evil"},
		{"summary", evilFile},
	} {
		r := bb(t, args...)
		t.Logf("%v: %v\n%s%s", args[:1], r.err, r.stdout, r.stderr)
		if strings.ContainsAny(r.stdout+r.stderr, "\x1b\x07\u202e") {
			t.Errorf("%v: control bytes reached the terminal:\n%q\n%q", args, r.stdout, r.stderr)
		}
		if args[0] == "setups" && (r.err != nil || !strings.Contains(r.stdout, `EVIL\x1b]52`)) {
			t.Errorf("%v: %v; want the title shown escaped:\n%s", args, r.err, r.stdout)
		}
		if args[0] == "summary" && (r.err == nil || !strings.Contains(r.stderr, `run\x1b]0;pwned\x07`)) {
			t.Errorf("summary of a missing file: %v; want its name escaped in the error:\n%s", r.err, r.stderr)
		}
	}
}
