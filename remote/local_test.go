package remote

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestLocalOutput(t *testing.T) {
	l := Local{Name: "here", CommandTimeout: 5 * time.Second}
	out, err := l.Output(context.Background(), Command("sh", "-c", "cat; echo there"), strings.NewReader("hello "))
	if err != nil || string(out) != "hello there\n" {
		t.Errorf("got %q, %v", out, err)
	}
	_, err = l.Output(context.Background(), "echo oops >&2; exit 3", nil)
	if err == nil || err.Error() != "host here: echo oops >&2; exit 3: oops" {
		t.Errorf("failure: %v", err)
	}
	l.CommandTimeout = 100 * time.Millisecond
	_, err = l.Output(context.Background(), "sleep 10 & sleep 10", nil)
	if err == nil || !strings.Contains(err.Error(), "did not finish within 100ms") {
		t.Errorf("timeout: %v", err)
	}
}
