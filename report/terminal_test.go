package report

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

func TestTerminalWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"plain", []string{"a table\n\twith a tab\n"}, "a table\n\twith a tab\n"},
		{"OSC 52", []string{"host \x1b]52;c;aGk=\x07 up\n"}, `host \x1b]52;c;aGk=\x07 up` + "\n"},
		{"CR alone", []string{"ok\rFAIL\n"}, `ok\rFAIL` + "\n"},
		{"CRLF", []string{"a,b\r\n"}, "a,b\r\n"},
		{"CRLF split", []string{"a,b\r", "\nc\r", "x"}, "a,b\r\nc\\rx"},
		{"bidi", []string{"evil\u202etxt.exe\n"}, `evil\u202etxt.exe` + "\n"},
		{"rune split", []string{"caf\xc3", "\xa9 ok\n"}, "café ok\n"},
		{"invalid", []string{"\xff\xfe\n"}, `\xff\xfe` + "\n"},
		{"escaped already", []string{`\x1b \u202e` + "\n"}, `\x1b \u202e` + "\n"},
		{"C1", []string{"a\u009bb\n"}, `a\u009bb` + "\n"},
		{"held at the end", []string{"caf\xc3"}, `caf\xc3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			w := NewTerminalWriter(&b)
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

// Lines written at once from several goroutines come out whole.
func TestTerminalWriterConcurrent(t *testing.T) {
	var b bytes.Buffer
	w := NewTerminalWriter(&b)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				w.Write([]byte(strings.Repeat(string(rune('a'+i)), 50) + "\n"))
			}
		})
	}
	wg.Wait()
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if len(line) != 50 || strings.Trim(line, line[:1]) != "" {
			t.Fatalf("a line mixed: %q", line)
		}
	}
}
