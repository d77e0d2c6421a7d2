// Package tests holds bloatbench's test definitions: declarative files, one folder a
// test, embedded in the binary. A definition says which streams run in which
// direction and whether ICMP ping runs; parameters (set with --te KEY=VALUE) fill in
// the numbers.
package tests

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

//go:embed */test.yaml
var files embed.FS

// Directions a stream can take; the client originates every connection.
const (
	Upload   = "upload"   // client to server
	Download = "download" // server to client
)

// MaxStreams bounds a test's streams, all directions together: each stream is a
// socket and a goroutine on both ends.
const MaxStreams = 1024

// Definition is one test file.
type Definition struct {
	Name        string               `yaml:"name"`
	Description string               `yaml:"description"`
	Parameters  map[string]Parameter `yaml:"parameters"`
	Streams     []StreamGroup        `yaml:"streams"`
	Ping        bool                 `yaml:"ping"`
}

// Parameter of a test, set with --te NAME=VALUE.
type Parameter struct {
	Default     string `yaml:"default"`
	Description string `yaml:"description"`
}

// StreamGroup is a number of streams in one direction; Count and CC name parameters.
type StreamGroup struct {
	Direction string `yaml:"direction"`
	Count     string `yaml:"count"`
	CC        string `yaml:"cc"`
}

// Flow is one TCP stream of a resolved test.
type Flow struct {
	Direction string
	Index     int // 1-based within its direction
	CC        string
}

// Name is the flow's series name, flent's: "TCP download::3".
func (f Flow) Name() string { return fmt.Sprintf("TCP %s::%d", f.Direction, f.Index) }

// Plan is a definition with its parameters resolved.
type Plan struct {
	Test       string
	Parameters map[string]string
	Flows      []Flow
	Ping       bool
}

// Parse reads and checks a definition; name is where it came from, for errors.
func Parse(name string, data []byte) (*Definition, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var d Definition
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if d.Name == "" {
		return nil, fmt.Errorf("%s: missing key \"name\"", name)
	}
	for i, g := range d.Streams {
		if g.Direction != Upload && g.Direction != Download {
			return nil, fmt.Errorf("%s: streams[%d].direction is %q: use %q or %q", name, i, g.Direction, Upload, Download)
		}
		for key, p := range map[string]string{"count": g.Count, "cc": g.CC} {
			if p == "" && key == "cc" {
				continue
			}
			if _, ok := d.Parameters[p]; !ok {
				return nil, fmt.Errorf("%s: streams[%d].%s names parameter %q, which is not under parameters", name, i, key, p)
			}
		}
	}
	return &d, nil
}

// All returns every embedded definition, sorted by name.
func All() ([]*Definition, error) {
	var out []*Definition
	err := fs.WalkDir(files, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || path.Base(p) != "test.yaml" {
			return err
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		d, err := Parse("tests/"+p, data)
		if err != nil {
			return err
		}
		if d.Name != path.Dir(p) {
			return fmt.Errorf("tests/%s: name %q differs from its folder", p, d.Name)
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

// Get returns the named definition.
func Get(name string) (*Definition, error) {
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
	return nil, fmt.Errorf("unknown test %q: the tests are %s (bloatbench tests lists them)", name, strings.Join(names, ", "))
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

// Resolve applies --te values (KEY=VALUE already split) to the definition.
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
	plan := &Plan{Test: d.Name, Parameters: params, Ping: d.Ping}
	index := map[string]int{}
	for _, g := range d.Streams {
		n, err := strconv.Atoi(params[g.Count])
		if err != nil || n < 0 || n > MaxStreams {
			return nil, fmt.Errorf("test %s: parameter %s=%q: want a whole number from 0 to %d", d.Name, g.Count, params[g.Count], MaxStreams)
		}
		var ccs []string
		if g.CC != "" && params[g.CC] != "" {
			ccs = strings.Split(params[g.CC], ",")
			for _, cc := range ccs {
				if !validCC(cc) {
					return nil, fmt.Errorf("test %s: parameter %s=%q: %q is not a congestion control name", d.Name, g.CC, params[g.CC], cc)
				}
			}
		}
		if total := len(plan.Flows) + n; total > MaxStreams {
			return nil, fmt.Errorf("test %s: parameter %s=%q makes %d streams in all: at most %d", d.Name, g.Count, params[g.Count], total, MaxStreams)
		}
		for i := 0; i < n; i++ {
			index[g.Direction]++
			f := Flow{Direction: g.Direction, Index: index[g.Direction]}
			if len(ccs) > 0 {
				f.CC = ccs[i%len(ccs)]
			}
			plan.Flows = append(plan.Flows, f)
		}
	}
	if len(plan.Flows) == 0 && !plan.Ping {
		return nil, fmt.Errorf("test %s with these parameters runs nothing", d.Name)
	}
	return plan, nil
}

// validCC accepts what the kernel accepts as a TCP_CONGESTION name (TCP_CA_NAME_MAX 16).
func validCC(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
