// Command bloatbench A/B-tests Linux queueing disciplines on a real testbed.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/report"
	"github.com/urfave/cli/v2"
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

func newApp() *cli.App {
	return &cli.App{
		Name:                 "bloatbench",
		Usage:                "A/B-test Linux qdiscs on a testbed: TCP streams and ping, flent-style summaries",
		Version:              buildVersion(),
		EnableBashCompletion: true,
		Commands: []*cli.Command{runCommand(), summaryCommand(), compareCommand(), exportCommand(), plotCommand(), testsCommand(), setupsCommand(), hostsCommand(), restoreCommand(), batchCommand(), historyCommand(),
			testbedCommand(), versionCommand(), agentCommand()},
	}
}

// offline says whether a verb only reads files and writes reports: nothing on a
// host to put back, so Ctrl-C may end it at once.
func offline(verb string) bool {
	switch verb {
	case "summary", "compare", "export", "plot", "history", "tests", "setups", "version":
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
	exit := func(code int) {
		stdout.Flush()
		stderr.Flush()
		os.Exit(code)
	}
	if len(os.Args) > 1 && offline(os.Args[1]) {
		go func() {
			<-ctx.Done()
			time.Sleep(interruptGrace)
			fmt.Fprintln(stderr, "bloatbench: interrupted")
			exit(130)
		}()
	}
	app := newApp()
	app.Writer, app.ErrWriter = stdout, stderr
	if err := app.RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(stderr, "bloatbench:", err)
		exit(1)
	}
	exit(0)
}
