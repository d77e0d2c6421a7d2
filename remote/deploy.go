package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// unameArch maps `uname -m` to Go's GOARCH for the architectures worth naming.
var unameArch = map[string]string{"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386", "riscv64": "riscv64", "ppc64le": "ppc64le", "s390x": "s390x"}

// FileHash is the SHA-256 of a file, hex.
func FileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HashLater hashes the file at path in the background; what it returns waits for
// the SHA-256 (hex), or the error.
func HashLater(path string) func() (string, error) {
	type result struct {
		hash string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		h, err := FileHash(path)
		done <- result{h, err}
	}()
	return sync.OnceValues(func() (string, error) {
		r := <-done
		return r.hash, r.err
	})
}

// AgentKeepDays is how long an agent binary no controller uses stays on a host.
const AgentKeepDays = 7

// SlowShell is the login shell start time worth a warning: every SSH command pays it.
const SlowShell = time.Second

// The bootstrap's lines on stdout, each on a line of its own. Whatever a login shell
// prints before them (a motd, an rc file's echo) is skipped.
const (
	markStart = "bloatbench-bootstrap-start" // the shell is up: uname follows
	markNeed  = "bloatbench-bootstrap-need"  // no agent of this hash: send its size, then the bytes
	markRun   = "bloatbench-bootstrap-run"   // the agent starts now: the protocol follows
	// sudo -n refused the agent: the login user's name and the agent's path follow,
	// and on the next lines up to the end, sudo's words
	markNoSudo = "bloatbench-bootstrap-nosudo"
)

// The bootstrap is the only command a run sends through a host's login shell: it
// reports the system, finds the agent in the cache (or takes it on stdin), prunes
// stale ones and execs it, so the shell's start-up is paid once per host. It is run
// as `exec sh -c SCRIPT sh ARGS`: values arrive as arguments, never as script text,
// and the script holds no single quote or backslash, so it is one word even for a
// login shell that is not POSIX (fish). $1 is the agent's SHA-256, $2 its short name,
// $3 the days an unused agent is kept, $4 "sudo" to run the agent as root through
// `sudo -n` (its cache stays in the login user's home) or "", $5 the controller's
// time (Unix seconds).
//
// Hashing the cached agent (tens of MB) cost 80 ms of CPU a host every run on a
// 2-core EPYC, more than anything else the bootstrap does. So once its hash has
// been checked, its size, inode and mtime (to the nanosecond, and in seconds) are
// kept beside it with the hash, in checked-SHORTHASH (not agent-*, which sudoers
// rules match): a file that still has them is the file that was checked, as any
// write to it changes its mtime and a file put in its place has another inode. The
// mtime also says when a controller last used it (the pruning below): once it is a
// day old, the agent is stamped as used and its hash checked again.
var bootstrapScript = strings.Join([]string{
	bootstrapStart,
	`d="${XDG_CACHE_HOME:-${HOME:-.}/.cache}/bloatbench"`,
	`p="$d/agent-$2"`,
	`c="$d/checked-$2"`,
	`h="$1"`,
	`stat_of() { st=$(stat -c "%s %i %y %Y" "$p" 2> /dev/null) || st=; }`,
	// Written through a file of its own and renamed, as hosts may share a home.
	`stamp() { stat_of; [ -n "$st" ] && echo "$h $st" > "$c.$$" && mv -f "$c.$$" "$c"; rm -f "$c.$$"; }`,
	`stat_of`,
	`if [ -x "$p" ] && [ -n "$st" ] && [ -r "$c" ] && IFS= read -r s < "$c" && [ "$s" = "$h $st" ] && [ "${st##* }" -gt "$(($5 - 86400))" ]; then start "$p" "$4"; fi`,
	// touch -c: without it coreutils' touch opens the file for writing to stamp it,
	// and another host sharing this home (the local lab's namespaces do) that execs
	// the agent in that instant fails with ETXTBSY (seen in CI); -c stamps the path.
	`if [ -x "$p" ] && [ "$(sha256sum < "$p")" = "$h  -" ]; then touch -c "$p"; stamp; start "$p" "$4"; fi`,
	`echo "` + markNeed + `"`,
	`IFS= read -r n || exit 3`,
	`case "$n" in ""|*[!0-9]*) exit 3;; esac`,
	`mkdir -p "$d" || exit 4`,
	// Hosts may share a home (the local lab's namespaces do): each upload writes a
	// file of its own and renames it into place.
	`t="$p.$$.tmp"`,
	`if ! { head -c "$n" > "$t" && chmod 755 "$t" && [ "$(sha256sum < "$t")" = "$h  -" ]; }; then rm -f "$t"; echo "the agent did not arrive whole in $d" >&2; exit 5; fi`,
	// An agent another host put there meanwhile stays: replacing it would give it a
	// new inode between that host's `sudo -l` and its exec, and sudo matches a glob
	// rule by inode. ln makes the name only when it is free; a damaged one is replaced.
	`ln "$t" "$p" 2> /dev/null || { [ -x "$p" ] && [ "$(sha256sum < "$p")" = "$h  -" ]; } || mv -f "$t" "$p" || { rm -f "$t"; exit 5; }`,
	`rm -f "$t"`,
	`stamp`,
	// A new version arrived: agents (and uploads cut short, and stamps) no
	// controller has used for a while go. Not at once: controllers of other versions
	// may share this host.
	`find "$d" -maxdepth 1 -type f "(" -name "agent-*" ! -name "agent-$2" -o -name "checked-*" ! -name "checked-$2" ")" -mtime +"$3" -exec rm -f {} + 2>/dev/null`,
	`start "$p" "$4"`,
}, "\n")

// bootstrapStart reports the system and defines start, which execs the agent $1:
// as the login user, or with $2 = sudo as root through `sudo -n`, after asking sudo
// (`sudo -n -l`, which never prompts) whether this very command is allowed without a
// password, so a refusal is told apart from an agent that dies. A login that is not
// root often has no /usr/sbin in its PATH: tc lives there.
var bootstrapStart = strings.Join([]string{
	`echo "` + markStart + ` $(uname -sm)"`,
	`PATH="${PATH:-/usr/bin:/bin}:/usr/sbin:/sbin"; export PATH`,
	`start() {`,
	`  if [ "$2" != sudo ]; then echo "` + markRun + ` $1"; exec "$1" agent; fi`,
	`  if ! e=$(sudo -n -l "$1" agent 2>&1 > /dev/null); then echo "` + markNoSudo + ` $(id -un) $1"; echo "$e"; exit 6; fi`,
	`  echo "` + markRun + ` $1"`,
	`  exec sudo -n "$1" agent`,
	`}`,
}, "\n")

// With agent_path the binary is the host's own: report the system and run it. $1 is
// its path, $2 "sudo" or "".
var bootstrapPathScript = bootstrapStart + "\n" +
	`if [ ! -x "$1" ]; then echo "$1: not found, or not executable" >&2; exit 127; fi` + "\n" +
	`start "$1" "$2"`

// AgentOptions say which agent to start on a host.
type AgentOptions struct {
	// Self is the controller's executable and SelfHash its SHA-256 (hex): what is
	// copied to the host when its cache lacks it.
	Self, SelfHash string
	// AgentPath is a binary already on the host (the inventory's agent_path).
	AgentPath string
	// Sudo runs the agent as root through `sudo -n`: a login that is not root, on a
	// host where the run needs root (see inventory.Host.UseSudo).
	Sudo bool
	// Warn receives a note about a slow login shell; nil drops it.
	Warn func(string)
}

// Agent is an agent started on a host: its protocol runs over Stdin and Stdout.
type Agent struct {
	*Process
	// Path is the agent's path on the host; Installed says this start copied it there.
	Path      string
	Installed bool
	// ShellStart is how long the login shell took to run the bootstrap's first line.
	ShellStart time.Duration
	// Sudo says the agent runs as root through sudo.
	Sudo bool
}

// StartAgent starts the bloatbench agent on the host in one SSH command (see
// bootstrapScript). The login shell gets the host's connect timeout to run the first
// line, so a shell that hangs (a stale lock in an rc file) fails in seconds with a
// message saying so, not after the command timeout.
func (c *Conn) StartAgent(ctx context.Context, o AgentOptions) (*Agent, error) {
	name := c.Target.Name
	sudo := ""
	if o.Sudo {
		sudo = "sudo"
	}
	cmd := "exec sh -c " + Quote(bootstrapScript) + " sh " + Command(o.SelfHash, shortHash(o.SelfHash), fmt.Sprint(AgentKeepDays), sudo, fmt.Sprint(time.Now().Unix()))
	if o.AgentPath != "" {
		cmd = "exec sh -c " + Quote(bootstrapPathScript) + " sh " + Command(o.AgentPath, sudo)
	}
	began := time.Now()
	// The agent's session outlives ctx: after Ctrl-C the run still stops its jobs
	// and restores the hosts through it. Only the bootstrap ends with ctx.
	p, err := c.Start(context.WithoutCancel(ctx), cmd)
	if err != nil {
		return nil, err
	}
	stopOnCancel := context.AfterFunc(ctx, func() { c.Close() })
	defer stopOnCancel()
	a := &Agent{Process: p, Sudo: o.Sudo}
	// One watchdog for every phase: when it fires it closes the connection (a closed
	// session alone still waits for the remote end, which may hang), the read below
	// fails, and phase says what was being waited for. Nothing else uses the
	// connection yet.
	var mu sync.Mutex
	phase := ""
	expired := false
	watch := time.AfterFunc(time.Hour, func() {
		mu.Lock()
		expired = true
		mu.Unlock()
		c.Close()
	})
	defer watch.Stop()
	arm := func(what string, d time.Duration) {
		mu.Lock()
		phase = what
		mu.Unlock()
		watch.Reset(d)
	}
	fail := func(err error) (*Agent, error) {
		if errors.Is(err, errEnded) {
			// Its stdout ended: its stderr comes on a stream of its own, whole once
			// the session has the exit status.
			select {
			case <-p.Exited():
			case <-time.After(2 * time.Second):
			}
		}
		p.Close()
		mu.Lock()
		timedOut, what := expired, phase
		mu.Unlock()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("host %s: start the agent: %w", name, context.Cause(ctx))
		case timedOut:
			return nil, fmt.Errorf("host %s: %s", name, what)
		}
		if t := strings.TrimSpace(p.StderrTail()); t != "" {
			err = fmt.Errorf("%w; its stderr: %s", err, t)
		}
		return nil, err
	}
	startup := c.Target.ConnectTimeout
	arm(fmt.Sprintf("the login shell did not run a command within %v of the SSH session opening: something in the "+
		"shell's start-up files (~/.bashrc, ~/.profile, /etc/profile.d) is slow or hangs, e.g. a stale lock of pyenv "+
		"(~/.pyenv/shims/.pyenv-shim); `time %s true` should return at once. Fix the start-up files, or raise "+
		"connect_timeout for the host in the inventory", startup, c.Target.sshCommand()), startup)
	out := bufio.NewReaderSize(p.Stdout, 64<<10)
	line, err := readMark(out, markStart)
	if err != nil {
		return fail(fmt.Errorf("host %s: the agent's bootstrap: %w", name, err))
	}
	a.ShellStart = time.Since(began)
	if a.ShellStart > SlowShell && o.Warn != nil {
		o.Warn(fmt.Sprintf("host %s: its login shell took %.1fs to run a command; every SSH command pays that (bloatbench sends one "+
			"a run): check ~/.bashrc, ~/.profile and the like on the host (`time %s true`)", name, a.ShellStart.Seconds(), c.Target.sshCommand()))
	}
	f := strings.Fields(line)
	if o.AgentPath == "" && (len(f) != 3 || !strings.EqualFold(f[1], runtime.GOOS) || unameArch[f[2]] != runtime.GOARCH) {
		return fail(fmt.Errorf("host %s is %s, but this bloatbench is built for %s/%s: build one for the host (GOOS=linux GOARCH=... go build ./cmd/bloatbench), copy it there, and set agent_path for the host in the inventory",
			name, strings.Join(f[1:], " "), runtime.GOOS, runtime.GOARCH))
	}
	arm(fmt.Sprintf("the agent's bootstrap did not finish within %v", c.Target.CommandTimeout), c.Target.CommandTimeout)
	line, err = readMark(out, markNeed, markRun, markNoSudo)
	if err == nil && strings.HasPrefix(line, markNoSudo) {
		return c.noSudo(p, out, strings.TrimPrefix(line, markNoSudo+" "), o.AgentPath != "")
	}
	if err != nil {
		if o.AgentPath != "" {
			return fail(fmt.Errorf("host %s: agent_path %s does not run: %w", name, o.AgentPath, err))
		}
		return fail(fmt.Errorf("host %s: look for the agent: %w", name, err))
	}
	if line == markNeed {
		bin, err := os.ReadFile(o.Self)
		if err != nil {
			return fail(fmt.Errorf("read own executable: %w", err))
		}
		arm(fmt.Sprintf("copying the agent (%d bytes) did not finish within %v", len(bin), c.Target.CommandTimeout), c.Target.CommandTimeout)
		if _, err := io.Copy(p.Stdin, io.MultiReader(strings.NewReader(fmt.Sprintf("%d\n", len(bin))), bytes.NewReader(bin))); err != nil {
			return fail(fmt.Errorf("host %s: copy the agent there: %w", name, err))
		}
		if line, err = readMark(out, markRun, markNoSudo); err != nil {
			return fail(fmt.Errorf("host %s: copy the agent there: %w", name, err))
		}
		if strings.HasPrefix(line, markNoSudo) {
			return c.noSudo(p, out, strings.TrimPrefix(line, markNoSudo+" "), o.AgentPath != "")
		}
		a.Installed = true
	}
	a.Path = strings.TrimSpace(strings.TrimPrefix(line, markRun))
	if !watch.Stop() {
		// The watchdog fired just as the agent started: the session is closed.
		return fail(errors.New("closed"))
	}
	p.Stdout = out
	return a, nil
}

// ErrNoSudo marks a host whose sudo would not run the agent as root without a
// password.
var ErrNoSudo = errors.New("sudo refused the agent")

// noSudo is the error for a host whose `sudo -n -l AGENT agent` failed: the host,
// the user, sudo's own words (the rest of out) and the sudoers line that allows the
// agent. The agent has not started, so nothing on any host was changed.
func (c *Conn) noSudo(p *Process, out io.Reader, userPath string, own bool) (*Agent, error) {
	defer p.Close()
	user, path, _ := strings.Cut(userPath, " ")
	b, _ := io.ReadAll(io.LimitReader(out, 4096)) // the script exits after them; the watchdog bounds the wait
	said := strings.Join(strings.Fields(string(b)), " ")
	if said == "" {
		said = "(it said nothing)"
	}
	if user == "" {
		user = c.Target.User
	}
	return nil, fmt.Errorf("host %s: %w: the agent is to run as root through `sudo -n` (the host logs in as %s), and sudo "+
		"said: %s. Nothing was changed on any host. Allow the agent without a password, with visudo -f "+
		"/etc/sudoers.d/bloatbench on the host:\n    %s\nor log in as root (the inventory's ssh: root@...)",
		c.Target.Name, ErrNoSudo, user, said, SudoersLine(user, path, own))
}

// SudoersLine is the sudoers rule that lets user run the agent at path as root
// without a password, with the one argument the bootstrap gives it: every agent
// bloatbench installs in that cache folder (one per version, so an upgrade needs no
// new rule), or, when own (agent_path), that binary. A glob over a folder the user
// writes lets the user run anything as root; so does the agent itself, whose exec
// op runs any command the controller sends, whatever binary the rule pins (sudo's
// sha256: digests included). Either way the rule is root for the user: give it only
// to a user you would give root.
func SudoersLine(user, path string, own bool) string {
	cmd := path
	if !own {
		if i := strings.LastIndex(path, "/"); i >= 0 {
			cmd = path[:i+1] + "agent-*"
		}
	}
	return fmt.Sprintf("%s ALL=(root) NOPASSWD: %s agent", user, cmd)
}

// sshCommand is the OpenSSH command line that reaches the target, for messages.
func (t Target) sshCommand() string {
	host, port, err := net.SplitHostPort(t.Addr)
	if err != nil {
		return "ssh " + Quote(t.User+"@"+t.Addr)
	}
	cmd := "ssh "
	if port != "22" {
		cmd += "-p " + port + " "
	}
	return cmd + Quote(t.User+"@"+host)
}

func shortHash(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}

// errEnded is a bootstrap whose command ended before the agent started.
var errEnded = errors.New("the command ended before the agent started")

// maxJunk bounds what a login shell may print before the bootstrap's first line.
const maxJunk = 1 << 20

// readMark reads lines until one starts with one of marks and returns it; other lines
// (a motd, an rc file's echo) are skipped, up to maxJunk bytes.
func readMark(r *bufio.Reader, marks ...string) (string, error) {
	junk := 0
	var last []byte
	for junk < maxJunk {
		b, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			junk += len(b)
			continue
		}
		if err != nil {
			if err == io.EOF {
				if t := strings.TrimSpace(string(last)); t != "" {
					return "", fmt.Errorf("%w (last output %q)", errEnded, t)
				}
				return "", errEnded
			}
			return "", err
		}
		line := strings.TrimRight(string(b), "\r\n")
		for _, m := range marks {
			if line == m || strings.HasPrefix(line, m+" ") {
				return line, nil
			}
		}
		junk += len(b)
		last = append(last[:0], b...)
	}
	return "", fmt.Errorf("more than %d bytes of output before the agent started", maxJunk)
}
