//go:build !race

// The gzip bomb reads the cap's worth of bytes (512 MiB). Under the race detector
// that took a minute of the unit packages' stage, and the reader runs in one
// goroutine, where the detector has nothing to find: make test runs this file
// without it (scripts/test), and the race stage leaves it out.

package datafile

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A gzip bomb: a small file that decompresses to more than MaxDecompressed, of lines
// a reader accepts and ignores. The reader stops at the cap, keeps what came before
// and says where it stopped, having held little in memory.
func TestGzipBombReadUpToTheCap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 600 MiB stream")
	}
	line := append(append([]byte(`{"type":"x"`), bytes.Repeat([]byte(" "), 1<<16)...), "}\n"...)
	// One gzip member for the header, then one of 64 lines compressed once and
	// repeated: a gzip reader reads members one after another as one stream (RFC
	// 1952, as a writer that flushes makes them), and the bomb is made in a moment,
	// not by compressing 600 MiB (a minute under the race detector).
	member := func(p []byte) []byte {
		var m bytes.Buffer
		zw, err := gzip.NewWriterLevel(&m, gzip.BestCompression)
		must(t, err)
		zw.Write(p)
		must(t, zw.Close())
		return m.Bytes()
	}
	var b bytes.Buffer
	b.Write(member([]byte(header())))
	lines := member(bytes.Repeat(line, 64))
	for n := 0; n <= MaxDecompressed/len(line)/64; n++ {
		b.Write(lines)
	}
	path := filepath.Join(t.TempDir(), "bomb"+Ext)
	must(t, os.WriteFile(path, b.Bytes(), 0o644))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run, err := Read(path)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("read: %v, want the run up to the cap", err)
	}
	if !run.Incomplete || !strings.Contains(run.Error, "512 MiB") || !strings.Contains(run.Error, "record ") {
		t.Fatalf("incomplete %v, error %q: want the run marked incomplete at the 512 MiB cap, naming the record", run.Incomplete, run.Error)
	}
	if grew := after.HeapInuse - min(after.HeapInuse, before.HeapInuse); grew > 64<<20 {
		t.Errorf("reading the bomb kept %d MiB", grew>>20)
	}
}
