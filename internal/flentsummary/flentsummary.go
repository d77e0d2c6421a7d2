// Package flentsummary runs flent on a data file and reads the text summary it
// prints (`flent -i FILE -f summary`), so tests can hold bloatbench's numbers against
// flent's own.
package flentsummary

import (
	"bufio"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
)

// Run prints a data file's summary with the flent on PATH (`flent -i FILE -f summary`
// and args, e.g. "--data-cutoff", "2,10") and returns its rows and its output.
func Run(file string, args ...string) (map[string]Row, string, error) {
	if _, err := exec.LookPath("flent"); err != nil {
		return nil, "", fmt.Errorf("flent is missing (bash scripts/install-deps installs it): %w", err)
	}
	out, err := exec.Command("flent", append([]string{"-i", file, "-f", "summary"}, args...)...).CombinedOutput()
	if err != nil {
		return nil, string(out), fmt.Errorf("flent -i %s -f summary %s: %w\n%s", file, strings.Join(args, " "), err, out)
	}
	rows, err := Parse(string(out))
	return rows, string(out), err
}

// Row is one series of flent's summary; a value flent printed as N/A is NaN.
type Row struct {
	Avg, Median, P99 float64
	Units            string
	Points           int
	// NoData says flent printed "No data." for the series.
	NoData bool
}

// Parse reads the rows of flent 2.1.1's summary (name : avg median 99th% units N).
func Parse(text string) (map[string]Row, error) {
	rows := map[string]Row{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), " : ")
		if !ok {
			continue
		}
		if strings.TrimSpace(rest) == "No data." {
			// flent found no value to summarise (a series that never had one).
			rows[strings.TrimSpace(name)] = Row{Avg: math.NaN(), Median: math.NaN(), P99: math.NaN(), NoData: true}
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 4 {
			// A series with no units: flent prints none between the 99th % and
			// the count.
			f = []string{f[0], f[1], f[2], "", f[3]}
		}
		if len(f) != 5 {
			return nil, fmt.Errorf("flent summary line %q: want avg, median, 99th %%, units, points", sc.Text())
		}
		var r Row
		for i, dst := range []*float64{&r.Avg, &r.Median, &r.P99} {
			if f[i] == "N/A" {
				*dst = math.NaN()
				continue
			}
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("flent summary line %q: %w", sc.Text(), err)
			}
			*dst = v
		}
		r.Units = f[3]
		n, err := strconv.Atoi(f[4])
		if err != nil {
			return nil, fmt.Errorf("flent summary line %q: %w", sc.Text(), err)
		}
		r.Points = n
		rows[strings.TrimSpace(name)] = r
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no rows in flent's summary:\n%s", text)
	}
	return rows, nil
}
