package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/batch"
)

// The exit codes, as the root command's help tells them.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitRegression  = batch.ExitRegression // 3
	exitRunsFailed  = batch.ExitRunsFailed // 4
	exitInterrupted = 130
)

// usageError is a mistake in the command line (an unknown verb or flag, a missing
// argument, a bad flag value): the process exits 2 and shows the verb's usage.
type usageError struct {
	cmd *cli.Command // the verb whose usage is shown
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef is a usage error of cmd, formatted as fmt.Errorf does.
func usagef(cmd *cli.Command, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// asUsage makes err, a flag's value refused, a usage error of cmd (nil stays nil).
func asUsage(cmd *cli.Command, err error) error {
	if err == nil {
		return nil
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return &usageError{cmd: cmd, err: err}
}

// wire sets what every command of the tree shares: usage errors of our own
// (exit 2, a short usage on stderr, a suggestion for a near miss) in place of
// urfave/cli's whole help on stdout; an unknown verb refused, not taken for a help
// topic (urfave/cli exits 3 for it, the code of a batch's regression); and no help
// subcommand under a verb that has no verbs of its own, whose arguments are files
// and test names (a file named help is summarised, not taken for help).
func wire(cmd *cli.Command) {
	cmd.OnUsageError = onUsageError
	// A repeatable flag takes one value each time, commas and all: --te cc=cubic,bbr
	// is one parameter (urfave/cli splits at commas by default, v2 did too, and
	// refused the comma-separated cc the tests document), a journal's path may hold one.
	cmd.DisableSliceFlagSeparator = true
	// Exit codes are main's to decide, after the terminal writers are flushed.
	cmd.ExitErrHandler = func(context.Context, *cli.Command, error) {}
	if len(cmd.Commands) == 0 {
		cmd.HideHelpCommand = true
	} else {
		if cmd.Action == nil {
			cmd.Action = groupAction
		}
		if cmd.Command("help") == nil {
			cmd.Commands = append(cmd.Commands, helpCommand())
		}
	}
	for _, sub := range cmd.Commands {
		wire(sub)
	}
}

// helpCommand is the help verb of a command made of verbs, in place of urfave/cli's
// (whose usage errors are its own, and which shows only the first verb named):
// help VERB [SUB-VERB] shows that verb's help.
func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Aliases:   []string{"h"},
		Usage:     "list the verbs, or show one verb's help",
		ArgsUsage: "[VERB [SUB-VERB]]",
		HideHelp:  true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			of := cmd.Lineage()[1] // the command whose verbs these are
			args := cmd.Args().Slice()
			for len(args) > 1 && of.Command(args[0]) != nil && len(of.Command(args[0]).VisibleCommands()) > 0 {
				of, args = of.Command(args[0]), args[1:]
			}
			switch {
			case len(args) > 0:
				return showCommandHelp(ctx, of, args[0])
			case of.Root() == of:
				return cli.ShowRootCommandHelp(of)
			}
			return cli.ShowSubcommandHelp(of)
		},
	}
}

func init() {
	// "bloatbench help sumary", "bloatbench testbed --help upp": urfave/cli's own
	// answers "No help topic" with exit 3.
	cli.ShowCommandHelp = showCommandHelp
}

// showCommandHelp prints the help of cmd's verb name; for a name that is no verb
// of cmd, a usage error (or, when cmd has no verbs, as after "summary --help
// FILE", cmd's own help).
func showCommandHelp(ctx context.Context, cmd *cli.Command, name string) error {
	if cmd.Command(name) != nil {
		return cli.DefaultShowCommandHelp(ctx, cmd, name)
	}
	if len(cmd.VisibleCommands()) == 0 {
		tmpl := cmd.CustomHelpTemplate
		if tmpl == "" {
			tmpl = cli.CommandHelpTemplate
		}
		cli.HelpPrinter(cmd.Root().Writer, tmpl, cmd)
		return nil
	}
	return unknownVerb(cmd, name)
}

// groupAction is the action of a command made of verbs (the root, testbed, hosts,
// completion): its help without arguments, and a usage error for a verb it lacks.
func groupAction(_ context.Context, cmd *cli.Command) error {
	if name := cmd.Args().First(); name != "" {
		return unknownVerb(cmd, name)
	}
	if cmd.Root() == cmd {
		return cli.ShowRootCommandHelp(cmd)
	}
	return cli.ShowSubcommandHelp(cmd)
}

// unknownVerb is the usage error of a verb name that cmd does not have.
func unknownVerb(cmd *cli.Command, name string) error {
	path := verbPath(cmd)
	if path != "" {
		path += " "
	}
	msg := fmt.Sprintf("unknown verb %q", path+name)
	var verbs []string
	for _, sub := range cmd.VisibleCommands() {
		verbs = append(verbs, sub.Names()...)
	}
	if s := suggest(name, verbs); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", path+s)
	}
	return &usageError{cmd: cmd, err: errors.New(msg)}
}

var invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)

// onUsageError turns urfave/cli's errors in parsing a command line into usage
// errors worded as bloatbench's own: the flag as it is typed, and a suggestion.
func onUsageError(_ context.Context, cmd *cli.Command, err error, _ bool) error {
	// "bloatbench sumary --format x": the flag is unknown because the verb is.
	if name := cmd.Args().First(); name != "" && len(cmd.Commands) > 0 && cmd.Command(name) == nil {
		return unknownVerb(cmd, name)
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = "unknown flag " + dashed(name)
		if v := verbPath(cmd); v != "" {
			msg += " for " + v
		}
		var names []string
		for _, f := range cmd.VisibleFlags() {
			names = append(names, f.Names()...)
		}
		if s := suggest(name, names); s != "" {
			msg += fmt.Sprintf("; did you mean %s?", dashed(s))
		}
	} else if flag, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		msg = fmt.Sprintf("%s needs a value", dashed(strings.TrimLeft(flag, "-")))
	} else if m := invalidValue.FindStringSubmatch(msg); m != nil {
		detail := m[3]
		switch {
		case strings.Contains(detail, "invalid syntax"):
			detail = "not a number"
		case strings.Contains(detail, "out of range"):
			detail = "out of range"
		}
		msg = fmt.Sprintf("%s %q: %s", dashed(m[2]), m[1], detail)
	} else if strings.HasPrefix(msg, "Required flag") {
		var missing []string
		for _, f := range cmd.VisibleFlags() {
			if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() && !f.IsSet() {
				names := f.Names()
				m := dashed(names[0])
				if len(names) > 1 {
					m += " (" + dashed(names[1]) + ")"
				}
				missing = append(missing, m)
			}
		}
		if len(missing) > 0 {
			msg = fmt.Sprintf("%s needs %s", verbPath(cmd), strings.Join(missing, " and "))
		}
	}
	return &usageError{cmd: cmd, err: errors.New(msg)}
}

// verbPath is cmd's verbs after the program's name: "testbed up"; "" for the root.
func verbPath(cmd *cli.Command) string {
	p := cmd.Path()
	return strings.Join(p[1:], " ")
}

// dashed is a flag's name as typed: -H, --hosts.
func dashed(name string) string {
	if len([]rune(name)) == 1 {
		return "-" + name
	}
	return "--" + name
}

// suggest is the one of names nearest to a mistyped word, when near enough to be
// what was meant: a typo or two (by the optimal string alignment distance, a
// swap of two letters counting one), or the start of a single name; "" otherwise.
func suggest(word string, names []string) string {
	if len(word) < 2 {
		return ""
	}
	best, bestD := "", 0
	var prefixed []string
	for _, n := range names {
		if len(n) < 2 {
			continue
		}
		if strings.HasPrefix(n, word) {
			prefixed = append(prefixed, n)
		}
		d := osaDistance(word, n)
		if d <= max(1, len(n)/3) && (best == "" || d < bestD) {
			best, bestD = n, d
		}
	}
	if best == "" && len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// osaDistance is the optimal string alignment distance of a and b: insertions,
// deletions, substitutions and swaps of neighbours, each counting one.
func osaDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// synopsis is cmd's usage in short: its usage text's first paragraph, or its
// name, flags and arguments; and the verbs of a command made of them.
func synopsis(cmd *cli.Command) []string {
	var lines []string
	if cmd.UsageText != "" {
		para, _, _ := strings.Cut(cmd.UsageText, "\n\n")
		for _, l := range strings.Split(para, "\n") {
			lines = append(lines, strings.TrimSpace(l))
		}
	} else {
		l := cmd.FullName()
		if len(cmd.VisibleCommands()) > 0 {
			l += " VERB"
		}
		if len(cmd.VisibleFlags()) > 1 { // more than --help
			l += " [flags]"
		}
		if cmd.ArgsUsage != "" {
			l += " " + cmd.ArgsUsage
		}
		lines = append(lines, l)
	}
	for i := range lines {
		if i == 0 {
			lines[i] = "usage: " + lines[i]
		} else {
			lines[i] = "       " + lines[i]
		}
	}
	var verbs []string
	for _, sub := range cmd.VisibleCommands() {
		verbs = append(verbs, sub.Name)
	}
	if len(verbs) > 0 {
		lines = append(lines, "verbs: "+strings.Join(verbs, ", "))
	}
	return append(lines, fmt.Sprintf("(%s --help tells more)", cmd.FullName()))
}

// reportError writes what ended the command, if anything, on w and returns the
// process's exit code.
func reportError(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(w, "bloatbench:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		for _, l := range synopsis(ue.cmd) {
			fmt.Fprintln(w, l)
		}
		return exitUsage
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return exitError
}

// stringSlice is a repeatable flag's values with the spaces around each trimmed,
// as urfave/cli v2 gave them.
func stringSlice(cmd *cli.Command, name string) []string {
	var out []string
	for _, v := range cmd.StringSlice(name) {
		out = append(out, strings.TrimSpace(v))
	}
	return out
}

// bashInit replaces the completion script's start of a completion with one that
// works without the bash-completion package too (urfave/cli's needs its
// _get_comp_words_by_ref or _comp_initialize, and completes nothing without them).
const bashInit = `
# bloatbench: without the bash-completion package, the words as bash gives them.
__bloatbench_init_completion() {
  COMPREPLY=()
  if declare -F _comp_initialize >/dev/null 2>&1; then
    _comp_initialize "$@"
  elif declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
    _get_comp_words_by_ref "$@" cur prev words cword
  else
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    words=("${COMP_WORDS[@]}")
    cword="${COMP_CWORD}"
  fi
}
`

// configureCompletion makes urfave/cli's completion verb one of bloatbench's: listed
// in the help and the man page, with usage errors of its own.
func configureCompletion(c *cli.Command) {
	c.Hidden = false
	c.Usage = "print a shell completion script: bash, zsh, fish or pwsh"
	c.Description = "Source its output to complete bloatbench's verbs and flags: in bash (with or without the\n" +
		"bash-completion package), zsh, fish or PowerShell (pwsh)."
	c.UsageText = "bloatbench completion bash|zsh|fish|pwsh\n\nExamples:\n" +
		"   source <(bloatbench completion bash)   # in ~/.bashrc\n" +
		"   source <(bloatbench completion zsh)    # in ~/.zshrc\n" +
		"   bloatbench completion fish > ~/.config/fish/completions/bloatbench.fish"
	for _, sh := range c.Commands {
		sh.UsageText = "bloatbench completion " + sh.Name
		if sh.Name == "bash" {
			script := sh.Action
			sh.Action = func(ctx context.Context, cmd *cli.Command) error {
				if err := script(ctx, cmd); err != nil {
					return err
				}
				_, err := io.WriteString(cmd.Root().Writer, bashInit)
				return err
			}
		}
	}
	wire(c)
}
