package remote

import "strings"

// Quote makes s one word for a POSIX shell, whatever it contains. Every value that
// reaches a remote command line passes through it.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Command joins words into a command line, quoting each.
func Command(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}

// shellWords are the words a shell treats as its own in a command's first place
// (reserved words and builtins of dash, bash and busybox sh): a command line that
// starts with one is left to the shell, whose meaning of it a program by the same
// name (echo, kill, test) need not share.
var shellWords = map[string]bool{
	"!": true, "{": true, "}": true, "[[": true, "]]": true, "case": true, "coproc": true, "do": true, "done": true,
	"elif": true, "else": true, "esac": true, "fi": true, "for": true, "function": true, "if": true, "in": true,
	"select": true, "then": true, "time": true, "until": true, "while": true,
	".": true, ":": true, "[": true, "alias": true, "bg": true, "break": true, "builtin": true, "cd": true,
	"command": true, "continue": true, "declare": true, "echo": true, "eval": true, "exec": true, "exit": true,
	"export": true, "false": true, "fc": true, "fg": true, "getopts": true, "hash": true, "jobs": true, "kill": true,
	"let": true, "local": true, "printf": true, "pwd": true, "read": true, "readonly": true, "return": true,
	"set": true, "shift": true, "source": true, "test": true, "times": true, "trap": true, "true": true,
	"type": true, "typeset": true, "ulimit": true, "umask": true, "unalias": true, "unset": true, "wait": true,
}

// Words undoes Command: the words of a command line made only of words as Quote
// writes them (safe characters, '...' and \' pieces) separated by single spaces,
// whose first word names a program rather than a shell word or an assignment. ok
// is false for any other line (a pipe, a redirection, a variable, a glob, a
// builtin), which only a shell can run as meant. It lets a host run a command as
// its shell would without starting one: on an emulated guest a shell costs 35 ms.
func Words(line string) (words []string, ok bool) {
	if line == "" {
		return nil, false
	}
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ':
			if !inWord || i+1 == len(line) || line[i+1] == ' ' {
				return nil, false
			}
			words = append(words, w.String())
			w.Reset()
			inWord = false
			i++
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, false
			}
			w.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 2
		case c == '\\':
			if i+1 == len(line) || line[i+1] != '\'' {
				return nil, false
			}
			w.WriteByte('\'')
			inWord = true
			i += 2
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_./=:,+@%", c) >= 0:
			w.WriteByte(c)
			inWord = true
			i++
		default:
			return nil, false
		}
	}
	words = append(words, w.String())
	// A first word is a program's name as it was written, unquoted: "a=b" there
	// is an assignment, and a quoted reserved word is not reserved, which Words
	// does not track, so the first word must read the same quoted or not.
	first := words[0]
	if q := Quote(first); first == "" || !strings.HasPrefix(line, q) || len(line) > len(q) && line[len(q)] != ' ' ||
		strings.ContainsRune(first, '=') || shellWords[first] {
		return nil, false
	}
	return words, true
}
