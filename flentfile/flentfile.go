// Package flentfile reads and writes flent's data files (.flent.gz, format version 4),
// so that runs made with bloatbench open in flent 2.1.1 and old flent runs compare
// against new ones.
//
// Flent plots the series on its step grid (`results`) and summarises a series from
// its raw values where it has them, from the grid where not. An export puts every
// series on the run's grid exactly as bloatbench's summary sees it (ping replies in
// the step they arrived in, throughput per step, the sum and average over the
// flows), with raw values that are those steps; an import reads a flent file's grid
// back, and the raw values of its pings and flows for their rows.
package flentfile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
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

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// Ext is the extension of flent's gzip'd data files.
const Ext = ".flent.gz"

// Is says whether path names a flent data file.
func Is(path string) bool {
	return strings.HasSuffix(path, Ext) || strings.HasSuffix(path, ".flent")
}

// Holds says whether the file at path is a flent data file, whatever its name: its
// JSON (gzip'd or not) is an object whose first key is one of flent's top-level
// keys (flent and our export write "metadata" first; a bloatbench data file's
// first record starts with "type"). Only the first bytes are read. It lets a verb
// that takes bloatbench's data files say what a flent file given to it is, where
// reading it as one failed on its first record with a JSON error.
func Holds(path string) bool {
	fh, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fh.Close()
	br := bufio.NewReader(fh)
	var r io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return false
		}
		defer zr.Close()
		r = zr
	}
	dec := json.NewDecoder(io.LimitReader(r, 1<<16))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	key, err := dec.Token()
	if err != nil {
		return false
	}
	switch key {
	case "metadata", "version", "x_values", "results", "raw_values":
		return true
	}
	return false
}

// MaxDecompressed bounds a flent file's JSON, whatever its compressed size (a gzip
// bomb). Reading keeps the whole document and then every raw value as a map, several
// times its JSON in memory; flent writes a 60 s rrul test in a few MB.
const MaxDecompressed = 128 << 20

// MaxValues bounds the JSON values (numbers, strings, nulls, objects, arrays) of a
// flent file, counted before it is decoded: the byte cap alone let a file of "{}"
// or "null" become 16-50 times its size in maps and interfaces. A 60 s rrul has
// about 100,000; flent's longest tests a few million.
const MaxValues = 4_000_000

// maxCompatRecords bounds the raw records a version-1 file's results make (one per
// series and x value), checked before they are made.
const maxCompatRecords = 2_000_000

// valueCounter passes a JSON document through while counting its values from
// above (one per opening bracket, comma and colon outside strings, plus one), and
// fails past a limit: the count stops a file of "{}" before it is all in memory.
type valueCounter struct {
	r             io.Reader
	n, limit      int
	inString, esc bool
}

// errTooManyValues is what a valueCounter returns past its limit.
var errTooManyValues = errors.New("too many JSON values")

func (c *valueCounter) Read(p []byte) (int, error) {
	if c.n > c.limit {
		return 0, errTooManyValues
	}
	n, err := c.r.Read(p)
	for _, b := range p[:n] {
		switch {
		case c.esc:
			c.esc = false
		case c.inString && b == '\\':
			c.esc = true
		case b == '"':
			c.inString = !c.inString
		case !c.inString && (b == ',' || b == '[' || b == '{' || b == ':'):
			c.n++
		}
	}
	if c.n > c.limit {
		return n, errTooManyValues
	}
	return n, err
}

// countValues counts a whole document's values as valueCounter does.
func countValues(data []byte) int {
	c := &valueCounter{r: bytes.NewReader(data), n: 1, limit: math.MaxInt}
	io.Copy(io.Discard, c)
	return c.n
}

// formatVersion is the file format flent 2.1.1 writes and reads.
const formatVersion = 4

// timeFormat is flent's for TIME and T0.
const timeFormat = "2006-01-02T15:04:05.000000Z"

type file struct {
	Metadata  map[string]any              `json:"metadata"`
	Version   *int                        `json:"version"` // none is version 1, as flent reads it
	XValues   []float64                   `json:"x_values"`
	Results   map[string][]*float64       `json:"results"`
	RawValues map[string][]map[string]any `json:"raw_values"`
}

// flentTests are flent 2.1.1's fixed-count TCP tests; any other count is its
// tcp_ndown or tcp_nup with the stream count as a parameter.
// KindFlent is the kind of a series read from a flent file that is neither ping
// nor one TCP flow: its summary row is its values, as flent's is.
const KindFlent = "flent"

var flentTests = map[string]bool{
	"tcp_1down": true, "tcp_2down": true, "tcp_4down": true, "tcp_6down": true, "tcp_8down": true, "tcp_12down": true,
	"tcp_1up": true, "tcp_2up": true, "tcp_4up": true, "tcp_6up": true, "tcp_8up": true, "tcp_12up": true,
	"tcp_ndown": true, "tcp_nup": true,
	"tcp_bidirectional": true, "tcp_2up_delay": true, "rrul": true, "rrul_be": true, "udp_flood": true,
}

// flentName is the flent test a run corresponds to: flent needs an existing test's
// definition to summarise or plot a file.
func flentName(run *datafile.Run) (string, map[string]any) {
	down, up := 0, 0
	for _, se := range run.Series {
		if datafile.Classify(se).Role == datafile.RoleFlow {
			if se.Direction == "upload" {
				up++
			} else {
				down++
			}
		}
	}
	params := map[string]any{}
	for k, v := range run.Metadata.Parameters {
		params[k] = v
	}
	if flentTests[run.Metadata.Test] {
		return run.Metadata.Test, params
	}
	if up > 0 && down == 0 {
		params["upload_streams"] = strconv.Itoa(up)
		return "tcp_nup", params
	}
	params["download_streams"] = strconv.Itoa(down)
	return "tcp_ndown", params
}

// Export writes run as a flent data file at path ("" = beside the run's data file,
// with flent's extension) and returns the path.
func Export(run *datafile.Run, path string) (string, error) {
	if path == "" {
		if run.Path == "" {
			return "", errors.New("export to flent: the run has no file name to put the flent file beside; give a path")
		}
		path = strings.TrimSuffix(run.Path, datafile.Ext) + Ext
	}
	f, err := build(run)
	if err != nil {
		return "", fmt.Errorf("export to flent: %w", err)
	}
	// Written beside the path and renamed into place: an export stopped midway
	// (Ctrl-C, a full disk) leaves no half file for flent to choke on.
	out, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", fmt.Errorf("export to flent: %w", err)
	}
	fail := func(err error) (string, error) {
		out.Close()
		os.Remove(out.Name())
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	zw := gzip.NewWriter(out)
	// Encoded into the gzip stream as it goes: the whole JSON at once, and the
	// copies its growth left, were a third of an export's memory.
	if err := json.NewEncoder(zw).Encode(f); err != nil {
		return fail(err)
	}
	if err := zw.Close(); err != nil {
		return fail(err)
	}
	if err := out.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := out.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(out.Name(), path); err != nil {
		os.Remove(out.Name())
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// encode makes the flent file's JSON.
func encode(run *datafile.Run) ([]byte, error) {
	f, err := build(run)
	if err != nil {
		return nil, err
	}
	return json.Marshal(f)
}

// build makes the flent file of a run.
func build(run *datafile.Run) (*file, error) {
	m := run.Metadata
	grid := report.GridOf(m)
	name, params := flentName(run)
	version := formatVersion
	f := file{Version: &version, Results: map[string][]*float64{}, RawValues: map[string][]map[string]any{}}
	for k := 0; k < grid.N; k++ {
		f.XValues = append(f.XValues, float64(k)*grid.Step)
	}
	seriesMeta := map[string]any{}
	host, local := "", ""
	// The first client and server: the first pair's in a run with several.
	for _, h := range m.Hosts {
		switch {
		case h.Role == "server" && host == "":
			host = h.TestIP
		case h.Role == "client" && local == "":
			local = h.Name
		}
	}
	var title any
	if m.Title != "" {
		title = m.Title
	}
	start := m.StartTime
	if start.IsZero() {
		start = unixTime(m.T0)
	}
	f.Metadata = map[string]any{
		"NAME": name, "TITLE": title, "NOTE": nil, "HOST": host, "HOSTS": []string{host}, "LOCAL_HOST": local,
		"LENGTH": m.Length, "TOTAL_LENGTH": m.TotalLength, "STEP_SIZE": grid.Step, "DELAY": m.Delay,
		"TIME": start.UTC().Format(timeFormat), "T0": unixTime(m.T0).UTC().Format(timeFormat),
		"IP_VERSION": 4, "TEST_PARAMETERS": params, "SERIES_META": seriesMeta,
		"FLENT_VERSION": "2.1.1", "FAILED_RUNNERS": 0,
		"BLOATBENCH": map[string]any{"version": m.ToolVersion, "test": m.Test, "setup": m.Setup, "data_file": run.Path},
	}
	put := func(name, units string, values []float64, raw []map[string]any) {
		col := make([]*float64, grid.N)
		for k, v := range values {
			if k < grid.N && !math.IsNaN(v) {
				v := v
				col[k] = &v
			}
		}
		// No MEAN_VALUE: without a cut flent would print it as the average and count
		// the points of its grid (every step, with a value or not). Without it,
		// flent's summary takes mean, median, 99th percentile and count all from the
		// raw values, cut or not: the values our summary counts.
		f.Results[name] = col
		if raw == nil {
			raw = []map[string]any{} // flent iterates it: never null
		}
		f.RawValues[name] = raw
		seriesMeta[name] = map[string]any{"UNITS": units, "RUNNER": "bloatbench"}
	}
	for _, se := range run.Series {
		if !datafile.Classify(se).ICMP {
			continue // flent's ping series are ICMP's; other probes go as they are
		}
		values := make([]float64, grid.N)
		for k := range values {
			values[k] = math.NaN()
		}
		var raw []map[string]any
		samples := run.Samples[se.Name]
		slots := report.PingSlots(grid, samples)
		for i, s := range samples {
			if s.Lost {
				continue
			}
			raw = append(raw, map[string]any{"t": s.T, "val": s.V, "seq": s.Seq})
			if slots[i] >= 0 {
				values[slots[i]] = s.V // the step the summary counts it in
			}
		}
		put(se.Name, se.Units, values, raw)
	}
	// flent cuts raw values by their time against its t0 (T0 as written, to the
	// microsecond, added up as flent adds it) plus the cut's ends. A step's time is
	// put on that t0, so that a cut on a grid point (--cut 2,10) leaves out the same
	// points in flent as in our summary, which reads the grid from the run's t0.
	flentT0 := flentUnix(unixTime(m.T0).UTC().Truncate(time.Microsecond))
	for _, g := range report.Throughput(run) {
		// flent summarises raw values where a series has them: the raw values of a
		// throughput series are its steps, as bloatbench's summary counts them.
		var raw []map[string]any
		for k, v := range g.Values {
			if !math.IsNaN(v) {
				raw = append(raw, map[string]any{"t": flentT0 + float64(k)*grid.Step, "val": v, "dur": grid.Step})
			}
		}
		put(g.Name, g.Units, g.Values, raw)
	}
	// Series of other kinds (rrul's UDP round trips, CPU shares) go as they are:
	// their raw values are their samples, their grid the report's.
	onGrid := report.OnGrid(run)
	for _, se := range run.Series {
		if c := datafile.Classify(se); c.ICMP || c.Role == datafile.RoleFlow || c.Role.Bottleneck() || c.Role.Attribution() {
			continue
		}
		var raw []map[string]any
		for _, s := range run.Samples[se.Name] {
			if !s.Lost {
				raw = append(raw, map[string]any{"t": s.T, "val": s.V})
			}
		}
		put(se.Name, se.Units, onGrid[se.Name].Values, raw)
	}
	// The test's aggregates (rrul's "TCP totals", "Ping (ms) avg") as flent's sum
	// and average runners store them: values on the grid, which are their raw
	// values too.
	for _, g := range report.Aggregates(run, onGrid) {
		var raw []map[string]any
		for k, v := range g.Values {
			if !math.IsNaN(v) {
				raw = append(raw, map[string]any{"t": flentT0 + float64(k)*grid.Step, "val": v})
			}
		}
		put(g.Name, g.Units, g.Values, raw)
	}
	return &f, nil
}

var flowName = regexp.MustCompile(`^TCP (upload|download)::(\d+)(?: \(.*\))?$`)

// namedFlow matches the TCP flows flent's other tests name: rrul's "TCP upload BK",
// tcp_bidirectional's "TCP download", tcp_2up_delay's "TCP stream 2" (uploads).
// The sums and averages among them are left to the summary, which computes them.
var namedFlow = regexp.MustCompile(`^TCP (upload|download|stream)( .+)?$`)

// flowSum matches the sums and averages flent computes over a direction's flows
// (and those of one pair, in our export of a run with several).
var flowSum = regexp.MustCompile(`^TCP (upload|download|stream) (sum|avg)( \(pair \d+\))?$`)

// kindSum is classify's kind for a TCP sum or average.
const kindSum = "sum"

// classify says what a flent series is: ping (KindPing), one TCP flow (KindTCP,
// with its direction), a sum or average over a direction's flows (kindSum), or a
// series whose row is its own values (KindFlent: rrul's totals, rtt_fair's
// fairness, a CPU share, a UDP rate, and any sub-series "PARENT::KEY" of a series
// in the file, such as a flow's socket stats).
func classify(name string, f file) (kind, direction string) {
	if subSeries(name, f) {
		return KindFlent, ""
	}
	switch {
	case strings.HasPrefix(name, "Ping "):
		return datafile.KindPing, ""
	case name == "TCP totals" || !strings.HasPrefix(name, "TCP ") || strings.HasSuffix(name, " fairness"):
		return KindFlent, ""
	}
	if dir, ok := flowOf(name); ok {
		return datafile.KindTCP, dir
	}
	if m := flowSum.FindStringSubmatch(name); m != nil {
		dir := m[1]
		if dir == "stream" {
			dir = "upload"
		}
		return kindSum, dir
	}
	return KindFlent, ""
}

// subSeries says whether a flent series is a sub-series "PARENT::KEY" of another
// series of the file: flent's socket stats of a flow ("TCP upload BE::tcp_cwnd",
// "TCP upload::1::tcp_rtt"), a CPU's share, a qdisc's counter. Its values are the
// parent's statistic, never the parent's kind: flent 1.0's socket stats of rrul's
// flows have raw values of their own and names its flows' pattern matches, and
// read as flows they were summed into "TCP upload sum" (a median of 270 on a 10
// Mbit/s link) and printed in Mbits/s where flent prints no unit. tcp_nup's flows
// ("TCP upload::1") are of no parent series: "TCP upload" is not one.
func subSeries(name string, f file) bool {
	i := strings.LastIndex(name, "::")
	if i < 0 {
		return false
	}
	parent := name[:i]
	_, results := f.Results[parent]
	_, raw := f.RawValues[parent]
	return results || raw
}

// flowOf says whether a flent series is one TCP flow, and its direction.
func flowOf(name string) (direction string, ok bool) {
	if m := flowName.FindStringSubmatch(name); m != nil {
		return m[1], true
	}
	m := namedFlow.FindStringSubmatch(name)
	if m == nil || strings.HasSuffix(m[2], " sum") || strings.HasSuffix(m[2], " avg") || m[2] == " fairness" {
		return "", false
	}
	if m[1] == "stream" {
		return "upload", true
	}
	return m[1], true
}

// Read loads a flent data file as a run. Its ping row covers the whole run, as
// flent's does; the loaded and idle rows split it at DELAY and DELAY + LENGTH (see
// decode). Ping comes from the raw replies, as flent summarises it; a TCP flow's row
// from its raw values (netperf's interim results) where the file has them, as
// flent's summary takes them (run.Raw), and its grid where not; the flows' grid is
// what the TCP sum and average add up, as flent's are.
func Read(path string) (*datafile.Run, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read flent file: %w", err)
	}
	defer fh.Close()
	var r io.Reader = fh
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(fh)
		if err != nil {
			return nil, fmt.Errorf("%s: not gzip'd (is it a flent data file?): %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	return decode(path, r)
}

// decode reads a flent file's JSON; path names it in errors and in the run.
func decode(path string, r io.Reader) (*datafile.Run, error) {
	// A JSON decoder holds the whole document anyway: read it, within the caps.
	vc := &valueCounter{r: datafile.Capped(r, MaxDecompressed), n: 1, limit: MaxValues}
	data, err := io.ReadAll(vc)
	switch {
	case errors.Is(err, errTooManyValues):
		return nil, fmt.Errorf("%s: more than %d JSON values, more than bloatbench reads of a flent file (flent writes about 100,000 for a 60 s rrul)", path, MaxValues)
	case errors.Is(err, datafile.ErrTooLarge):
		return nil, fmt.Errorf("%s: more than %d MiB of JSON when decompressed, more than flent writes: a gzip bomb, or not a flent data file", path, MaxDecompressed>>20)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: not a flent data file: %s", path, datafile.JSONProblem(data, err))
	}
	version := 1
	if f.Version != nil {
		version = *f.Version
	}
	if version > formatVersion || version < 1 {
		return nil, fmt.Errorf("%s: flent file format version %d; bloatbench reads versions 1 to %d (netperf-wrapper's and flent's)", path, version, formatVersion)
	}
	md := f.Metadata
	str := func(k string) string { s, _ := md[k].(string); return s }
	num := func(k string) float64 { v, _ := md[k].(float64); return v }
	t0, err := parseTime(str("T0"))
	if err != nil {
		var err2 error
		if t0, err2 = parseTime(str("TIME")); err2 != nil {
			return nil, fmt.Errorf("%s: metadata T0: %w (and TIME: %v)", path, err, err2)
		}
	}
	started, err := parseTime(str("TIME"))
	if err != nil {
		started = t0
	}
	if version == 1 && len(f.Results)*len(f.XValues) > maxCompatRecords {
		return nil, fmt.Errorf("%s: a version-1 file of %d results x %d x_values: more than the %d values bloatbench converts", path, len(f.Results), len(f.XValues), maxCompatRecords)
	}
	// A version-1 file without raw values has them made of its grid from T0 here;
	// flent makes them from T0 in the zone of the machine it runs on, which is UTC
	// here (a T0 without a zone is read as UTC until the zone is guessed below).
	compat(&f, version, flentUnix(t0))
	if t0, started, err = zoneTimes(md, t0, started, f.RawValues); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := md["STEP_SIZE"].(float64); !ok {
		return nil, fmt.Errorf("%s: metadata STEP_SIZE missing: flent writes the step in seconds there", path)
	}
	step := num("STEP_SIZE")
	total := num("TOTAL_LENGTH")
	if _, ok := md["TOTAL_LENGTH"]; !ok && len(f.XValues) > 0 {
		total = f.XValues[len(f.XValues)-1] // as old flent files have it
	}
	if err := datafile.CheckGrid("metadata STEP_SIZE", step, "metadata TOTAL_LENGTH", total, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	gridLength := 0.0 // how far x_values reach past TOTAL_LENGTH, if they do
	for k, x := range f.XValues {
		if !(math.Abs(x) <= datafile.MaxTime) {
			return nil, fmt.Errorf("%s: x_values[%d] is %v: not seconds into the run", path, k, x)
		}
		if x > total && x > gridLength {
			gridLength = x
		}
	}
	if gridLength > 0 {
		// flent's sums and averages are over every x value (tcp_nup's flows ran 2
		// s past TOTAL_LENGTH): our grid reaches as far, or the TCP sum's median
		// was of the first TOTAL_LENGTH only.
		if err := datafile.CheckGrid("metadata STEP_SIZE", step, "the last of x_values", gridLength, 0); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	params := map[string]string{}
	if tp, ok := md["TEST_PARAMETERS"].(map[string]any); ok {
		for k, v := range tp {
			params[k] = fmt.Sprint(v)
		}
	}
	T0 := flentUnix(t0)
	// flent's tests run their load for LENGTH after a lead-in of DELAY, and TOTAL_LENGTH
	// is LENGTH + 2 DELAY (netperf_definitions.inc); flent does not write DELAY, we do.
	// That window is the loaded ping row's, as it is flent's own ping plots' cutoff
	// (DELAY, -DELAY). A file with no LENGTH, or one that does not fit, is all load.
	length, delay := total, 0.0
	if l, ok := md["LENGTH"].(float64); ok && l > 0 && l <= total {
		length, delay = l, (total-l)/2
		if d, ok := md["DELAY"].(float64); ok && d >= 0 && d+l <= total {
			delay = d
		}
	}
	run := &datafile.Run{Path: path, Samples: map[string][]datafile.Sample{}, Metadata: datafile.Metadata{
		Test: str("NAME"), Title: str("TITLE"), StartTime: started, T0: T0,
		Length: length, Delay: delay, TotalLength: total, GridLength: gridLength, Step: step, Parameters: params,
	}}
	units := func(name string) string {
		if sm, ok := md["SERIES_META"].(map[string]any); ok {
			if m, ok := sm[name].(map[string]any); ok {
				if u, ok := m["UNITS"].(string); ok && u != "" {
					return u
				}
			}
		}
		return testUnits(name)
	}
	names := make([]string, 0, len(f.Results))
	for n := range f.Results {
		names = append(names, n)
	}
	sort.Strings(names)
	// The directions that have flows: only their sums and averages are left to the
	// summary to compute. A test whose flows bear names not known here as flows
	// keeps its sums as rows of their own values, as flent prints them.
	hasFlows := map[string]bool{}
	for _, name := range names {
		if kind, dir := classify(name, f); kind == datafile.KindTCP {
			hasFlows[dir] = true
		}
	}
	replies := map[string]bool{} // the ping series read from their replies
	for _, name := range names {
		values := f.Results[name]
		se := datafile.Series{Name: name, Units: units(name)}
		kind, dir := classify(name, f)
		switch kind {
		case datafile.KindPing:
			se.Kind = datafile.KindPing
			if se.Units == "" {
				se.Units = "ms"
			}
		case datafile.KindTCP:
			se.Kind, se.Direction = datafile.KindTCP, dir
			if sm := flowName.FindStringSubmatch(name); sm != nil {
				se.Flow, _ = strconv.Atoi(sm[2])
			}
			if se.Units == "" {
				se.Units = "Mbits/s"
			}
		case kindSum:
			if hasFlows[dir] {
				continue // the TCP sums and averages: the summary computes them
			}
			se.Kind = KindFlent
		default:
			se.Kind = KindFlent
		}
		run.Series = append(run.Series, se)
		// flent summarises a series from its raw values where it has them (netperf's
		// samples of a flow, the ping runners' replies), from the grid where not.
		raw, err := rawOf(name, f.RawValues)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		icmp := datafile.Classify(se).ICMP
		if icmp && hasValue(raw) {
			run.Samples[name] = raw
			replies[name] = true
			continue
		}
		if !icmp && hasValue(raw) {
			// The series' row is its raw samples (a flow's, a CPU load's, a VoIP
			// delay's); its grid, read below, is what flent falls back to and what
			// the TCP sum and average add up, as flent's are.
			if run.Raw == nil {
				run.Raw = map[string][]datafile.Sample{}
			}
			run.Raw[name] = raw
		}
		for k, v := range values {
			if v == nil || k >= len(f.XValues) {
				continue
			}
			x := f.XValues[k]
			s := datafile.Sample{T: T0 + x, V: *v, Seq: k}
			if datafile.Classify(se).Role == datafile.RoleFlow {
				// One step's throughput, centred on its grid point so the summary's
				// alignment gives it back to exactly that point.
				s.T, s.Dur = T0+x+step/2, step
			}
			if err := datafile.CheckSample(fmt.Sprintf("results[%q][%d]", name, k), s); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			run.Samples[name] = append(run.Samples[name], s)
		}
	}
	if len(run.Series) == 0 {
		return nil, fmt.Errorf("%s: no ping or TCP series bloatbench can summarise", path)
	}
	run.Reported = reportedMeans(md, f.Results, len(f.XValues))
	run.GridCut = gridOnly(f, run.Series, replies)
	if err := datafile.CheckGrid("metadata STEP_SIZE", step, "metadata TOTAL_LENGTH", max(total, gridLength), datafile.GridValues(run)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return run, nil
}

// reportedMeans are the means flent's summary prints without a cut (flent 2.1.1,
// combiners.MeanReducer): a series' MEAN_VALUE (netperf's end-of-test figure,
// fping's and irtt's own), counted as the points of the grid (len(x_values)). A
// MEAN_VALUE of 0 is not one to flent (it falls back to the values). The TCP sum and
// average a file lacks, flent computes as it loads it (settings.
// compute_missing_results), their MEAN_VALUE the sum and the mean of the flows'.
func reportedMeans(md map[string]any, results map[string][]*float64, points int) map[string]datafile.ReportedMean {
	sm, _ := md["SERIES_META"].(map[string]any)
	meanOf := func(name string) (float64, bool) {
		m, _ := sm[name].(map[string]any)
		v, ok := m["MEAN_VALUE"].(float64)
		return v, ok && math.Abs(v) <= datafile.MaxValue
	}
	out := map[string]datafile.ReportedMean{}
	flows := map[string][]float64{}
	names := make([]string, 0, len(results))
	for name := range results {
		names = append(names, name)
	}
	sort.Strings(names) // flent adds the flows' means in the order of its glob
	for _, name := range names {
		v, ok := meanOf(name)
		if ok && v != 0 {
			out[name] = datafile.ReportedMean{Mean: v, Points: points}
		}
		if m := flowName.FindStringSubmatch(name); m != nil && ok {
			flows[m[1]] = append(flows[m[1]], v)
		}
	}
	for dir, vs := range flows {
		sum := 0.0
		for _, v := range vs {
			sum += v
		}
		for name, v := range map[string]float64{"TCP " + dir + " sum": sum, "TCP " + dir + " avg": sum / float64(len(vs))} {
			if _, ok := results[name]; !ok && v != 0 {
				out[name] = datafile.ReportedMean{Mean: v, Points: points}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// compat brings a file of an older format to version 4's meaning, as flent
// 2.1.1's loader does (resultset.unserialise_compat): version 1 kept raw values in
// SERIES_META (or none, and flent makes them of the grid at T0 + x); before version
// 4, raw values were stored before the runners' unit conversions: netperf UDP_RR
// rates (transactions/s, records with "dur") become ms, HTTP latency s becomes ms,
// qdisc drops and marks counted since the start become per interval, and a
// MEAN_VALUE in bits/s becomes Mbits/s. (WiFi airtime, converted likewise, is
// not read.) x0 is T0 in seconds.
func compat(f *file, version int, x0 float64) {
	if version >= 4 {
		return
	}
	sm, _ := f.Metadata["SERIES_META"].(map[string]any)
	if version == 1 {
		f.RawValues = map[string][]map[string]any{}
		for name, v := range sm {
			m, _ := v.(map[string]any)
			recs, ok := m["RAW_VALUES"].([]any)
			if !ok {
				continue
			}
			var raw []map[string]any
			for _, r := range recs {
				if rec, ok := r.(map[string]any); ok {
					raw = append(raw, rec)
				}
			}
			f.RawValues[name] = raw
		}
		if len(f.RawValues) == 0 {
			for name, values := range f.Results {
				raw := make([]map[string]any, 0, len(f.XValues))
				for k, x := range f.XValues {
					rec := map[string]any{"t": x0 + x, "val": nil}
					if k < len(values) && values[k] != nil {
						rec["val"] = *values[k]
					}
					raw = append(raw, rec)
				}
				f.RawValues[name] = raw
			}
			return // made of converted values already
		}
	}
	for name, values := range f.RawValues {
		switch {
		case strings.Contains(name, "UDP"):
			for _, v := range values {
				if _, ok := v["dur"]; !ok {
					continue
				}
				if x, ok := v["val"].(float64); ok {
					if x == 0 {
						v["val"] = nil
					} else {
						v["val"] = 1000 / x
					}
				}
			}
		case name == "HTTP latency":
			for _, v := range values {
				if x, ok := v["val"].(float64); ok {
					v["val"] = x * 1000
				}
			}
		case len(values) > 0 && has(values[0], "stations"):
		case len(values) > 0 && (has(values[0], "dropped") || has(values[0], "ecn_mark")):
			last := map[string]float64{}
			for _, v := range values {
				for _, k := range []string{"dropped", "ecn_mark"} {
					x, ok := v[k].(float64)
					if !ok {
						continue
					}
					if prev, seen := last[k]; seen {
						v[k] = x - prev
					} else {
						v[k] = 0.0
					}
					last[k] = x
				}
			}
		}
	}
	for _, v := range sm {
		if m, ok := v.(map[string]any); ok && m["UNITS"] == "bits/s" {
			if x, ok := m["MEAN_VALUE"].(float64); ok {
				m["MEAN_VALUE"], m["UNITS"] = x/1e6, "Mbits/s"
			}
		}
	}
}

func has(m map[string]any, key string) bool { _, ok := m[key]; return ok }

// gridOnly names the series whose samples are flent's grid, which flent's cut keeps
// by grid point, both ends included, where it cuts raw values by time: every series
// but a ping read from its replies (a flow's or a series' own raw values, if any,
// are apart in Run.Raw, and where flent falls back from them to the grid, it cuts
// the grid so), and the TCP sums and averages flent computes on loading a file
// that lacks them. (Our exports give every series raw values.)
func gridOnly(f file, series []datafile.Series, replies map[string]bool) map[string]bool {
	out := map[string]bool{}
	for name := range f.Results {
		if len(f.RawValues[name]) == 0 {
			out[name] = true
		}
	}
	for _, se := range series {
		if !replies[se.Name] {
			out[se.Name] = true
		}
		if datafile.Classify(se).Role != datafile.RoleFlow {
			continue
		}
		for _, name := range []string{"TCP " + se.Direction + " sum", "TCP " + se.Direction + " avg"} {
			if _, ok := f.Results[name]; !ok {
				out[name] = true
			}
		}
	}
	return out
}

// subSeriesUnits are the units flent 2.1.1's tests give the series their runners
// fill in for them (runner "null", or computed), which a data file's SERIES_META
// leaves out: flent's summary takes them from the test (voip.inc,
// qdisc-stats.conf, qdisc_stats.inc).
var subSeriesUnits = map[string]string{
	"VoIP::bitrate":              "Kbits/s",
	"VoIP::delay":                "ms",
	"VoIP::jitter":               "ms",
	"VoIP::loss":                 "count",
	"VoIP::induced_delay":        "ms",
	"qdisc-stats::backlog_pkts":  "packets",
	"qdisc-stats::backlog_bytes": "bytes",
	"qdisc-stats::dropped":       "packets",
	"qdisc-stats::ecn_mark":      "packets",
	"qdisc-stats::delay":         "ms",
}

// testUnits are the units flent's test definitions give a series the file has no
// units for ("" where they give none, as flent prints none).
func testUnits(name string) string {
	if u, ok := subSeriesUnits[name]; ok {
		return u
	}
	// rtt_fair.inc's Jain's fairness index of each direction's flows.
	if name == "TCP upload fairness" || name == "TCP download fairness" {
		return "Idx"
	}
	// qdisc_stats.inc's qdisc_stats_HOST::dropped and ::ecn_mark, for any host.
	if strings.HasPrefix(name, "qdisc_stats_") && (strings.HasSuffix(name, "::dropped") || strings.HasSuffix(name, "::ecn_mark")) {
		return "packets"
	}
	// wifi_stats.inc's wifi_stats_HOST::airtime_{rx,tx,total}::STATION, ::airtime_sum
	// and ::airtime_fairness (flent's "us", fairness too), ::avg_aggr_size::STATION.
	// The host may be an IPv6 address, "::" and all.
	if rest, ok := strings.CutPrefix(name, "wifi_stats_"); ok {
		switch {
		case strings.Contains(rest, "::airtime_"):
			return "us"
		case strings.Contains(rest, "::avg_aggr_size::"):
			return "packets"
		}
	}
	return ""
}

// rawOf reads the raw values flent 2.1.1 summarises a series from
// (combiners.RawReducer): the series' own records that carry "val", or for a
// sub-series "PARENT::KEY" with no raw values of its own (cpu_stats' ::load, the tc
// runner's ::dropped, D-ITG's VoIP::delay) its parent's records that carry KEY.
func rawOf(name string, all map[string][]map[string]any) ([]datafile.Sample, error) {
	raw, ok := all[name]
	key := "val"
	if !ok {
		i := strings.LastIndex(name, "::") // flent's rsplit("::", 1)
		if i < 0 {
			return nil, nil
		}
		if raw, ok = all[name[:i]]; !ok {
			return nil, nil
		}
		key = name[i+2:]
	}
	return rawSamples(name, key, raw)
}

// rawSamples reads flent's raw values of a series: {t, KEY, seq}, KEY null or (for
// a series' own "val") absent when the probe was lost. A parent's record without a
// sub-series' KEY is not one of that sub-series' (flent skips it).
func rawSamples(name, key string, raw []map[string]any) ([]datafile.Sample, error) {
	var out []datafile.Sample
	for i, r := range raw {
		t, ok := r["t"].(float64)
		if !ok {
			continue
		}
		v, ok := r[key]
		if !ok && key != "val" {
			continue
		}
		s := datafile.Sample{T: t}
		if seq, ok := r["seq"].(float64); ok && math.Abs(seq) <= 1<<53 {
			s.Seq = int(seq)
		}
		if f, ok := v.(float64); ok {
			s.V = f
		} else {
			s.Lost = true
		}
		if err := datafile.CheckSample(fmt.Sprintf("raw_values[%q][%d]", name, i), s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// hasValue says whether any raw value has a value: flent falls back to the grid for
// a series whose raw values have none.
func hasValue(raw []datafile.Sample) bool {
	for _, s := range raw {
		if !s.Lost {
			return true
		}
	}
	return false
}

// flentUnix is a time as flent turns T0 into seconds (timegm plus microseconds over a
// million), so that a time compared against it is compared as flent compares it.
func flentUnix(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond()/1000)/1e6
}

func unixTime(t float64) time.Time {
	sec, frac := math.Modf(t)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9)))
}

// firstRawTime is the earliest raw timestamp of a file as flent 2.1.1's loader
// finds it (resultset.unserialise): over every record of every series that has a
// "t", starting from 10**10 (year 2286), so a file with none gives that.
func firstRawTime(raw map[string][]map[string]any) float64 {
	minT := 1e10
	for _, recs := range raw {
		for _, r := range recs {
			if t, ok := r["t"].(float64); ok && t < minT {
				minT = t
			}
		}
	}
	return minT
}

// maxZoneHours bounds the zone guessed for a time without one: a time 100 years
// from the raw timestamps is not one in a zone, and a Duration holds 292 years.
const maxZoneHours = 100 * 366 * 24

// zoneHours is the whole hours flent 2.1.1 adds to a time without a zone
// (util.parse_date with min_t): from the time read as UTC, in whole seconds as
// timegm takes it, it goes an hour at a time towards the earliest raw timestamp
// until within half an hour of it. Computed, not stepped: a file's times may be
// anywhere, and flent's loop would take a step an hour.
func zoneHours(naive time.Time, minT float64) (int, error) {
	ts := float64(naive.Unix())
	dir := 1.0
	if !(ts < minT) {
		dir = -1
	}
	n := 0.0
	if d := math.Abs(minT - ts); d > 1800 {
		n = math.Ceil((d - 1800) / 3600)
	}
	if !(n <= maxZoneHours) {
		return 0, fmt.Errorf("%s is %.0f hours from the earliest raw timestamp (%.0f): no time zone's", naive.Format("2006-01-02T15:04:05"), n, minT)
	}
	// flent's loop stops at the first hour within 1800 s, compared in its
	// arithmetic: the edges of the half hour are settled as it settles them.
	for n > 0 && math.Abs(ts+dir*3600*(n-1)-minT) <= 1800 {
		n--
	}
	for math.Abs(ts+dir*3600*n-minT) > 1800 {
		n++
	}
	return int(dir * n), nil
}

// zoneTimes gives T0 and TIME (t0 and started, read as UTC) as flent 2.1.1's
// loader takes them. A time with a Z is UTC. One without (netperf-wrapper's and
// flent 0.11's, test-rrul-icmp.flent.gz's "2015-07-12T23:18:08.117118") is
// the local time of the machine that ran the test: flent guesses its zone from the
// first of TIME and T0 that has none against the earliest raw timestamp, which is
// Unix time (zoneHours), and moves both by it. Read as UTC, such a T0 was hours
// from the raw values, every probe fell before it, and the loaded ping rows were
// empty. A file with no raw timestamp keeps its times as UTC: flent's guess from
// 10**10 moves them to the 23rd century.
func zoneTimes(md map[string]any, t0, started time.Time, raw map[string][]map[string]any) (time.Time, time.Time, error) {
	minT := firstRawTime(raw)
	if minT >= 1e10 {
		return t0, started, nil
	}
	hours, guessed := 0, false
	for _, key := range []string{"TIME", "T0"} { // flent's order (TIME_SETTINGS)
		s, ok := md[key].(string)
		if !ok || strings.HasSuffix(s, "Z") || guessed {
			continue
		}
		t, err := parseTime(s)
		if err != nil {
			continue
		}
		if hours, err = zoneHours(t, minT); err != nil {
			return t0, started, fmt.Errorf("metadata %s: %w", key, err)
		}
		guessed = true
	}
	shift := func(key string, t time.Time) time.Time {
		if s, ok := md[key].(string); ok && !strings.HasSuffix(s, "Z") {
			return t.Add(time.Duration(hours) * time.Hour)
		}
		return t
	}
	// Each as decode read it: T0 from TIME where it has none, TIME from T0.
	readable := func(key string) bool {
		s, ok := md[key].(string)
		_, err := parseTime(s)
		return ok && err == nil
	}
	t0Key, timeKey := "T0", "TIME"
	if !readable("T0") {
		t0Key = "TIME"
	}
	if !readable("TIME") {
		timeKey = t0Key
	}
	return shift(t0Key, t0), shift(timeKey, started), nil
}

func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04:05.999999Z", "2006-01-02T15:04:05Z", "2006-01-02T15:04:05.999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("not a flent time: %q", s)
}
