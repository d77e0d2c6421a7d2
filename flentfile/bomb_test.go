//go:build !race

// The gzip bomb reads the cap's worth of bytes (200 MiB). Under the race detector
// that took 40 s of the unit packages' stage, and the reader runs in one
// goroutine, where the detector has nothing to find: make test runs this file
// without it (scripts/test), and the race stage leaves it out.

package flentfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A gzip bomb: a small file whose JSON is more than MaxDecompressed, most of it
// white space inside the document (a JSON decoder buffers a whole document).
func TestFlentGzipBombRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 200 MiB stream")
	}
	doc, err := json.Marshal(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	// One gzip member a part, the white space's compressed once and repeated: a gzip
	// reader reads members one after another as one stream (RFC 1952), and the file
	// is made in a moment, not by compressing 200 MiB.
	member := func(p []byte) []byte {
		var m bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&m, gzip.BestCompression)
		zw.Write(p)
		zw.Close()
		return m.Bytes()
	}
	var b bytes.Buffer
	b.Write(member(doc[:1]))
	space := member(bytes.Repeat([]byte(" "), 1<<20))
	for n := 0; n <= MaxDecompressed>>20; n++ {
		b.Write(space)
	}
	b.Write(member(doc[1:]))
	path := filepath.Join(t.TempDir(), "bomb"+Ext)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Read(path)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "MiB") {
		t.Fatalf("error %v, want one naming the file and the cap", err)
	}
	// What reading the cap's worth of bytes costs in this very build: the race
	// detector's allocator counts about twice what a plain build does. The bomb may
	// cost that and a little more, not what its whole stream would.
	grew := after.TotalAlloc - before.TotalAlloc
	var ref0, ref1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ref0)
	io.ReadAll(io.LimitReader(zeros{}, MaxDecompressed+1))
	runtime.ReadMemStats(&ref1)
	bound := ref1.TotalAlloc - ref0.TotalAlloc + 64<<20
	if grew > bound {
		t.Errorf("reading the bomb allocated %d MiB, reading the cap's worth of bytes %d MiB", grew>>20, (bound-64<<20)>>20)
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
