package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// batch --dry-run prints the run list, the time it takes at least and the setups'
// commands, and connects to nothing (the inventory's hosts are documentation
// addresses).
func TestBatchDryRun(t *testing.T) {
	dir := t.TempDir()
	inv, err := os.ReadFile(filepath.Join("..", "..", "batch", "testdata", "hosts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts.yaml"), inv, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	nightly := write("nightly.yaml", "name: nightly\ninventory: hosts.yaml\nlength: 30\ndelay: 5\nrepetitions: 2\npause: 10s\n"+
		"tests:\n  - test: tcp_ndown\n    params: {download_streams: [4, 8]}\nsetups: [small, fq_codel]\n"+
		"before:\n  - {host: server, run: \"modprobe sch_fq_codel\"}\n")
	stdout, stderr, code := runApp("batch", "--dry-run", "--no-shuffle", nightly)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `batch nightly: 8 runs on INV, in the file's order, each 30s with 5s before and after, step 200ms, 10s apart
   1  tcp_ndown_download_streams=4_small_rep1
   2  tcp_ndown_download_streams=4_small_rep2
   3  tcp_ndown_download_streams=4_fq_codel_rep1
   4  tcp_ndown_download_streams=4_fq_codel_rep2
   5  tcp_ndown_download_streams=8_small_rep1
   6  tcp_ndown_download_streams=8_small_rep2
   7  tcp_ndown_download_streams=8_fq_codel_rep1
   8  tcp_ndown_download_streams=8_fq_codel_rep2
at least 0:06:30 of tests: 8 runs of 40s and 7 pauses of 10s; connecting, the setups and the before and after commands take more
before each run, on server: modprobe sch_fq_codel

# setup small (BFIFO 100k) on server:eth0
tc qdisc replace dev eth0 root handle 1: htb default 1
tc class replace dev eth0 parent 1: classid 1:1 htb rate 50mbit ceil 50mbit
tc qdisc replace dev eth0 parent 1:1 handle 10: bfifo limit 100000

# setup fq_codel (FQ_CODEL) on server:eth0
tc qdisc replace dev eth0 root handle 1: fq_codel
`
	want = strings.Replace(want, "INV", filepath.Join(dir, "hosts.yaml"), 1)
	if stdout != want {
		t.Errorf("batch --dry-run:\n%s\nwant:\n%s", stdout, want)
	}

	// Without a pause: no pauses counted; past an hour, hours.
	long := write("long.yaml", "name: long\ninventory: hosts.yaml\nlength: 30m\ndelay: 30s\nrepetitions: 3\ntests: [{test: tcp_4down}]\n")
	stdout, stderr, code = runApp("batch", "--dry-run", long)
	if want := "\nat least 1:33:00 of tests: 3 runs of 31m0s; connecting"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("exit %d, want %q in:\n%s%s", code, want, stdout, stderr)
	}
}

func TestHMS(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                     "0:00:00",
		1500 * time.Millisecond:               "0:00:02",
		6*time.Minute + 30*time.Second:        "0:06:30",
		25*time.Hour + 61*time.Second:         "25:01:01",
		7*24*time.Hour + 499*time.Millisecond: "168:00:00",
	} {
		if got := hms(d); got != want {
			t.Errorf("hms(%v) = %s, want %s", d, got, want)
		}
	}
}
