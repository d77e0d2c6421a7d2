// Package tests holds bloatbench's test definitions: declarative files, one folder a
// test, embedded in the binary, and test files from disk. A definition is a list of
// jobs (each names its runner kind, the host it runs on, when it starts and how
// long it runs, and the kind's parameters), the test's parameters (set with --te
// KEY=VALUE, referenced as ${NAME}) and the aggregates reports compute. A test may
// extend another and change only its parameters' defaults, as flent's tcp_4down
// includes tcp_ndown.
package tests

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/runners"

	"github.com/bloatbench/bloatbench/internal/yamlkeys"
)

//go:embed */test.yaml
var files embed.FS

// Host roles a job runs on or aims at.
const (
	RoleClient     = "client"
	RoleServer     = "server"
	RoleBottleneck = "bottleneck" // every bottleneck host of the inventory
	RoleAll        = "all"        // every host of the run, once
)

// Definition is one test file.
type Definition struct {
	Name        string               `yaml:"name"`
	Description string               `yaml:"description,omitempty"`
	Extends     string               `yaml:"extends,omitempty"`
	Parameters  map[string]Parameter `yaml:"parameters,omitempty"`
	Jobs        []JobDef             `yaml:"jobs,omitempty"`
	Aggregates  []Aggregate          `yaml:"aggregates,omitempty"`
	// Needs says what a run's setup must have for the test to be itself
	// (NeedsRateSchedule): a run without it is refused, not run as another test.
	Needs []string `yaml:"needs,omitempty"`
	// Source is where the definition came from, for errors.
	Source string `yaml:"-"`
}

// Parameter of a test, set with --te NAME=VALUE.
type Parameter struct {
	Default     string `yaml:"default"`
	Description string `yaml:"description,omitempty"`
}

// JobDef is one job as a test writes it.
type JobDef struct {
	Name string `yaml:"name"`
	Kind string `yaml:"kind"`
	// Host is the role it runs on: client, server, or bottleneck (each
	// bottleneck host).
	Host string `yaml:"host"`
	// Target is the role whose test address the job aims at (or binds to).
	Target string `yaml:"target,omitempty"`
	// Connect names an earlier job this one connects to (a listener).
	Connect string `yaml:"connect,omitempty"`
	// Start and Duration are sums of seconds and the run's delay, length and total
	// ("delay", "total - delay", "2"); they default to 0 and total.
	Start    string         `yaml:"start,omitempty"`
	Duration string         `yaml:"duration,omitempty"`
	Params   map[string]any `yaml:"params,omitempty"`
}

// Aggregate is a series a report computes from others: the sum or average of the
// series whose names match a glob, Jain's fairness index among them, or the
// ratio of their sum to the sum of another glob's.
type Aggregate = datafile.Aggregate

// Plan is a definition with its parameters resolved: the jobs a run starts.
type Plan struct {
	Test  string
	Needs []string
	// Sysctls are the host sysctls the jobs need (runners.Planner.WantSysctl),
	// which each run sets on every host as its setup's (SetupFor).
	Sysctls    map[string]runners.SysctlWant
	Parameters map[string]string
	Jobs       []Job
	Aggregates []Aggregate
}

// Job is one planned job.
type Job struct {
	Name, Kind, Host, Target, Connect string
	Start, Duration                   Expr
	// Params are the kind's own, resolved; Series what the job yields (Host "" is
	// the job's own host, datafile.HostPeer its target's).
	Params     json.RawMessage
	Series     []datafile.Series
	Background bool
}

// Expr is a time in a test: a sum of terms, each a number of seconds or one of
// delay, length and total.
type Expr []term

type term struct {
	sign  float64
	value float64
	name  string // "" for a number
}

// Timing is what an Expr is evaluated with: the run's delay and length, seconds.
type Timing struct{ Delay, Length float64 }

// Eval gives the expression's seconds.
func (e Expr) Eval(t Timing) float64 {
	var v float64
	for _, x := range e {
		switch x.name {
		case "delay":
			v += x.sign * t.Delay
		case "length":
			v += x.sign * t.Length
		case "total":
			v += x.sign * (t.Length + 2*t.Delay)
		default:
			v += x.sign * x.value
		}
	}
	return v
}

func (e Expr) String() string {
	var b strings.Builder
	for i, x := range e {
		switch {
		case i > 0 && x.sign < 0:
			b.WriteString(" - ")
		case i > 0:
			b.WriteString(" + ")
		case x.sign < 0:
			b.WriteString("-")
		}
		if x.name != "" {
			b.WriteString(x.name)
		} else {
			b.WriteString(strconv.FormatFloat(x.value, 'g', -1, 64))
		}
	}
	return b.String()
}

// parseExpr reads "delay", "total - delay", "2.5", "delay + 1"; empty gives def.
func parseExpr(s, def string) (Expr, error) {
	if strings.TrimSpace(s) == "" {
		s = def
	}
	var e Expr
	sign := 1.0
	expectTerm := true
	for _, tok := range strings.Fields(strings.NewReplacer("+", " + ", "-", " - ").Replace(s)) {
		switch {
		case tok == "+" || tok == "-":
			if tok == "-" {
				sign = -sign
			}
			if !expectTerm && len(e) == 0 {
				return nil, fmt.Errorf("%q: not a time", s)
			}
			expectTerm = true
		case !expectTerm:
			return nil, fmt.Errorf("%q: terms must be joined by + or -", s)
		case tok == "delay" || tok == "length" || tok == "total":
			e = append(e, term{sign: sign, name: tok})
			sign, expectTerm = 1, false
		default:
			v, err := strconv.ParseFloat(tok, 64)
			if err != nil || v < 0 || v > 1e6 || v != v {
				return nil, fmt.Errorf("%q: %q is neither seconds nor delay, length or total", s, tok)
			}
			e = append(e, term{sign: sign, value: v})
			sign, expectTerm = 1, false
		}
	}
	if expectTerm {
		return nil, fmt.Errorf("%q: not a time (write seconds, delay, length or total, joined by + or -)", s)
	}
	return e, nil
}

var (
	paramRef = regexp.MustCompile(`\$\{([^}]*)\}`)
	nameRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// Parse reads and checks a definition; name is where it came from, for errors.
// Parsed alone, a definition that extends another is checked as far as it can be.
func Parse(name string, data []byte) (*Definition, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var d Definition
	if err := dec.Decode(&d); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			keys := yamlkeys.Of(Definition{})
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				msgs[i] = keys.Explain(m)
			}
			return nil, fmt.Errorf("%s: %s", name, strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d.Source = name
	if d.Name == "" {
		return nil, fmt.Errorf("%s: missing key \"name\"", name)
	}
	for p := range d.Parameters {
		if !nameRE.MatchString(p) {
			return nil, fmt.Errorf("%s: parameters.%s: a parameter name is lower case letters, digits and _", name, p)
		}
	}
	if d.Extends == "" || len(d.Jobs) > 0 {
		if err := d.check(); err != nil {
			return nil, err
		}
	}
	return &d, nil
}

// NeedsRateSchedule is a test's need of a setup whose shaper's rate changes on
// a schedule (its rate_schedule:); NeedsL4SPath of a path whose netem gives the
// packets marked ECT(1) or CE a netem of their own (netem: {l4s: ...}).
const (
	NeedsRateSchedule = "rate_schedule"
	NeedsL4SPath      = "l4s_path"
)

// CheckSetup says whether setup s (nil: none) gives the plan's test what it
// needs; l4sPath says the run's path emulation (the setup's, else the
// inventory's) has an l4s: netem (qdisc.PathHasL4S).
func (p *Plan) CheckSetup(s *qdisc.Setup, l4sPath bool) error {
	what := "a run without a setup has none"
	if s != nil {
		what = fmt.Sprintf("setup %s (%s) has none", s.Name, s.Source)
	}
	for _, n := range p.Needs {
		switch {
		case n == NeedsRateSchedule && (s == nil || len(s.RateSchedule) == 0):
			return fmt.Errorf("test %s needs a setup with a rate_schedule: (the rates the bottleneck's shaper steps through during the run), and %s: give it one, e.g. setups: {steps: {rate: 50mbit, root: {kind: fq_codel}, rate_schedule: [{at: 10s, rate: 25mbit}, {at: 20s, rate: 5mbit}, {at: 30s, rate: 50mbit}]}} (docs/setups.md)",
				p.Test, what)
		case n == NeedsL4SPath && !l4sPath:
			return fmt.Errorf("test %s needs path emulation that gives the L4S packets (ECT(1), CE) a round trip of their own, and neither the setup's netem: nor the inventory's has an l4s: (%s): give one, e.g. setups: {dualpi2-rtt: {extends: mq+dualpi2, netem: {delay: 5ms, l4s: {delay: 20ms}}}} with path_devices: in the inventory (docs/setups.md)",
				p.Test, what)
		}
	}
	return nil
}

// check checks the jobs against the registry and the parameters.
func (d *Definition) check() error {
	for i, n := range d.Needs {
		if n != NeedsRateSchedule && n != NeedsL4SPath {
			return fmt.Errorf("%s: needs[%d] %q: a test can need %s or %s", d.Source, i, n, NeedsRateSchedule, NeedsL4SPath)
		}
	}
	kinds := runners.Kinds()
	if len(d.Jobs) == 0 {
		return fmt.Errorf("%s: no jobs: list what the test runs under the key jobs", d.Source)
	}
	seen := map[string]bool{}
	for i, j := range d.Jobs {
		key := fmt.Sprintf("%s: jobs[%d]", d.Source, i)
		if j.Name == "" || strings.ContainsAny(j.Name, "/ \t\n") {
			return fmt.Errorf("%s.name %q: name each job, without spaces or /", key, j.Name)
		}
		if seen[j.Name] {
			return fmt.Errorf("%s.name: a second job named %q", key, j.Name)
		}
		k, ok := kinds[j.Kind]
		if !ok {
			return fmt.Errorf("%s.kind %q: the kinds are %s", key, j.Kind, strings.Join(runners.KindNames(), ", "))
		}
		switch j.Host {
		case RoleClient, RoleServer, RoleBottleneck:
		case RoleAll:
			if !k.Sampler {
				return fmt.Errorf("%s.host %q: only a sampler runs on every host", key, j.Host)
			}
		default:
			return fmt.Errorf("%s.host %q: use %s, %s, %s or (a sampler) %s", key, j.Host, RoleClient, RoleServer, RoleBottleneck, RoleAll)
		}
		switch j.Target {
		case "", RoleClient, RoleServer:
		default:
			return fmt.Errorf("%s.target %q: use %s or %s", key, j.Target, RoleClient, RoleServer)
		}
		if j.Connect != "" && !seen[j.Connect] {
			return fmt.Errorf("%s.connect %q: name a job listed before this one", key, j.Connect)
		}
		if k.Background && (j.Duration != "") {
			return fmt.Errorf("%s.duration: a %s job runs until the run ends", key, j.Kind)
		}
		for field, s := range map[string]string{"start": j.Start, "duration": j.Duration} {
			if _, err := parseExpr(s, "0"); err != nil {
				return fmt.Errorf("%s.%s: %w", key, field, err)
			}
		}
		if err := d.checkRefs(fmt.Sprintf("%s.params", key), j.Params); err != nil {
			return err
		}
		seen[j.Name] = true
	}
	for i, a := range d.Aggregates {
		key := fmt.Sprintf("%s: aggregates[%d]", d.Source, i)
		switch {
		case a.Name == "":
			return fmt.Errorf("%s.name: name the aggregate's series", key)
		case a.Op != "sum" && a.Op != "avg" && a.Op != "fairness" && a.Op != "ratio":
			return fmt.Errorf("%s.op %q: use sum, avg, fairness or ratio", key, a.Op)
		case a.Op == "ratio" && a.Over == "":
			return fmt.Errorf("%s.over: a ratio divides the sum of series by the sum of over's, a glob of series names", key)
		case a.Op != "ratio" && a.Over != "":
			return fmt.Errorf("%s.over: only op ratio takes over", key)
		}
		for j, x := range a.Exclude {
			if _, err := path.Match(x, ""); err != nil {
				return fmt.Errorf("%s.exclude[%d] %q: a series name or a glob of them: %w", key, j, x, err)
			}
		}
		for _, g := range []struct{ name, v string }{{"series", a.Series}, {"over", a.Over}} {
			if _, err := path.Match(g.v, ""); err != nil || g.v == "" && (g.name == "series" || a.Op == "ratio") {
				return fmt.Errorf("%s.%s %q: a glob of series names, e.g. \"TCP download::*\"", key, g.name, g.v)
			}
		}
	}
	return nil
}

// checkRefs checks that every ${NAME} in v names a parameter.
func (d *Definition) checkRefs(key string, v any) error {
	var err error
	walkStrings(v, func(s string) string {
		for _, m := range paramRef.FindAllStringSubmatch(s, -1) {
			if _, ok := d.Parameters[m[1]]; !ok && err == nil {
				err = fmt.Errorf("%s: ${%s} names no parameter (the parameters are %s)", key, m[1], strings.Join(d.ParamNames(), ", "))
			}
		}
		return s
	})
	return err
}

// walkStrings replaces every string in a YAML value by f of it.
func walkStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = walkStrings(e, f)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = walkStrings(e, f)
		}
		return out
	}
	return v
}

// All returns every embedded definition, sorted by name, each with what it
// extends filled in.
func All() ([]*Definition, error) {
	var out []*Definition
	err := fs.WalkDir(files, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || path.Base(p) != "test.yaml" {
			return err
		}
		d, err := embedded(path.Dir(p))
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load test definitions: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// embedded reads the embedded test name, resolving what it extends.
func embedded(name string) (*Definition, error) {
	p := name + "/test.yaml"
	data, err := files.ReadFile(p)
	if err != nil {
		return nil, err
	}
	d, err := Parse("tests/"+p, data)
	if err != nil {
		return nil, err
	}
	if d.Name != name {
		return nil, fmt.Errorf("tests/%s: name %q differs from its folder", p, d.Name)
	}
	return d.inherit(map[string]bool{d.Name: true})
}

// IsFile says whether a test argument names a file rather than a built-in test.
func IsFile(arg string) bool {
	return strings.ContainsRune(arg, filepath.Separator) || strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml")
}

// Get returns the named definition: a built-in test, or a test file from disk
// when the argument is a path (./my_test.yaml).
func Get(name string) (*Definition, error) {
	if IsFile(name) {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("test file: %w", err)
		}
		d, err := Parse(name, data)
		if err != nil {
			return nil, err
		}
		return d.inherit(map[string]bool{name: true})
	}
	// A built-in test is parsed alone: every run starts here, and parsing them all
	// took a run 15 ms of its fixed cost.
	if fs.ValidPath(name) && !strings.Contains(name, "/") {
		if _, err := fs.Stat(files, name+"/test.yaml"); err == nil {
			return embedded(name)
		}
	}
	all, err := All()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range all {
		if d.Name == name {
			return d, nil
		}
		names = append(names, d.Name)
	}
	return nil, fmt.Errorf("unknown test %q: the tests are %s (bloatbench tests lists them), or give a test file's path", name, strings.Join(names, ", "))
}

// inherit fills in what d extends: the parent's jobs and aggregates when d has
// none, its parameters under d's (a parameter d names keeps the parent's
// description unless it gives one). seen stops a loop.
func (d *Definition) inherit(seen map[string]bool) (*Definition, error) {
	if d.Extends == "" {
		return d, nil
	}
	if seen[d.Extends] {
		return nil, fmt.Errorf("%s: extends %q, which extends it back", d.Source, d.Extends)
	}
	seen[d.Extends] = true
	var parent *Definition
	var err error
	if IsFile(d.Extends) {
		p := d.Extends
		if !filepath.IsAbs(p) && !strings.HasPrefix(d.Source, "tests/") {
			p = filepath.Join(filepath.Dir(d.Source), p)
		}
		var data []byte
		if data, err = os.ReadFile(p); err == nil {
			if parent, err = Parse(p, data); err == nil {
				parent, err = parent.inherit(seen)
			}
		}
	} else if _, ferr := fs.Stat(files, d.Extends+"/test.yaml"); ferr == nil {
		parent, err = embedded(d.Extends)
	} else {
		err = errors.New("no such built-in test")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: extends %q: %w", d.Source, d.Extends, err)
	}
	out := *d
	out.Parameters = map[string]Parameter{}
	for n, p := range parent.Parameters {
		out.Parameters[n] = p
	}
	for n, p := range d.Parameters {
		if _, ok := parent.Parameters[n]; ok && p.Description == "" {
			p.Description = parent.Parameters[n].Description
		}
		out.Parameters[n] = p
	}
	if len(out.Jobs) == 0 {
		out.Jobs = parent.Jobs
	}
	if len(out.Aggregates) == 0 {
		out.Aggregates = parent.Aggregates
	}
	if len(out.Needs) == 0 {
		out.Needs = parent.Needs
	}
	if out.Description == "" {
		out.Description = parent.Description
	}
	if err := out.check(); err != nil {
		return nil, err
	}
	return &out, nil
}

// ParamNames returns the definition's parameter names, sorted.
func (d *Definition) ParamNames() []string {
	var names []string
	for n := range d.Parameters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// defaultSamplers run in every test: the bottlenecks' qdisc and BQL statistics.
var defaultSamplers = []JobDef{{Name: "qdisc", Kind: "qdisc", Host: RoleBottleneck}, {Name: "sojourn", Kind: "sojourn", Host: RoleBottleneck}}

// Resolve applies --te values (KEY=VALUE already split) to the definition: every
// ${NAME} takes its value, and each job's kind plans its parameters and series.
func (d *Definition) Resolve(set map[string]string) (*Plan, error) {
	params := map[string]string{}
	for n, p := range d.Parameters {
		params[n] = p.Default
	}
	for k, v := range set {
		if _, ok := d.Parameters[k]; !ok {
			return nil, fmt.Errorf("test %s has no parameter %q (--te %s=%s): its parameters are %s",
				d.Name, k, k, v, strings.Join(d.ParamNames(), ", "))
		}
		params[k] = v
	}
	plan := &Plan{Test: d.Name, Needs: d.Needs, Parameters: params, Aggregates: d.Aggregates}
	kinds := runners.Kinds()
	pl := runners.NewPlanner()
	yields := 0
	for _, j := range append(append([]JobDef(nil), d.Jobs...), defaultSamplers...) {
		k := kinds[j.Kind]
		// A parameter's value is put in as it is: the kind checks its type and
		// the error names the parameter.
		used := map[string]bool{}
		sub, _ := walkStrings(j.Params, func(s string) string {
			return paramRef.ReplaceAllStringFunc(s, func(ref string) string {
				n := ref[2 : len(ref)-1]
				used[n] = true
				return params[n]
			})
		}).(map[string]any)
		raw, series, err := k.Plan(sub, pl)
		if err != nil {
			return nil, fmt.Errorf("test %s: job %s: %w%s", d.Name, j.Name, err, setBy(used, params))
		}
		durDef := "total"
		if k.Background {
			durDef = "0"
		}
		start, err := parseExpr(j.Start, "0")
		if err != nil {
			return nil, fmt.Errorf("test %s: job %s: start: %w", d.Name, j.Name, err)
		}
		dur, err := parseExpr(j.Duration, durDef)
		if err != nil {
			return nil, fmt.Errorf("test %s: job %s: duration: %w", d.Name, j.Name, err)
		}
		if !k.Background {
			yields += len(series)
		}
		plan.Jobs = append(plan.Jobs, Job{Name: j.Name, Kind: j.Kind, Host: j.Host, Target: j.Target, Connect: j.Connect,
			Start: start, Duration: dur, Params: raw, Series: series, Background: k.Background})
	}
	if yields == 0 {
		return nil, fmt.Errorf("test %s with these parameters runs nothing", d.Name)
	}
	if len(pl.Sysctls()) > 0 {
		plan.Sysctls = pl.Sysctls()
	}
	return plan, nil
}

// SetupFor is setup s (nil: none) with the sysctls the plan's jobs need
// (Plan.Sysctls) added, a setup of those sysctls alone when s is nil, or s as it
// is when the jobs need none. A setup that sets one of them to another value is
// an error: the run would not be what the test asks.
func (p *Plan) SetupFor(s *qdisc.Setup) (*qdisc.Setup, error) {
	if len(p.Sysctls) == 0 {
		return s, nil
	}
	var out qdisc.Setup
	if s != nil {
		out = *s
	} else {
		// No title: a report heads the run with its own, as for a run without a setup.
		out = qdisc.Setup{Name: "sysctls", Source: "test " + p.Test}
	}
	out.Sysctls = maps.Clone(out.Sysctls)
	if out.Sysctls == nil {
		out.Sysctls = map[string]string{}
	}
	out.OptionalSysctls = maps.Clone(out.OptionalSysctls)
	for _, k := range slices.Sorted(maps.Keys(p.Sysctls)) {
		w := p.Sysctls[k]
		if v, ok := out.Sysctls[k]; ok && v != w.Value {
			return nil, fmt.Errorf("%s: setup %s sets %s to %s, and test %s's %s needs %s: take it out of the setup, or change the test's parameters",
				out.Source, out.Name, k, v, p.Test, w.By, w.Value)
		}
		out.Sysctls[k] = w.Value
		if w.Optional {
			if out.OptionalSysctls == nil {
				out.OptionalSysctls = map[string]string{}
			}
			out.OptionalSysctls[k] = w.By
		}
	}
	return &out, nil
}

// setBy says which parameters went into a job that failed to plan.
func setBy(used map[string]bool, params map[string]string) string {
	var parts []string
	for n := range used {
		parts = append(parts, fmt.Sprintf("%s=%q", n, params[n]))
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return " (parameters " + strings.Join(parts, ", ") + ")"
}

// AddSampler adds a sampler (a background kind such as cpu) on the hosts of a
// role to the plan, from the command line: "cpu@server", "cpu@client",
// "cpu@bottleneck"; without a role, every host of the run once.
func (p *Plan) AddSampler(arg string) error {
	kindName, role, _ := strings.Cut(arg, "@")
	k, ok := runners.Kinds()[kindName]
	if !ok || !k.Sampler {
		var samplers []string
		for _, n := range runners.KindNames() {
			if runners.Kinds()[n].Sampler {
				samplers = append(samplers, n)
			}
		}
		return fmt.Errorf("--sampler %q: the samplers are %s, each optionally @client, @server or @bottleneck", arg, strings.Join(samplers, ", "))
	}
	switch role {
	case "":
		role = RoleAll
	case RoleClient, RoleServer, RoleBottleneck:
	default:
		return fmt.Errorf("--sampler %q: %q is not a role: use @client, @server or @bottleneck", arg, role)
	}
	for _, j := range p.Jobs {
		if j.Kind == kindName && (j.Host == role || j.Host == RoleAll || role == RoleAll) {
			return fmt.Errorf("--sampler %q: the run samples %s on %s already", arg, kindName, j.Host)
		}
	}
	raw, series, err := k.Plan(nil, runners.NewPlanner())
	if err != nil {
		return fmt.Errorf("--sampler %q: %w", arg, err)
	}
	p.Jobs = append(p.Jobs, Job{Name: kindName + "@" + role, Kind: kindName, Host: role, Params: raw, Series: series, Background: true})
	return nil
}

// RemoveSampler takes a sampler kind the plan runs by default off it (--no-sampler
// sojourn: to measure what the sampler costs, or on hosts where it must not load).
func (p *Plan) RemoveSampler(kindName string) error {
	n := len(p.Jobs)
	p.Jobs = slices.DeleteFunc(p.Jobs, func(j Job) bool { return j.Kind == kindName && j.Background && isSampler(kindName) })
	if len(p.Jobs) == n {
		var running []string
		for _, j := range p.Jobs {
			if j.Background && isSampler(j.Kind) {
				running = append(running, j.Kind)
			}
		}
		return fmt.Errorf("--no-sampler %q: the run has no such sampler; it runs %s", kindName, strings.Join(running, ", "))
	}
	return nil
}

func isSampler(kind string) bool { return runners.Kinds()[kind].Sampler }

// Series lists every series the plan declares up front, in job order.
func (p *Plan) Series() []datafile.Series {
	var out []datafile.Series
	for _, j := range p.Jobs {
		out = append(out, j.Series...)
	}
	return out
}

// Describe says what the plan's awaited jobs yield, for the log: "4 tcp, 1 ping".
func (p *Plan) Describe() string {
	n := map[string]int{}
	var kinds []string
	for _, s := range p.Series() {
		if n[s.Kind] == 0 {
			kinds = append(kinds, s.Kind)
		}
		n[s.Kind]++
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n[k], k))
	}
	return strings.Join(parts, ", ")
}
