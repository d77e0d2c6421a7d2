package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/internal/flentsummary"
	"github.com/bloatbench/bloatbench/tests"
)

type jsonRows map[string]struct {
	Avg, Median, P99 *float64
	Points           int
}

func summaryJSON(t *testing.T, args ...string) jsonRows {
	t.Helper()
	r := bb(t, append([]string{"summary", "--format", "json"}, args...)...)
	if r.err != nil {
		t.Fatalf("summary %v: %v\n%s", args, r.err, r.stderr)
	}
	var s struct {
		Runs []struct {
			Rows []struct {
				Name             string
				Avg, Median, P99 *float64
				Points           int
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || len(s.Runs) != 1 {
		t.Fatalf("summary json: %v\n%s", err, r.stdout)
	}
	rows := jsonRows{}
	for _, row := range s.Runs[0].Rows {
		rows[row.Name] = struct {
			Avg, Median, P99 *float64
			Points           int
		}{row.Avg, row.Median, row.P99, row.Points}
	}
	return rows
}

func flentSummary(t *testing.T, args ...string) map[string]flentsummary.Row {
	t.Helper()
	out, err := exec.Command("flent", append([]string{"-f", "summary"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("flent %v: %v\n%s", args, err, out)
	}
	rows, err := flentsummary.Parse(string(out))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flent %s:\n%s", strings.Join(args, " "), out)
	return rows
}

// sameRows holds our rows to flent's to its printed precision (0.01), and the counts
// too with points, and returns how many rows the two share.
func sameRows(t *testing.T, ours jsonRows, theirs map[string]flentsummary.Row, points bool) int {
	t.Helper()
	shared := 0
	for name, f := range theirs {
		o, ok := ours[name]
		if !ok {
			continue
		}
		shared++
		for _, v := range []struct {
			what string
			o    *float64
			f    float64
		}{{"avg", o.Avg, f.Avg}, {"median", o.Median, f.Median}, {"99th %", o.P99, f.P99}} {
			if math.IsNaN(v.f) {
				continue // flent's N/A: any value of ours
			}
			if v.o == nil || math.Abs(*v.o-v.f) > 0.005+1e-9 {
				t.Errorf("%s %s: ours %v, flent %.2f", name, v.what, fmtPtr(v.o), v.f)
			}
		}
		if points && o.Points != f.Points {
			t.Errorf("%s: ours %d points, flent %d", name, o.Points, f.Points)
		}
	}
	return shared
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "N/A"
	}
	return fmt.Sprintf("%.4f", *p)
}

// runFlent runs `bloatbench run --flent ARGS...` into a directory of its own, and
// returns the run's result, its data file and its flent file.
func runFlent(t *testing.T, args ...string) (r result, data, exported string) {
	t.Helper()
	out := t.TempDir()
	r = bb(t, append([]string{"run", "-o", out, "--flent"}, args...)...)
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	d, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	e, _ := filepath.Glob(filepath.Join(out, "*.flent.gz"))
	if len(d) != 1 || len(e) != 1 {
		t.Fatalf("want one data file and one flent file in %s, got %v %v", out, d, e)
	}
	return r, d[0], e[0]
}

// flent 2.1.1 summarises our export with our numbers, and we summarise a file flent
// made with its numbers.
func TestFlentBothWays(t *testing.T) {
	functional(t)
	needLab(t)
	for _, tool := range []string{"flent", "irtt", "fping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: bash scripts/install-deps", tool)
		}
	}
	inv, _ := lab(t, "--rate", "100mbit", "--queue", "bfifo:300000", "--gso", "off")
	// Our tcp tests, exported: flent's summary of the export is ours, row for row
	// and point for point (flent's "Ping (ms) ICMP" is the whole run, as ours), with
	// no cut and with flent's cuts: between grid points, on them, from the start,
	// back from the end.
	for _, tc := range []struct {
		args []string
		rows int // ping, the flows, sum and avg
	}{
		{[]string{"-l", "8", "-d", "2", "tcp_4down"}, 7},
		{[]string{"-l", "8", "-d", "2", "--te", "upload_streams=2", "tcp_nup"}, 5},
	} {
		_, data, exported := runFlent(t, append([]string{"-H", inv}, tc.args...)...)
		test := tc.args[len(tc.args)-1]
		for _, cut := range []string{"", "2.1,9.9", "2,10", "0,5", "3,-2"} {
			ours, theirs := []string{data}, []string{"-i", exported}
			if cut != "" {
				ours, theirs = []string{"--cut", cut, data}, append(theirs, "--data-cutoff", cut)
			}
			if n := sameRows(t, summaryJSON(t, ours...), flentSummary(t, theirs...), true); n != tc.rows {
				t.Errorf("%s, cut %q: flent and we share %d rows, want %d", test, cut, n, tc.rows)
			}
		}
	}

	// The other way: flent's own ping test (fping for ICMP, irtt for UDP).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := exec.CommandContext(ctx, "irtt", "server", "-b", "127.0.0.1")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	time.Sleep(300 * time.Millisecond)
	dir := t.TempDir()
	if b, err := exec.Command("flent", "ping", "-H", "127.0.0.1", "-l", "4", "-D", dir, "-t", "flent-made").CombinedOutput(); err != nil {
		t.Fatalf("flent ping: %v\n%s", err, b)
	}
	made, _ := filepath.Glob(filepath.Join(dir, "*.flent.gz"))
	if len(made) != 1 {
		t.Fatalf("flent wrote %v", made)
	}
	// Without a cut flent prints a series' MEAN_VALUE as its average (fping's own
	// figure, to 0.001 ms) and counts its grid; we read both from the file and print
	// them too. With a cut both count and average the replies.
	for _, cut := range [][]string{nil, {"--cut", "1,3"}} {
		theirs := []string{"-i", made[0]}
		if cut != nil {
			theirs = append(theirs, "--data-cutoff", cut[1])
		}
		if n := sameRows(t, summaryJSON(t, append(cut, made[0])...), flentSummary(t, theirs...), true); n != 2 {
			t.Errorf("flent's ping test, %v: %d shared rows, want ICMP and UDP", cut, n)
		}
	}
	cancel()
}

const compareSetups = `setups:
  htb+pfifo: {title: "HTB 100mbit + PFIFO 1000", rate: 100mbit, root: {kind: pfifo, params: {limit: "1000"}}}
  htb+bfifo: {title: "HTB 100mbit + BFIFO 150000", rate: 100mbit, root: {kind: bfifo, params: {limit: "150000"}}}
  htb+pfifo50: {title: "HTB 100mbit + PFIFO 50", rate: 100mbit, root: {kind: pfifo, params: {limit: "50"}}}
`

// Three runs of three setups on the local lab, compared: the cover letter's blocks,
// the side-by-side table, and deltas that three runs cannot make significant.
func TestCompareThreeSetups(t *testing.T) {
	inv, _ := lab(t, "--gso", "off")
	appendSetups(t, inv, compareSetups)
	out := t.TempDir()
	r := bb(t, "run", "-H", inv, "--setup", "htb+pfifo", "--setup", "htb+bfifo", "--setup", "htb+pfifo50",
		"--repeat", "3", "-l", "4", "-d", "1", "-o", out, "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s\n%s", r.err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "Side by side (median of the runs") {
		t.Errorf("run with three setups and --repeat 3 printed no comparison:\n%s", r.stdout)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	if len(files) != 9 {
		t.Fatalf("want 9 data files, got %d", len(files))
	}
	c := bb(t, append([]string{"compare", "--heading", "Local lab, HTB 100mbit"}, files...)...)
	if c.err != nil {
		t.Fatalf("%v\n%s", c.err, c.stderr)
	}
	t.Logf("bloatbench compare --heading 'Local lab, HTB 100mbit' (9 files):\n%s", c.stdout)
	for _, want := range []string{
		"Local lab, HTB 100mbit with 4 download streams test:\n",
		" - Summary of tcp_4down run 'HTB 100mbit + PFIFO 1000'",
		" - Summary of tcp_4down run 'HTB 100mbit + BFIFO 150000'",
		" - Summary of tcp_4down run 'HTB 100mbit + PFIFO 50'",
		"Side by side (median of the runs, ±95% confidence interval):",
		"HTB 100mbit + PFIFO 1000 (n=3)",
		"A/B deltas (Mann-Whitney U test",
		"need >= 4 samples to detect a difference at alpha level 0.05",
	} {
		if !strings.Contains(c.stdout, want) {
			t.Errorf("compare output lacks %q", want)
		}
	}
	// Three runs a side cannot reach p < 0.05: no delta may claim a difference.
	deltas := c.stdout[strings.Index(c.stdout, "A/B deltas"):]
	for _, l := range strings.Split(deltas, "\n") {
		if strings.Contains(l, " vs ") && strings.Contains(l, "%") {
			t.Errorf("a delta claims a difference on 3+3 runs: %q", l)
		}
	}
	for _, l := range strings.Split(c.stdout, "\n") {
		if strings.Contains(l, "\t") {
			t.Errorf("a tab in: %q", l)
		}
	}
}

// appendSetups adds a setups: section to a lab's inventory.
func appendSetups(t *testing.T, inv, setups string) {
	t.Helper()
	f, err := os.OpenFile(inv, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(setups); err != nil {
		t.Fatal(err)
	}
}

// Every test of ours, exported (run --flent) on a shaped lab: flent 2.1.1 prints
// each row of its summary with our numbers (every row it has data for is one of
// ours, avg, median, 99th percentile and count), and draws the default plot of the
// flent test the export is named for. A test added later is held to this without a
// change here; those another test already holds to flent run there instead.
func TestFlentExportOfEveryTest(t *testing.T) {
	functional(t)
	needLab(t)
	if _, err := exec.LookPath("flent"); err != nil {
		t.Fatalf("flent is missing: bash scripts/install-deps: %v", err)
	}
	heldElsewhere := map[string]string{
		"tcp_4down":   "TestFlentBothWays",
		"tcp_nup":     "TestFlentBothWays",
		"rrul":        "TestRRULOnTheLocalLab",
		"tcp_128down": "TestTCP128Down",
		"rate_steps":  "TestRateStepsOnTheLocalLab", // it needs a setup with a schedule
		// l4s_coexist's jobs and rows under another name (both export as flent's
		// tcp_ndown); it needs path emulation, which the local lab's kernel lacks.
		"l4s_rtt_fair": "l4s_coexist's export, here",
	}
	defs, err := tests.All()
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, d := range defs {
		if by, ok := heldElsewhere[d.Name]; ok {
			t.Logf("%s: held to flent by %s", d.Name, by)
			continue
		}
		held++
		// Each on a lab of its own, beside the other functional tests: one after
		// another they were the e2e stage's last minute and a half, most of the
		// machine idle while each waited on its run.
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			inv, _ := lab(t, "--rate", "100mbit", "--queue", "bfifo:300000", "--gso", "off")
			_, data, exported := runFlent(t, "-H", inv, "-l", "4", "-d", "1", d.Name)
			ours, theirs := summaryJSON(t, "--p99", data), flentSummary(t, "-i", exported)
			withData := 0
			for name, f := range theirs {
				if f.NoData {
					if o, ok := ours[name]; ok && o.Points != 0 {
						t.Errorf("flent has no data for %q, we have %d points", name, o.Points)
					}
					continue
				}
				withData++
				if _, ok := ours[name]; !ok {
					t.Errorf("flent prints %q, we do not", name)
				}
			}
			if n := sameRows(t, ours, theirs, true); withData < 2 || n < withData {
				t.Errorf("flent prints %d rows with data, we share %d", withData, n)
			}
			// SVG, not PNG: its lines can be counted, and axes without data are not a plot.
			svg := filepath.Join(t.TempDir(), "default.svg")
			b, err := exec.Command("flent", "-i", exported, "-f", "plot", "-o", svg).CombinedOutput()
			if err != nil || bytes.Contains(b, []byte("Traceback")) {
				t.Fatalf("flent's default plot: %v\n%s", err, b)
			}
			img, err := os.ReadFile(svg)
			if err != nil {
				t.Fatalf("flent's default plot: %v\n%s", err, b)
			}
			if n := drawnLines(img); n == 0 {
				t.Errorf("flent's default plot of %s draws no line of 5 points or more (%d bytes)\n%s", exported, len(img), b)
			} else {
				t.Logf("flent's default plot draws %d lines", n)
			}
		})
	}
	if held < 10 {
		t.Errorf("held %d tests to flent here, want every test but the %d held elsewhere", held, len(heldElsewhere))
	}
}

// drawnLines counts the lines of 5 points or more in an SVG matplotlib wrote: each
// is a group line2d_N whose path runs M x y L x y ...; ticks are empty groups, and
// grid lines, spines and legend samples have 2 points.
func drawnLines(svg []byte) int {
	n := 0
	for _, m := range line2dPath.FindAllSubmatch(svg, -1) {
		if len(segment.FindAll(m[1], -1)) >= 4 {
			n++
		}
	}
	return n
}

var (
	line2dPath = regexp.MustCompile(`<g id="line2d_\d+"[^>]*>\s*<path[^>]* d="([^"]*)"`)
	segment    = regexp.MustCompile(`\bL\b`)
)
