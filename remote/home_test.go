package remote

import (
	"io"
	"strings"
	"testing"
)

// Without HOME the dialer is not made: ~/.ssh's keys, known_hosts and config would
// be looked for under the working directory, and a run from a systemd service with
// no User= would fail on an unknown host key far from the cause.
func TestNewDialerWithoutHome(t *testing.T) {
	t.Setenv("HOME", "")
	d, err := NewDialer(false, io.Discard)
	if err == nil {
		t.Fatalf("NewDialer without HOME: %+v, want an error", d)
	}
	for _, want := range []string{"~/.ssh", "HOME", "User=", "Environment=HOME="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Setenv("HOME", t.TempDir())
	if d, err := NewDialer(false, io.Discard); err != nil || d.Home == "" {
		t.Errorf("NewDialer with HOME: %+v, %v", d, err)
	}
}
