package runners

import (
	"os"
	"path/filepath"
	"testing"
)

// The BQL files are found once a device and read again in place; a device whose
// queues went away is found again, and a file that does not hold a number is left
// to its caller. Against a directory laid out as sysfs is.
func TestBQLFiles(t *testing.T) {
	root := t.TempDir()
	write := func(dev, queue, stat, v string) {
		d := filepath.Join(root, dev, "queues", queue, "byte_queue_limits")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, stat), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"tx-0", "tx-1"} {
		write("eth0", q, "inflight", "0\n")
		write("eth0", q, "limit", "1514\n")
	}
	b := bqlFiles{root: root, devs: map[string][]bqlFile{}}
	defer b.close()
	read := func(dev string) map[string]string {
		t.Helper()
		got := map[string]string{}
		for _, q := range b.files(dev) {
			v, err := q.read()
			if err != nil {
				t.Fatalf("%s %s %s: %v", dev, q.queue, q.stat, err)
			}
			got[q.queue+" "+q.stat] = v
		}
		return got
	}
	if got := read("eth0"); len(got) != 4 || got["tx-1 limit"] != "1514" || got["tx-0 inflight"] != "0" {
		t.Fatalf("first read: %v", got)
	}
	// Values change in place (sysfs prints afresh at offset 0; a file here is
	// rewritten through the same inode); a queue added later is not looked for.
	for _, q := range []string{"tx-0", "tx-1"} {
		f, err := os.OpenFile(filepath.Join(root, "eth0", "queues", q, "byte_queue_limits", "inflight"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("4542\n"), 0)
		f.Close()
	}
	write("eth0", "tx-2", "limit", "3000\n")
	if got := read("eth0"); len(got) != 4 || got["tx-0 inflight"] != "4542" || got["tx-1 inflight"] != "4542" {
		t.Fatalf("second read: %v", got)
	}
	if len(b.files("nosuch")) != 0 {
		t.Errorf("a device without queues has files")
	}
	// A read that fails (the device went away) is the caller's cue to drop it;
	// the next look finds what is there then.
	b.devs["eth0"][0].f.Close()
	if _, err := b.devs["eth0"][0].read(); err == nil {
		t.Fatal("a closed file read without error")
	}
	b.drop("eth0")
	if got := read("eth0"); len(got) != 5 || got["tx-2 limit"] != "3000" {
		t.Fatalf("after drop: %v", got)
	}
}
