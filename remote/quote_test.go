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
