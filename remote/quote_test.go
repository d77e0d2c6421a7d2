package remote

import (
	"os/exec"
	"strings"
	"testing"
)

// Whatever a value holds, a real shell sees it as one word and runs none of it.
func TestQuoteSurvivesARealShell(t *testing.T) {
	values := []string{"", "eth0", "a b", "it's", `"double"`, "$(touch /tmp/bb-pwned)", "`id`", "x;rm -rf /tmp/bb-none",
		"a\nb", `back\slash`, "$HOME", "*", "-n", "ünïcode", "'", "''"}
	for _, v := range values {
		out, err := exec.Command("sh", "-c", "printf '%s' "+Quote(v)).Output()
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if string(out) != v {
			t.Errorf("Quote(%q) came out of sh as %q", v, out)
		}
	}
	if got := Command("tc", "qdisc", "show", "dev", "a b"); got != "tc qdisc show dev 'a b'" {
		t.Errorf("Command: %s", got)
	}
	if strings.Contains(Quote("plain-word_1.2"), "'") {
		t.Error("a safe word need not be quoted")
	}
}

// Words reads back what Command writes, and a real shell splits every line Words
// accepts into the same words; lines only a shell can run are refused.
func TestWordsAsAShellReadsThem(t *testing.T) {
	for _, words := range [][]string{
		{"tc", "-s", "-j", "qdisc", "show", "dev", "eth0"},
		{"sh", "-c", "for d; do ethtool -k \"$d\"; done", "sh", "eth0", "a b"},
		{"cat", "/proc/sys/net/ipv4/tcp_ecn"},
		{"printf-like", "it's", "''", "", "'", "a\nb", "$HOME", "`id`", "x;y", "*", "ünïcode", "a=b"},
		{"/usr/sbin/tc", "qdisc", "replace", "dev", "test0", "root", "handle", "1:", "mq"},
		{"a b", "c"},
	} {
		line := Command(words...)
		got, ok := Words(line)
		if !ok || strings.Join(got, "\x00") != strings.Join(words, "\x00") {
			t.Errorf("Words(%q) = %q, %v; want %q", line, got, ok, words)
		}
	}
	accepted := []string{"tc qdisc show", `x ab'c d'\''e'f g`, "x ''", "x '' y", `/bin/x a\'b`}
	refused := []string{"", " tc", "tc ", "tc  x", "tc\tx", "tc | head", "tc >/dev/null", "tc $X", "tc *", "tc ~",
		"tc 'unterminated", `tc a\b`, `tc \`, "a=b tc", "echo hi", "exit 3", "cd /", ". ./x", "'tc' x", "if x", "! x",
		"tc #c", "tc;x", "tc&", "tc\nx", `it\'s x`, "'' x"}
	for _, line := range accepted {
		got, ok := Words(line)
		if !ok {
			t.Errorf("Words(%q) refused", line)
			continue
		}
		// sh's own split of the line: each word NUL-terminated.
		out, err := exec.Command("sh", "-c", `eval "set -- $1"; for a; do printf '%s\0' "$a"; done`, "sh", line).Output()
		if err != nil {
			t.Fatalf("sh on %q: %v", line, err)
		}
		if want := strings.TrimSuffix(string(out), "\x00"); strings.Join(got, "\x00") != want {
			t.Errorf("Words(%q) = %q; sh reads %q", line, got, strings.Split(want, "\x00"))
		}
	}
	for _, line := range refused {
		if got, ok := Words(line); ok {
			t.Errorf("Words(%q) = %q, want it left to a shell", line, got)
		}
	}
}

// Whatever bytes a line holds, Words either refuses it or returns words that
// Command writes back as the very same line.
func FuzzWords(f *testing.F) {
	for _, s := range []string{"tc qdisc show dev eth0", `sh -c 'a'\''b' sh x`, "x ''", "a=b c", "echo x", `x \'`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		words, ok := Words(line)
		if !ok {
			return
		}
		if len(words) == 0 || words[0] == "" || shellWords[words[0]] || strings.ContainsRune(words[0], '=') {
			t.Fatalf("Words(%q) = %q: a first word it must refuse", line, words)
		}
		for _, w := range words {
			if again, ok := Words(Command(append([]string{"x"}, w)...)); !ok || len(again) != 2 || again[1] != w {
				t.Fatalf("word %q of %q does not survive Command and Words: %q", w, line, again)
			}
		}
	})
}
