package remote

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// HeadTail keeps everything that fits, else the head, a marker and the tail,
// however the writes are cut.
func TestHeadTail(t *testing.T) {
	cases := []struct {
		name   string
		limit  int
		writes []string
		want   string
	}{
		{"empty", 8, nil, ""},
		{"fits", 8, []string{"abc", "def"}, "abcdef"},
		{"exactly", 8, []string{"abcdefgh"}, "abcdefgh"},
		{"one past", 8, []string{"abcdefghi"}, "abcd\n[... 1 bytes left out]\nfghi"},
		{"one write far past", 8, []string{"abcd" + strings.Repeat("x", 100) + "wxyz"}, "abcd\n[... 100 bytes left out]\nwxyz"},
		{"small writes wrap the ring", 8, strings.Split("abcdefghijklmnopqrstuvwxyz", ""), "abcd\n[... 18 bytes left out]\nwxyz"},
		{"writes across the head", 8, []string{"ab", "cdef", "ghijk", "lm"}, "abcd\n[... 5 bytes left out]\njklm"},
		{"odd limit", 5, []string{"abcdefghij"}, "ab\n[... 5 bytes left out]\nhij"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := NewHeadTail(c.limit)
			total := 0
			for _, w := range c.writes {
				n, err := h.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v: a write must take everything", w, n, err)
				}
				total += n
			}
			if got := string(h.Bytes()); got != c.want {
				t.Errorf("kept %q, want %q", got, c.want)
			}
			if h.Len() != int64(total) {
				t.Errorf("Len %d, want %d", h.Len(), total)
			}
		})
	}
}

// Conn.Output keeps at most MaxOutput of a command's stdout, its head and tail
// with the marker, and the command, read to its end, is not held up by it.
func TestOutputBounded(t *testing.T) {
	h := newBootstrapHost(t, "", 10*time.Second)
	const size = 3*MaxOutput + 12345
	cmd := fmt.Sprintf("echo START; head -c %d /dev/zero | tr '\\0' x; echo END", size)
	out, err := h.conn.Output(context.Background(), cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("\n[... %d bytes left out]\n", size+len("START\nEND\n")-MaxOutput)
	if len(out) != MaxOutput+len(marker) || !bytes.HasPrefix(out, []byte("START\n")) || !bytes.HasSuffix(out, []byte("END\n")) || !bytes.Contains(out, []byte(marker)) {
		t.Errorf("%d bytes of output (%q ... %q), want %d: head, %q, tail", len(out), out[:min(len(out), 20)], out[max(0, len(out)-20):], MaxOutput+len(marker), marker)
	}
	// A failing command's stderr, bounded too, says why.
	cmd = fmt.Sprintf("head -c %d /dev/zero | tr '\\0' e >&2; echo why >&2; exit 3", size)
	_, err = h.conn.Output(context.Background(), cmd, nil)
	if err == nil || !strings.HasSuffix(err.Error(), "why") || len(err.Error()) > maxErrorText+len(cmd)+200 {
		t.Errorf("the failing command's error: %d bytes, ending %q", len(fmt.Sprint(err)), fmt.Sprint(err)[max(0, len(fmt.Sprint(err))-20):])
	}
}
