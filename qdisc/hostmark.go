package qdisc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/remote"
)

// MarkDir is where a host keeps the marks of the runs that changed it, on the host
// itself: a controller's journals and locks live in its own XDG_STATE_HOME, which a
// second controller (or the same one with another XDG_STATE_HOME) does not see, but
// every controller sees the host. /run is a tmpfs: a reboot, which gives every
// device the kernel's qdiscs back, takes the marks with it.
const MarkDir = "/run/bloatbench/journal"

// Mark says on a host that a run changed one of its devices (or its sysctls) and has
// not put it back yet: written before the first change, removed once restored.
type Mark struct {
	Journal    string    `json:"journal"`    // the journal file, on Controller
	Controller string    `json:"controller"` // the controller's host name
	PID        int       `json:"pid"`
	Created    time.Time `json:"created"`
	Setup      string    `json:"setup"`
	// Path is the mark's file on the host (not stored).
	Path string `json:"-"`
}

// MarkPath is the mark of dev on the host with identity id, in dir (MarkDir but in
// tests), or of its sysctls when dev is "". The identity is in the name because the
// local lab's hosts are network namespaces of one machine, which share /run.
func MarkPath(dir, id, dev string) string {
	if dev == "" {
		return dir + "/sysctls@" + escName(id) + ".json"
	}
	return dir + "/dev-" + escName(dev) + "@" + escName(id) + ".json"
}

// MarkOf is j's mark.
func (j *Journal) MarkOf() Mark {
	return Mark{Journal: j.path, Controller: j.Controller, PID: j.PID, Created: j.Created, Setup: j.Setup}
}

// readMarksScript prints each mark file of $@ that exists after a @@PATH line.
const readMarksScript = `for f in "$@"; do
  if [ -f "$f" ]; then echo "@@$f"; cat "$f"; echo; fi
done
true`

// ReadMarks reads the marks at paths on a host; a path with none is left out.
func ReadMarks(ctx context.Context, r Runner, host string, paths []string) ([]Mark, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	out, err := r.Output(ctx, remote.Command(append([]string{"sh", "-c", readMarksScript, "sh"}, paths...)...), nil)
	if err != nil {
		return nil, fmt.Errorf("host %s: read the marks of unrestored runs (%s): %w", host, strings.Join(paths, " "), err)
	}
	var marks []Mark
	for _, part := range bytes.Split(out, []byte("@@"))[1:] {
		path, body, _ := bytes.Cut(part, []byte("\n"))
		m := Mark{Journal: "(unreadable mark)"}
		if err := json.Unmarshal(bytes.TrimSpace(body), &m); err != nil {
			m = Mark{Journal: fmt.Sprintf("(unreadable mark: %v)", err)}
		}
		m.Path = string(path)
		marks = append(marks, m)
	}
	return marks, nil
}

// writeMarkScript writes stdin to $1 through a temporary file, so that a mark is
// never half written.
const writeMarkScript = `mkdir -p "${1%/*}" && cat > "$1.tmp" && mv -f "$1.tmp" "$1"`

// WriteMark writes m at path on a host.
func WriteMark(ctx context.Context, r Runner, host, path string, m Mark) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := r.Output(ctx, remote.Command("sh", "-c", writeMarkScript, "sh", path), bytes.NewReader(b)); err != nil {
		return fmt.Errorf("host %s: write mark %s: %w", host, path, err)
	}
	return nil
}

// RemoveMark removes the mark at path on a host if it is journal's: a mark another
// run wrote since is that run's.
func RemoveMark(ctx context.Context, r Runner, host, path, journal string) error {
	marks, err := ReadMarks(ctx, r, host, []string{path})
	if err != nil || len(marks) == 0 || marks[0].Journal != journal {
		return err
	}
	if _, err := r.Output(ctx, remote.Command("rm", "-f", path), nil); err != nil {
		return fmt.Errorf("host %s: remove mark %s: %w", host, path, err)
	}
	return nil
}

// escName makes s one file name: every byte but letters, digits, '.', '-' and '_'
// escaped, so that distinct names stay distinct.
func escName(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
