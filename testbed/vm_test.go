package testbed

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// lockedLog is a log safe for concurrent writes, so that the race detector sees
// only what runLogged itself does.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// A build's stdout and stderr both reach the log and the tail an error quotes,
// from one writer at a time (run with -race: they were two goroutines' writes).
func TestRunLoggedTailOfBothStreams(t *testing.T) {
	var log lockedLog
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 200 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done; echo "E: the last words" >&2; exit 3`)
	err := runLogged(cmd, &log)
	if err == nil {
		t.Fatal("exit 3 gave no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "exit status 3") || !strings.HasSuffix(msg, "E: the last words") || strings.Count(msg, "\n") > 20 {
		t.Errorf("error %q: want the exit status then the last 20 lines, the last one E: the last words", msg)
	}
	if n := strings.Count(log.b.String(), "\n"); n != 401 {
		t.Errorf("the log has %d lines, want 401", n)
	}
}
