package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/internal/e2eutil"
	"github.com/bloatbench/bloatbench/report"
)

// Off a terminal: a line a run as each starts, with the time left from this
// command's runs, and the run's options untouched (its log lines as they were).
func TestRunProgressPlain(t *testing.T) {
	now := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	var errw strings.Builder
	prog := newRunProgress(&errw, 2, 2)
	prog.now = func() time.Time { return now }
	for i, title := range []string{"MQ + FQ_CODEL", "CAKE", "MQ + FQ_CODEL", "CAKE"} {
		o := controller.Options{Title: title, Length: 60 * time.Second, Delay: 5 * time.Second, Log: &errw}
		got := prog.start(o)
		if got.Log != o.Log || got.Progress != nil {
			t.Errorf("run %d: options changed off a terminal", i+1)
		}
		now = now.Add(80 * time.Second)
		prog.end()
	}
	want := "run 1 of 4: MQ + FQ_CODEL 1/2 (elapsed 0s, about 4m40s left)\n" +
		"run 2 of 4: CAKE 1/2 (elapsed 1m20s, about 4m0s left)\n" +
		"run 3 of 4: MQ + FQ_CODEL 2/2 (elapsed 2m40s, about 2m40s left)\n" +
		"run 4 of 4: CAKE 2/2 (elapsed 4m0s, about 1m20s left)\n"
	if errw.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errw.String(), want)
	}

	// One run: nothing new.
	errw.Reset()
	one := newRunProgress(&errw, 0, 1)
	one.start(controller.Options{Title: "local lab", Length: 10 * time.Second})
	one.end()
	if errw.String() != "" {
		t.Errorf("a single run printed %q", errw.String())
	}
}

// On a terminal (forced, on a buffer): the log lines before the run's first sample
// go to stderr as they are, the run's bar starts with the first sample and is
// labelled with the title and repetition, the log lines during the run print above
// it, and it stays drawn when the run ends, what comes after printed below.
func TestRunProgressBars(t *testing.T) {
	var out e2eutil.LockedBuffer
	errw := report.NewTerminalWriter(&out)
	prog := newRunProgress(errw, 1, 3)
	prog.force = true
	for rep := 1; rep <= 3; rep++ {
		o := prog.start(controller.Options{Title: "MQ + FQ_CODEL \x1b[2J", Length: 60 * time.Second, Delay: 5 * time.Second, Log: errw})
		if o.Progress == nil {
			t.Fatal("no progress feed on a terminal")
		}
		fmt.Fprintf(o.Log, "clock of server: rep %d\n", rep)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			// As the controller does: from an agent's reader.
			defer wg.Done()
			o.Progress(controller.Progress{Elapsed: 30, Total: 70, Loaded: true, SumMbps: 94.26 * float64(rep), PingMs: 15.234})
		}()
		wg.Wait()
		fmt.Fprintf(o.Log, "streams started: rep %d\n", rep)
		prog.end()
		fmt.Fprintf(errw, "data file: rep %d\n", rep)
	}
	s := out.String()
	last := 0
	for rep := 1; rep <= 3; rep++ {
		for _, want := range []string{
			fmt.Sprintf("clock of server: rep %d\n", rep),
			fmt.Sprintf("streams started: rep %d\n", rep),
			fmt.Sprintf(`MQ + FQ_CODEL \x1b[2J %d/3`, rep),
			fmt.Sprintf("30s of 70s, %.1f Mbit/s, ping 15.23 ms (loaded)", 94.26*float64(rep)),
			fmt.Sprintf("data file: rep %d\n", rep),
		} {
			i := strings.Index(s[last:], want)
			if i < 0 {
				t.Fatalf("no %q after the run before it, in order:\n%s", want, s)
			}
			last += i + len(want)
		}
	}
	if strings.Contains(s, "\x1b[2J") {
		t.Errorf("the title reached the terminal unescaped:\n%q", s)
	}
}
