package report

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// TerminalWriter makes everything written through it inert on a terminal: the
// escapers above make each string from a file or a host inert where a report
// formats it, and this is the same rule at the edge of the process, for what no
// formatter saw (a host's output in the controller's log, a journal's names in
// restore's lines, an error quoting a remote command). Line breaks (\n, and \r
// only as the \r of \r\n, as CSV ends records) and tabs pass; other control
// characters, bidi controls and bytes that are not UTF-8 are written as escapes.
// Already escaped text passes unchanged. It is safe for concurrent use (the
// controller logs from several goroutines), and keeps a rune split across two
// writes whole; Flush writes what is held at the end.
type TerminalWriter struct {
	mu    sync.Mutex
	w     io.Writer
	carry []byte // the start of a rune (or of \r\n) the last write ended in
}

// NewTerminalWriter returns w behind the escaping.
func NewTerminalWriter(w io.Writer) *TerminalWriter { return &TerminalWriter{w: w} }

// Underlying is the writer behind the escaping: for what draws on the terminal
// with sequences of its own (the batch's progress bars), which must then escape
// whatever else it writes itself.
func (t *TerminalWriter) Underlying() io.Writer { return t.w }

// Write escapes p and writes it; it reports all of p written when the escaped
// bytes were.
func (t *TerminalWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := p
	if len(t.carry) > 0 {
		in = append(t.carry, p...)
		t.carry = nil
	}
	// Hold back an incomplete rune, or a \r that a \n may follow, at the end.
	keep := 0
	if n := len(in); n > 0 && in[n-1] == '\r' {
		keep = 1
	} else if i := lastRuneStart(in); i >= 0 && !utf8.FullRune(in[i:]) {
		keep = len(in) - i
	}
	body := in[:len(in)-keep]
	t.carry = append([]byte(nil), in[len(in)-keep:]...)
	if _, err := io.WriteString(t.w, escapeTerminal(body)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what the last write held back.
func (t *TerminalWriter) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.carry) == 0 {
		return nil
	}
	c := t.carry
	t.carry = nil
	_, err := io.WriteString(t.w, escapeTerminal(c))
	return err
}

// lastRuneStart is the index of the last byte of b that may start a rune (up to
// utf8.UTFMax back), -1 if none.
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return -1
}

// escapeTerminal is EscapeText with line breaks and tabs kept.
func escapeTerminal(b []byte) string {
	s := string(b)
	if !needsTerminalEscape(b) {
		return s
	}
	return escapeWith(s, func(sb *strings.Builder, _, r, next rune) bool {
		switch {
		case r == '\n', r == '\t', r == '\r' && next == '\n':
			sb.WriteRune(r)
			return true
		}
		return false
	})
}

// needsTerminalEscape says b holds a byte escapeTerminal may change: a control
// byte other than \n and \t, or anything beyond ASCII (checked rune by rune then).
func needsTerminalEscape(b []byte) bool {
	return bytes.IndexFunc(b, func(r rune) bool {
		return r >= 0x7f || r < 0x20 && r != '\n' && r != '\t'
	}) >= 0
}
