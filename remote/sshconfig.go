package remote

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"

	"github.com/bloatbench/bloatbench/inventory"
)

// NewDialer reads ~/.ssh/config when there is one and takes ssh-agent from the
// environment. What it skips in that file it says on warn. Without a home
// directory it fails: ~/.ssh's keys and known_hosts would be looked for under
// the working directory instead.
func NewDialer(acceptNew bool, warn io.Writer) (*Dialer, error) {
	home, err := inventory.HomeDir()
	if err != nil {
		return nil, fmt.Errorf("find ~/.ssh: %w", err)
	}
	cfg, err := loadSSHConfig(filepath.Join(home, ".ssh", "config"), warn)
	if err != nil {
		return nil, err
	}
	return &Dialer{Config: cfg, AgentSocket: os.Getenv("SSH_AUTH_SOCK"), AcceptNew: acceptNew, Home: home}, nil
}

// loadSSHConfig reads an ssh_config file (~/.ssh/config), or returns nil when there
// is none. What kevinburke/ssh_config cannot read, or would read as something else,
// is skipped with a warning to warn naming the file and line: one Match block the
// parser does not know must not make every command fail, as OpenSSH's own client
// goes on reading it. Only a file that cannot be read at all is an error.
func loadSSHConfig(path string, warn io.Writer) (*ssh_config.Config, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w (fix its permissions, or move it away to connect without it)", path, err)
	}
	cfg, warnings := parseSSHConfig(path, b)
	for _, w := range warnings {
		fmt.Fprintln(warn, "warning:", w)
	}
	return cfg, nil
}

var (
	// blockRE matches a Host or Match line: the keyword, then spaces or '='.
	blockRE = regexp.MustCompile(`^\s*(?i:(host|match))(?:\s*=\s*|\s+)(.*)$`)
	// posRE is how ssh_config's errors start: "(line, column): ".
	posRE = regexp.MustCompile(`^\((\d+), \d+\): `)
)

// parseSSHConfig decodes an ssh_config file's text, skipping what the parser cannot
// use, and says what it skipped (path names the file in those messages). It returns
// nil when nothing could be read.
func parseSSHConfig(path string, b []byte) (*ssh_config.Config, []string) {
	lines := strings.Split(string(b), "\n")
	var warnings []string
	// Skipped lines become blank, so that the parser's line numbers stay the file's.
	skip := func(from, to int) {
		for i := from; i < to; i++ {
			lines[i] = ""
		}
	}
	// A Match block is skipped unless it is "Match all" or "Match host LIST": the
	// parser refuses the other criteria (exec, user, originalhost...), and would
	// read a line with several ("Match host foo exec CMD") as host patterns,
	// applying the block to host foo whatever CMD says.
	for i, l := range lines {
		m := blockRE.FindStringSubmatch(l)
		if m == nil || !strings.EqualFold(m[1], "match") {
			continue
		}
		crit := matchCriteria(m[2])
		switch {
		case len(crit) == 1 && strings.EqualFold(crit[0], "all"):
		case len(crit) == 2 && strings.EqualFold(crit[0], "host"):
			// OpenSSH's host list is comma-separated; the parser takes patterns
			// separated by spaces. (OpenSSH matches it against the HostName, the
			// parser against the alias: the same unless the alias is renamed.)
			lines[i] = "Match host " + strings.ReplaceAll(crit[1], ",", " ")
		default:
			end := blockEnd(lines, i)
			warnings = append(warnings, fmt.Sprintf("%s:%d: skipped %s (lines %d-%d): bloatbench evaluates only \"Match all\" and \"Match host LIST\", "+
				"so these settings apply to no host; put those it needs under a Host line", path, i+1, strings.TrimSpace(l), i+1, end))
			skip(i, end)
		}
	}
	// Then whatever else the parser refuses (an Include of a file it cannot read,
	// a bad host pattern), one line or block at a time: each round blanks at least
	// one line, so this ends.
	for {
		cfg, err := ssh_config.DecodeBytes([]byte(strings.Join(lines, "\n")))
		if err == nil {
			return cfg, warnings
		}
		m := posRE.FindStringSubmatch(err.Error())
		var n int
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		if n < 1 || n > len(lines) || strings.TrimSpace(lines[n-1]) == "" {
			return nil, append(warnings, fmt.Sprintf("%s: %v: going on without the file (check it with `ssh -G HOST`)", path, err))
		}
		msg := strings.TrimSpace(err.Error()[len(m[0]):])
		if blockRE.MatchString(lines[n-1]) {
			end := blockEnd(lines, n-1)
			warnings = append(warnings, fmt.Sprintf("%s:%d: skipped %s (lines %d-%d): %s", path, n, strings.TrimSpace(lines[n-1]), n, end, msg))
			skip(n-1, end)
		} else {
			warnings = append(warnings, fmt.Sprintf("%s:%d: skipped %s: %s", path, n, strings.TrimSpace(lines[n-1]), msg))
			skip(n-1, n)
		}
	}
}

// blockEnd is the index of the first line after the block that starts at line i:
// the next Host or Match line, or the end.
func blockEnd(lines []string, i int) int {
	for j := i + 1; j < len(lines); j++ {
		if blockRE.MatchString(lines[j]) {
			return j
		}
	}
	return len(lines)
}

// matchCriteria splits a Match line's arguments as OpenSSH does: on spaces, with
// double quotes around an argument that has spaces, up to a comment.
func matchCriteria(s string) []string {
	var out []string
	for s = strings.TrimSpace(s); s != "" && s[0] != '#'; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return append(out, s[1:])
			}
			out = append(out, s[1:end+1])
			s = s[end+2:]
			continue
		}
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			end = len(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// proxyOf is how ~/.ssh/config says to reach alias: ProxyJump or ProxyCommand,
// whichever comes first, as OpenSSH takes the first value obtained of the two (they
// are exclusive: a "Host *" ProxyCommand does not apply to a host given a
// ProxyJump above it). A first value of "none" means neither. It returns "" for
// both when there is none.
//
// ssh_config's Get cannot say which of two keys comes first, so this walks the
// blocks as Get does. In an Included file that sets both for the host the order is
// not known: that is an error saying to keep one.
func proxyOf(cfg *ssh_config.Config, alias string) (jump, command string, err error) {
	if cfg == nil {
		return "", "", nil
	}
	pick := func(key, v string) (string, string, error) {
		if strings.EqualFold(v, "none") {
			return "", "", nil
		}
		if strings.EqualFold(key, "ProxyJump") {
			return v, "", nil
		}
		return "", v, nil
	}
	for _, h := range cfg.Hosts {
		if !h.Matches(alias) {
			continue
		}
		for _, n := range h.Nodes {
			switch n := n.(type) {
			case *ssh_config.KV:
				if strings.EqualFold(n.Key, "ProxyJump") || strings.EqualFold(n.Key, "ProxyCommand") {
					return pick(n.Key, n.Value)
				}
			case *ssh_config.Include:
				j, c := n.Get(alias, "ProxyJump"), n.Get(alias, "ProxyCommand")
				switch {
				case j != "" && c != "":
					return "", "", fmt.Errorf("~/.ssh/config sets both ProxyJump %q and ProxyCommand %q for %s in an Included file, "+
						"whose order bloatbench cannot tell: keep one of them (ssh uses the first)", j, c, alias)
				case j != "":
					return pick("ProxyJump", j)
				case c != "":
					return pick("ProxyCommand", c)
				}
			}
		}
	}
	return "", "", nil
}
