// Command bloatbench A/B-tests Linux queueing disciplines on a real testbed.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/bloatbench/bloatbench/report"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise the
// module's build information gives it.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
			if s.Key == "vcs.modified" && s.Value == "true" {
				v += "-dirty"
			}
		}
		return v
	}
	return "unknown"
}

// rootDescription is the root command's help text beyond its usage: what the exit
// codes mean.
const rootDescription = `Flags go before or after a verb's arguments: bloatbench summary FILE --format markdown
is bloatbench summary --format markdown FILE. bloatbench VERB --help tells a verb's flags.

Exit codes:
   0    ok
   1    an error
   2    a usage error: an unknown verb or flag, a missing argument, a bad flag value
   3    batch: a regression against --baseline
   4    batch: runs failed, or the batch was interrupted
   130  an offline verb (summary, compare, export, plot, history, tests, setups,
        version, help, completion) interrupted by Ctrl-C or SIGTERM`

func newApp() *cli.Command {
	app := &cli.Command{
		Name:                  "bloatbench",
		Usage:                 "A/B-test Linux qdiscs on a testbed: TCP streams and ping, flent-style summaries",
		UsageText:             "bloatbench VERB [flags] [arguments]",
		Description:           rootDescription,
		Version:               buildVersion(),
		EnableShellCompletion: true,
		Suggest:               true,
		Commands: []*cli.Command{runCommand(), summaryCommand(), compareCommand(), exportCommand(), plotCommand(), testsCommand(), setupsCommand(), hostsCommand(), restoreCommand(), batchCommand(), historyCommand(),
			testbedCommand(), versionCommand(), agentCommand()},
		ConfigureShellCompletionCommand: configureCompletion,
	}
	wire(app)
	return app
}

// offline says whether a verb only reads files and writes reports: nothing on a
// host to put back, so Ctrl-C may end it at once.
func offline(verb string) bool {
	switch verb {
	case "summary", "compare", "export", "plot", "history", "tests", "setups", "version", "help", "completion":
		return true
	}
	return false
}

// interruptGrace is how long an offline verb has, after Ctrl-C, to stop on its
// context (a read stops between records) before the process ends without it (a
// summary's own arithmetic does not look at the context).
const interruptGrace = 500 * time.Millisecond

func main() {
	limitHeapToAddressSpace()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// What reaches the terminal is inert, whoever wrote it (a host's output in the
	// log, a journal's names, an error quoting a file). The agent's protocol is on
	// os.Stdout itself and does not pass through these.
	stdout, stderr := report.NewTerminalWriter(os.Stdout), report.NewTerminalWriter(os.Stderr)
	// The process ends once, with what end says and returns as the exit code:
	// on the interrupt's timer or after the command, whichever comes first.
	var once sync.Once
	exit := func(end func() int) {
		once.Do(func() {
			code := end()
			stdout.Flush()
			stderr.Flush()
			os.Exit(code)
		})
	}
	interrupted := func() int {
		fmt.Fprintln(stderr, "bloatbench: interrupted")
		return exitInterrupted
	}
	isOffline := len(os.Args) > 1 && offline(os.Args[1])
	if isOffline {
		go func() {
			<-ctx.Done()
			time.Sleep(interruptGrace)
			exit(interrupted)
		}()
	}
	app := newApp()
	// ErrWriter stays a *report.TerminalWriter: batch's progress bars ask it for the
	// terminal behind it.
	app.Writer, app.ErrWriter = stdout, stderr
	err := app.Run(ctx, os.Args)
	if isOffline && ctx.Err() != nil {
		// It stopped on its context within the grace: interrupted all the same.
		exit(interrupted)
	}
	exit(func() int { return reportError(stderr, err) })
}
