package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Durations and cuts that are not numbers, are infinite or are absurd are refused,
// naming the flag and the value as given, before anything connects to a host or
// reads a file.
func TestFlagsRefuseNaNInfAndAbsurdValues(t *testing.T) {
	run := func(flag, value string) []string {
		// An inventory that does not exist: a flag let through fails later, on it.
		return []string{"bloatbench", "run", "-H", "/nonexistent/hosts.yaml", flag, value, "tcp_4down"}
	}
	cases := []struct {
		args        []string
		flag, given string
	}{
		{run("--length", "NaN"), "--length", "NaN"},
		{run("--length", "Inf"), "--length", "Inf"},
		{run("--length", "-Inf"), "--length", "-Inf"},
		{run("--length", "1e300"), "--length", "1e300"},
		{run("--length", "1e7"), "--length", "1e7"},               // 115 days
		{run("--length", "2000000h"), "--length", "2000000h"},     // 228 years
		{run("--length", "100000000h"), "--length", "100000000h"}, // past time.Duration
		{run("--step", "NaN"), "--step", "NaN"},
		{run("--step", "+Inf"), "--step", "+Inf"},
		{run("--delay", "NaN"), "--delay", "NaN"},
		{run("--delay", "infinity"), "--delay", "infinity"},
		{run("--delay", "1e6"), "--delay", "1e6"},
		// A week at 10 ms is 60 million steps: more than a report reads back.
		{[]string{"bloatbench", "run", "-H", "/nonexistent/hosts.yaml", "-l", "168h", "-s", "10ms", "tcp_4down"}, "--step", "10ms"},
		{run("--cut", "NaN,5"), "--cut", "NaN,5"},
		{run("--cut", "0,Inf"), "--cut", "0,Inf"},
		{run("--cut", "-Inf,5"), "--cut", "-Inf,5"},
		{run("--cut", "0,1e300"), "--cut", "0,1e300"},
		{run("--cut", "0,-Inf"), "--cut", "0,-Inf"},
		{run("--cut", "5,-1e300"), "--cut", "5,-1e300"},
		{run("--cut", "5,3"), "--cut", "5,3"},
		{[]string{"bloatbench", "summary", "--cut", "NaN,5", "/nonexistent.bb.json.gz"}, "--cut", "NaN,5"},
		{[]string{"bloatbench", "compare", "--cut", "5,NaN", "/nonexistent.bb.json.gz"}, "--cut", "5,NaN"},
	}
	for _, c := range cases {
		app := newApp()
		var out bytes.Buffer
		app.Writer, app.ErrWriter = &out, &out
		err := app.Run(context.Background(), c.args)
		name := strings.Join(c.args[1:], " ")
		switch {
		case err == nil:
			t.Errorf("%s: no error", name)
		case !strings.Contains(err.Error(), c.flag):
			t.Errorf("%s: error %q does not name %s", name, err, c.flag)
		case !strings.Contains(err.Error(), c.given):
			// The value as given, not what a conversion made of it.
			t.Errorf("%s: error %q does not say %s", name, err, c.given)
		}
	}
}

// A cut's END of 0 or less counts back from the run's end, as flent's --data-cutoff
// does: such cuts are taken, and the reading fails on the file, not the flag.
func TestCutFromTheEnd(t *testing.T) {
	for _, cut := range []string{"5,-5", "0,0", "3,0", "0,-0.5"} {
		app := newApp()
		var out bytes.Buffer
		app.Writer, app.ErrWriter = &out, &out
		err := app.Run(context.Background(), []string{"bloatbench", "summary", "--cut", cut, "/nonexistent.bb.json.gz"})
		if err == nil || strings.Contains(err.Error(), "--cut") {
			t.Errorf("--cut %s: %v, want it taken (and the missing file refused)", cut, err)
		}
	}
}
