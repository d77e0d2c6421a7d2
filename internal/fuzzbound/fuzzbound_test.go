package fuzzbound

import (
	"bytes"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"
)

var sink []byte

// Measure counts what the call allocates, within the runtime's per-P slack, and
// nothing much when it allocates nothing.
func TestMeasure(t *testing.T) {
	const n = 8 << 20
	u := Measure(func() { sink = make([]byte, n) })
	if u.Allocated < n || u.Allocated > n+1<<20 {
		t.Errorf("allocating %d bytes measured %d", n, u.Allocated)
	}
	sum := 0
	u = Measure(func() {
		for i := range 1000 {
			sum += i
		}
	})
	if u.Allocated > 64<<10 {
		t.Errorf("a call that allocates nothing measured %d bytes", u.Allocated)
	}
	u = Measure(func() { time.Sleep(20 * time.Millisecond) })
	if u.Elapsed < 20*time.Millisecond {
		t.Errorf("a 20 ms sleep measured %v", u.Elapsed)
	}
}

func TestBudget(t *testing.T) {
	b := Budget{PerInputByte: 10, PerGridValue: 16, Constant: 1000, Time: time.Nanosecond}
	if got := b.Limit(100, 50); got != 10*100+16*50+1000 {
		t.Errorf("limit %v", got)
	}
	if err := b.Check(Usage{Allocated: 2800, Elapsed: time.Hour}, 100, 50); err != nil {
		t.Errorf("at the limit (and slow, but not fuzzing): %v", err)
	}
	err := b.Check(Usage{Allocated: 5600}, 100, 50)
	if err == nil {
		t.Fatal("twice the limit passed")
	}
	for _, want := range []string{"allocated 5600 bytes", "2.0x", "2800 = 10/input byte x 100 bytes + 16/grid value x 50 values + 1000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// Times are checked while fuzzing only: plain go test is not, go test -fuzz is
// (the flag set here as go test sets it, and put back).
func TestTimeCheckedWhileFuzzing(t *testing.T) {
	b := Budget{PerInputByte: 1, Time: time.Second, NsPerInputByte: 1000, NsPerGridValue: 1e6}
	if got := b.TimeLimit(1000, 10); got != 1*time.Second+time.Millisecond+10*time.Millisecond {
		t.Errorf("time limit %v", got)
	}
	slow := Usage{Allocated: 1, Elapsed: time.Minute}
	if Fuzzing() {
		t.Fatal("plain go test taken for fuzzing")
	}
	if err := b.Check(slow, 1, 0); err != nil {
		t.Fatalf("a slow call failed outside fuzzing: %v", err)
	}
	old := flag.Lookup("test.fuzz").Value.String()
	t.Cleanup(func() { flag.Set("test.fuzz", old) })
	if err := flag.Set("test.fuzz", "^FuzzX$"); err != nil {
		t.Fatal(err)
	}
	if !Fuzzing() {
		t.Fatal("-test.fuzz set, and not fuzzing")
	}
	if err := b.Check(slow, 1, 0); err == nil || !strings.Contains(err.Error(), "took 1m0s (60.0x the budget): the budget is 1.000001s = 1s + 1000 ns/input byte x 1 bytes + 1e+06 ns/grid value x 0 values") {
		t.Fatalf("a slow call while fuzzing: %v", err)
	}
}

// A corpus file is what go test reads: its version line, then the bytes quoted.
func TestCorpusFile(t *testing.T) {
	data := []byte("{\"a\":\"<script>\"}\n\x1f\x8b\x00\xff")
	f := CorpusFile(data)
	head, quoted, ok := bytes.Cut(f, []byte("\n"))
	if !ok || string(head) != "go test fuzz v1" {
		t.Fatalf("first line %q", head)
	}
	inner, ok := strings.CutPrefix(strings.TrimSuffix(string(quoted), "\n"), "[]byte(")
	if !ok || !strings.HasSuffix(inner, ")") {
		t.Fatalf("not a []byte line: %q", quoted)
	}
	back, err := strconv.Unquote(strings.TrimSuffix(inner, ")"))
	if err != nil || back != string(data) {
		t.Fatalf("unquoted %q (%v), want %q", back, err, data)
	}
}
