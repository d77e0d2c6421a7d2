// Package batch runs a lab's nightly work: a batch file names tests (with loops over
// their parameters), setups and repetitions; the batch expands them into a run list,
// runs each in isolation (a failed run is recorded and the batch goes on), can resume
// where an interrupted batch stopped, writes the batch's comparison and charts, and
// judges it against an earlier batch with thresholds that decide regressions.
package batch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/tests"

	"github.com/bloatbench/bloatbench/internal/yamlkeys"
)

// File is a batch file as written.
type File struct {
	Name        string    `yaml:"name"`
	Inventory   string    `yaml:"inventory"`
	Output      string    `yaml:"output"`
	Length      string    `yaml:"length"`
	Step        string    `yaml:"step"`
	Delay       string    `yaml:"delay"`
	Repetitions int       `yaml:"repetitions"`
	Pause       string    `yaml:"pause"`
	Shuffle     *bool     `yaml:"shuffle"`
	Tests       []TestRef `yaml:"tests"`
	Setups      []string  `yaml:"setups"`
	Before      []Command `yaml:"before"`
	After       []Command `yaml:"after"`
	Thresholds  []Limit   `yaml:"thresholds"`
	Require     Require   `yaml:"require"`
}

// Require are conditions every run must meet, or it fails.
type Require struct {
	// Bottleneck fails a run whose qdiscs under test held less than half of its
	// loaded ping's excess delay (report.MinQdiscShare): the queue that delayed it
	// was elsewhere, and its numbers say nothing of the setup it ran.
	Bottleneck bool `yaml:"bottleneck"`
}

// TestRef is a test with its parameters; a parameter given a list loops over it.
type TestRef struct {
	Test   string               `yaml:"test"`
	Params map[string]yaml.Node `yaml:"params"`
}

// Command is a shell command run on one of the inventory's hosts around each run;
// its output is kept with the run.
type Command struct {
	Host string `yaml:"host"`
	Run  string `yaml:"run"`
}

// Limit is a threshold: how much worse than the baseline a metric may get before
// the batch calls it a regression.
type Limit struct {
	// Metric is a row of compare's side-by-side table, e.g. "Ping (ms) ICMP loaded
	// median" (its former name, "Ping loaded median", is read too).
	Metric string `yaml:"metric"`
	// Worse is the change that is a regression, with its sign: "+10%" (higher is
	// worse: latency) or "-5%" (lower is worse: throughput).
	Worse string `yaml:"worse"`
	// Significant also asks the Mann-Whitney U test to say the runs differ (p <
	// 0.05): with few repetitions a change may never be significant.
	Significant bool `yaml:"significant"`
}

// Batch is a batch file read and checked: everything a run needs, resolved.
type Batch struct {
	Path      string // the batch file
	Name      string
	Inventory *inventory.Inventory
	Output    string
	Length    time.Duration
	Step      time.Duration
	Delay     time.Duration
	Pause     time.Duration
	Shuffle   bool
	Setups    []*qdisc.Setup // nil entry: no setup
	// SetsSysctls says a run's test needs sysctls set on every host (tcp_ecn for
	// its flows' ecn:): every host's agent then runs as root.
	SetsSysctls bool
	Before      []Command
	After       []Command
	Limits      []ParsedLimit
	Require     Require
	Runs        []Run // in the file's order; Order gives the running order
}

// ParsedLimit is a threshold with its change as a fraction (+0.10, -0.05).
type ParsedLimit struct {
	Limit
	Change float64
}

// Run is one run of the batch.
type Run struct {
	// ID names the run in the batch's records and survives a resume: the test, its
	// parameters, the setup and the repetition.
	ID         string            `json:"id"`
	Test       string            `json:"test"`
	Parameters map[string]string `json:"parameters"`
	Setup      string            `json:"setup"` // "" = none
	Repetition int               `json:"repetition"`
}

// Defaults, as for `run`.
const (
	defaultLength = 60 * time.Second
	defaultStep   = 200 * time.Millisecond
	defaultDelay  = 5 * time.Second
	maxRuns       = 10000
	maxDuration   = 7 * 24 * time.Hour
)

// Load reads and checks a batch file, its inventory and its tests.
func Load(path string) (*Batch, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read batch file: %w", err)
	}
	return Parse(path, data)
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// Parse checks a batch file's bytes; path names it in errors and anchors relative
// paths.
func Parse(path string, data []byte) (*Batch, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlErr(path, err)
	}
	lines := inventory.KeyLines(&root)
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &inventory.Error{Path: path, Msg: "the file is empty: see docs/batches.md for an example"}
		}
		return nil, yamlErr(path, err)
	}
	fail := func(key, format string, args ...any) error {
		return &inventory.Error{Path: path, Line: lines[key], Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	b := &Batch{Path: path, Name: f.Name, Output: f.Output, Shuffle: f.Shuffle == nil || *f.Shuffle, Before: f.Before, After: f.After}
	if b.Name == "" {
		b.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if !safeName.MatchString(b.Name) {
		return nil, fail("name", "%q: write letters, digits, '-', '_' or '.' (it names the batch's folder)", b.Name)
	}
	dir := filepath.Dir(path)
	if f.Inventory == "" {
		return nil, fail("inventory", "missing: name the inventory file (hosts.yaml) the batch runs on")
	}
	inv, err := inventory.Load(relTo(dir, f.Inventory))
	if err != nil {
		return nil, fmt.Errorf("%w (the inventory of %s)", err, path)
	}
	b.Inventory = inv
	if b.Output == "" {
		b.Output = "results"
	}
	b.Output = relTo(dir, b.Output)
	for _, d := range []struct {
		key string
		in  string
		def time.Duration
		dst *time.Duration
		min time.Duration
	}{{"length", f.Length, defaultLength, &b.Length, time.Millisecond}, {"step", f.Step, defaultStep, &b.Step, 10 * time.Millisecond},
		{"delay", f.Delay, defaultDelay, &b.Delay, 0}, {"pause", f.Pause, 0, &b.Pause, 0}} {
		v, err := duration(d.in, d.def)
		if err == nil && (v < d.min || v > maxDuration) {
			err = fmt.Errorf("%v is out of range: from %v to %v", v, d.min, maxDuration)
		}
		if err != nil {
			return nil, fail(d.key, "%v", err)
		}
		*d.dst = v
	}
	if b.Step > b.Length {
		return nil, fail("step", "%v is longer than the length %v", b.Step, b.Length)
	}
	reps := f.Repetitions
	if reps == 0 {
		reps = 1
	}
	if reps < 0 {
		return nil, fail("repetitions", "%d: at least 1", reps)
	}
	if len(f.Tests) == 0 {
		return nil, fail("tests", "missing: list the tests to run, e.g. tests: [{test: tcp_4down}]")
	}
	setupNames := f.Setups
	if len(setupNames) == 0 {
		setupNames = []string{""}
		b.Setups = []*qdisc.Setup{nil}
	}
	for i, name := range f.Setups {
		s, err := qdisc.Resolve(name, inv)
		if err != nil {
			return nil, fail(fmt.Sprintf("setups[%d]", i), "%v", err)
		}
		if err := s.ScheduleFits(b.Length + 2*b.Delay); err != nil {
			return nil, fail(fmt.Sprintf("setups[%d]", i), "%v", err)
		}
		b.Setups = append(b.Setups, s)
	}
	for i, c := range append(append([]Command{}, f.Before...), f.After...) {
		key := fmt.Sprintf("before[%d]", i)
		if i >= len(f.Before) {
			key = fmt.Sprintf("after[%d]", i-len(f.Before))
		}
		if !runsOn(inv, c.Host) {
			return nil, fail(key+".host", "%q is not a client, a server (of any pair) or a bottleneck host of %s", c.Host, inv.Path)
		}
		if strings.TrimSpace(c.Run) == "" {
			return nil, fail(key+".run", "missing: the command to run on %s", c.Host)
		}
	}
	b.Require = f.Require
	for i, l := range f.Thresholds {
		key := fmt.Sprintf("thresholds[%d]", i)
		if !knownMetric(l.Metric) {
			return nil, fail(key+".metric", "%q: one of %s", l.Metric, strings.Join(MetricNames(), ", "))
		}
		ch, err := change(l.Worse)
		if err != nil {
			return nil, fail(key+".worse", "%v", err)
		}
		b.Limits = append(b.Limits, ParsedLimit{Limit: l, Change: ch})
	}
	for i, t := range f.Tests {
		key := fmt.Sprintf("tests[%d]", i)
		def, err := tests.Get(t.Test)
		if err != nil {
			return nil, fail(key+".test", "%v", err)
		}
		combos, err := expand(t.Params)
		if err != nil {
			return nil, fail(key+".params", "%v", err)
		}
		for _, set := range combos {
			plan, err := def.Resolve(set)
			if err != nil {
				return nil, fail(key+".params", "%v", err)
			}
			for si, s := range b.Setups {
				if err := plan.CheckSetup(s, qdisc.PathHasL4S(s, inv)); err != nil {
					return nil, fail(key+".test", "%v", err)
				}
				if _, err := plan.SetupFor(s); err != nil {
					return nil, fail(key+".params", "%v", err)
				}
				b.SetsSysctls = b.SetsSysctls || len(plan.Sysctls) > 0
				for rep := 1; rep <= reps; rep++ {
					r := Run{Test: plan.Test, Parameters: set, Setup: setupNames[si], Repetition: rep}
					if s != nil {
						r.Setup = s.Name
					}
					r.ID = r.id()
					b.Runs = append(b.Runs, r)
					if len(b.Runs) > maxRuns {
						return nil, fail("tests", "more than %d runs: split the batch", maxRuns)
					}
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range b.Runs {
		if seen[r.ID] {
			return nil, fail("tests", "run %s comes twice: list each test and parameter set once", r.ID)
		}
		seen[r.ID] = true
	}
	return b, nil
}

// runsOn says whether a run reaches host: its pairs' clients and servers and
// its bottleneck hosts.
func runsOn(inv *inventory.Inventory, host string) bool {
	for _, p := range inv.PairsOf() {
		if host == p.Client || host == p.Server {
			return true
		}
	}
	for _, b := range inv.Bottleneck {
		if b.Host == host {
			return true
		}
	}
	return false
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// id is the run's name: readable, one word for a file name, and the same whatever
// the order runs in.
func (r Run) id() string {
	parts := []string{r.Test}
	keys := make([]string, 0, len(r.Parameters))
	for k := range r.Parameters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+r.Parameters[k])
	}
	setup := r.Setup
	if setup == "" {
		setup = "nosetup"
	}
	parts = append(parts, setup, fmt.Sprintf("rep%d", r.Repetition))
	return fileWord.ReplaceAllString(strings.Join(parts, "_"), "-")
}

var fileWord = regexp.MustCompile(`[^A-Za-z0-9._=+-]`)

// expand turns parameters, some of them lists, into every combination, in the
// order of the sorted keys (the last key varies fastest).
func expand(params map[string]yaml.Node) ([]map[string]string, error) {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []map[string]string{{}}
	for _, k := range keys {
		n := params[k]
		var values []string
		switch n.Kind {
		case yaml.ScalarNode:
			values = []string{n.Value}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				if c.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("%s (line %d): a list of values, each a number or a word", k, c.Line)
				}
				values = append(values, c.Value)
			}
			if len(values) == 0 {
				return nil, fmt.Errorf("%s (line %d): an empty list runs nothing", k, n.Line)
			}
		default:
			return nil, fmt.Errorf("%s (line %d): a value, or a list of values to loop over", k, n.Line)
		}
		if len(out)*len(values) > maxRuns {
			return nil, fmt.Errorf("the loops make more than %d parameter sets: split the batch", maxRuns)
		}
		var next []map[string]string
		for _, set := range out {
			for _, v := range values {
				m := map[string]string{k: v}
				for kk, vv := range set {
					m[kk] = vv
				}
				next = append(next, m)
			}
		}
		out = next
	}
	return out, nil
}

func duration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxDuration.Seconds() {
			return 0, fmt.Errorf("%q: write seconds from 0 to a week, or a duration like 90s", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: write seconds (60, 0.2) or a duration (90s, 200ms)", s)
	}
	return d, nil
}

var changeRE = regexp.MustCompile(`^([+-])([0-9]+(?:\.[0-9]+)?)%$`)

// change reads "+10%" as 0.10 and "-5%" as -0.05.
func change(s string) (float64, error) {
	m := changeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q: write the change that is a regression with its sign, e.g. +10%% (higher is worse) or -5%% (lower is worse)", s)
	}
	v, _ := strconv.ParseFloat(m[2], 64)
	if v > 1000 {
		return 0, fmt.Errorf("%q: at most 1000%%", s)
	}
	if m[1] == "-" {
		v = -v
	}
	return v / 100, nil
}

func relTo(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// yamlErr names the file and the line of a YAML error.
func yamlErr(path string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		keys := yamlkeys.Of(File{})
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			m = keys.Explain(m)
			msgs[i] = path + ": " + m
			if g := yamlLine.FindStringSubmatch(m); g != nil {
				msgs[i] = path + ":" + g[1] + ": " + g[2]
			}
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	if g := yamlLine.FindStringSubmatch(err.Error()); g != nil {
		return fmt.Errorf("%s:%s: %s", path, g[1], g[2])
	}
	return fmt.Errorf("%s: %w", path, err)
}
