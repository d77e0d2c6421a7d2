package report

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The escapers below make a string that comes from a data file or a host (a title,
// a host name, a fact, a series' name, an error a run recorded) inert in one output
// format. They are applied where such strings become output, once each: the file is
// not trusted, and what it says must reach the reader as text, never as a terminal
// command (OSC 52 writes the clipboard), a markdown table cell boundary, raw HTML or
// a spreadsheet formula.

// EscapeText makes s safe to print on a terminal: C0 and C1 control characters, DEL,
// bytes that are not UTF-8 (a lone 0x9b is CSI to some terminals) and the bidi
// controls that reorder what is shown (Trojan Source) become visible escapes such as
// \x1b, \n or \u202e; a tab becomes a space, as the layouts pad with spaces. Other
// UTF-8 is kept, and a backslash is left alone so that ordinary names read as they
// are: the escape only has to make the bytes harmless, not reversible.
func EscapeText(s string) string {
	return escapeWith(s, func(b *strings.Builder, _, r, _ rune) bool {
		if r == '\t' {
			b.WriteByte(' ')
			return true
		}
		return false
	})
}

// EscapeMarkdown makes s inert inline markdown, for a heading, a paragraph or a
// table cell: line breaks become spaces (a heading stays one line, a row one row),
// |, backslash and the characters of inline markup (` * _ [ ] ~ #) are
// backslash-escaped, <, > and & become entities so that raw HTML shows as text, and
// control characters are escaped as for text. An underscore between letters or
// digits is kept: it can neither open nor close emphasis (CommonMark's flanking
// rules), and tcp_4down reads as it always has.
func EscapeMarkdown(s string) string { return escapeMarkdown(s, false) }

// escapeMarkdown is EscapeMarkdown; allUnderscores escapes every underscore, as the
// list of facts always has.
func escapeMarkdown(s string, allUnderscores bool) string {
	return escapeWith(s, func(b *strings.Builder, prev, r, next rune) bool {
		switch r {
		case '\n', '\r', '\t':
			b.WriteByte(' ')
		case '\\', '|', '`', '*', '[', ']', '~', '#':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '_':
			if allUnderscores || !wordRune(prev) || !wordRune(next) {
				b.WriteByte('\\')
			}
			b.WriteByte('_')
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		default:
			return false
		}
		return true
	})
}

// EscapeCSV makes s a safe CSV cell (encoding/csv quotes commas, quotes and line
// breaks). A cell that starts with =, +, -, @, a tab or a CR is a formula to
// spreadsheets (OWASP's CSV injection), so it gets a leading single quote, unless it
// is a plain decimal number such as -3.2 or +1e5, which must stay a number. Control
// characters are then escaped as for text, as a CSV is often read on the terminal it
// was printed to, except line breaks and tabs: inside a quoted cell they are data.
func EscapeCSV(s string) string {
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 && !plainNumber(s) {
		s = "'" + s
	}
	return escapeWith(s, func(b *strings.Builder, _, r, _ rune) bool {
		if r == '\n' || r == '\t' {
			b.WriteRune(r)
			return true
		}
		return false
	})
}

// EscapeError returns err with its message escaped for a terminal (an error can quote
// a file), still wrapping err for errors.Is and errors.As; nil for nil.
func EscapeError(err error) error {
	if err == nil {
		return nil
	}
	return &escapedError{err}
}

type escapedError struct{ err error }

func (e *escapedError) Error() string { return EscapeText(e.err.Error()) }
func (e *escapedError) Unwrap() error { return e.err }

// plainNumber says s is a decimal number, or a percentage ("-62.28%", a delta):
// ParseFloat takes it, and it has none of the hex, underscore, Inf or NaN spellings
// ParseFloat also takes, which a spreadsheet would not read as a number.
func plainNumber(s string) bool {
	s = strings.TrimSuffix(s, "%")
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return false
	}
	return strings.Trim(s, "0123456789+-.eE") == ""
}

// escapeWith copies s, giving each rune with its neighbours (0 at the ends) to format
// first: format writes what its output format wants for the rune and reports true,
// or reports false to leave the rune to the escaping of control characters, which
// every format shares. Bytes that are not UTF-8 are always escaped.
func escapeWith(s string, format func(b *strings.Builder, prev, r, next rune) bool) string {
	if !needsEscape(s) {
		return s // the common case, a plain name: no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	var prev rune
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
			i++
			prev = r
			continue
		}
		next, _ := utf8.DecodeRuneInString(s[i+size:])
		if !format(&b, prev, r, next) {
			writeControl(&b, r)
		}
		prev = r
		i += size
	}
	return b.String()
}

// needsEscape says some rune of s is one an escaper may change: any ASCII
// punctuation or control, or anything beyond ASCII that is not a plain printable
// rune. It errs towards true; escapeWith then decides rune by rune.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || strings.IndexByte("\\|`*_[]~#<>&", c) >= 0 {
			return true
		}
	}
	return false
}

// writeControl writes r, or its visible escape when it is a control character or a
// bidi control.
func writeControl(b *strings.Builder, r rune) {
	switch {
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\r':
		b.WriteString(`\r`)
	case r < 0x20 || r == 0x7f:
		fmt.Fprintf(b, `\x%02x`, r)
	case r >= 0x80 && r <= 0x9f, invisibleControl(r):
		fmt.Fprintf(b, `\u%04x`, r)
	default:
		b.WriteRune(r)
	}
}

// invisibleControl says r reorders or breaks what a terminal or a browser shows while
// showing nothing itself: the bidi embeddings, overrides and isolates (U+202A-202E,
// U+2066-2069), the bidi marks (U+200E, U+200F, U+061C), and the line and paragraph
// separators (U+2028, U+2029), which some viewers take for line breaks.
func invisibleControl(r rune) bool {
	switch {
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c, r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

func wordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// escaperFor returns the escaper of an output format's strings from files and hosts.
func escaperFor(markdown bool) func(string) string {
	if markdown {
		return EscapeMarkdown
	}
	return EscapeText
}
