package datafile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
)

// Read loads a data file. A file cut short (a controller that died), damaged, or
// holding more than a reader takes (Limits) is read up to there and returned with
// Incomplete set and Error saying where it was cut; a file that is not a bloatbench
// data file is an error.
func Read(path string) (*Run, error) { return ReadContext(context.Background(), path) }

// ReadContext is Read that stops, with ctx's error, when ctx is done.
func ReadContext(ctx context.Context, path string) (*Run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read data file: %w", err)
	}
	defer f.Close()
	run, err := DecodeContext(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", path, err)
	}
	run.Path = path
	return run, nil
}

// Decode reads a data file's bytes.
func Decode(r io.Reader) (*Run, error) { return DecodeContext(context.Background(), r) }

// sampleSlack widens the span a run's samples are kept in, beyond the run's own
// length either side: an agent's clock is corrected to the controller's, so its
// samples are within seconds of the run.
const sampleSlack = 3600

// maxRecordSamples is the most samples a reader decodes of one record: twice what
// the writer puts in one. A record is decoded whole before its samples are sorted
// out, so this bounds what one record costs in memory: 200,000 samples are 9.6 MB
// (ten times the writer's, 48 MB a record, ran a plot out of address space under
// ulimit -v 2000000 on a file of thirty such records of '{}').
const maxRecordSamples = 2 * maxSamplesRecord

// maxNameless is how many series without a name a reader steps over before it
// stops: 10 million such records of 30 bytes took a minute to read.
const maxNameless = 1000

// checkEvery is how many records pass between looks at the context: a record is
// at most MaxRecord bytes, so even the longest take well under a second.
const checkEvery = 256

// limits are the bounds a decoder holds a file to: the Max constants, smaller in
// tests that reach them with small files.
type limits struct {
	bytes                                                   int64
	record, samples, series, events, eventBytes, stateBytes int
}

var defaultLimits = limits{bytes: MaxDecompressed, record: MaxRecord, samples: MaxSamples, series: MaxSeries,
	events: MaxEvents, eventBytes: MaxEventBytes, stateBytes: MaxStateBytes}

// DecodeContext reads a data file's bytes, stopping when ctx is done.
func DecodeContext(ctx context.Context, r io.Reader) (*Run, error) {
	return decode(ctx, r, defaultLimits)
}

func decode(ctx context.Context, r io.Reader, lim limits) (*Run, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not a gzip file (is it a bloatbench data file?): %w", err)
	}
	lines := newLineReader(Capped(gz, lim.bytes), lim.record)
	run := &Run{Samples: map[string][]Sample{}}
	var sawHeader, sawEnd bool
	var cut, skipped string // where reading stopped; records left out before that
	var nSamples, stateBytes, eventBytes int
	var dropped struct{ events, states, series, samples int }
	// Each series' records are kept as decoded and joined once at the end: appending
	// them one by one grows a slice by a quarter at a time, and the copies it leaves
	// behind were several times the samples in memory.
	chunks := map[string][][]Sample{}
	var window [2]float64 // the run's span, with room for clocks and late samples
	line := 0
read:
	for {
		if line%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		b, long, err := lines.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			cut = readProblem(line+1, err, lim.bytes)
			break
		}
		line++
		if long > 0 {
			// One record no run writes (the writer truncates and chunks below
			// it) costs that record, not the file.
			skipped = joinErr(skipped, fmt.Sprintf("record %d (%s) left out: longer than the %s a record may be", line, mib(long), mib(lim.record)))
			if !sawHeader {
				return nil, fmt.Errorf("record 1 is longer than %s: not a bloatbench data file", mib(lim.record))
			}
			continue
		}
		if bytes.HasPrefix(b, samplesPrefix) && bytes.Count(b, []byte{'}'}) > maxRecordSamples+1 {
			// The writer writes at most maxSamplesRecord samples a record; this many
			// in one would be hundreds of MB decoded ("{}" is 3 bytes, 48 in memory).
			skipped = joinErr(skipped, fmt.Sprintf("record %d left out: more than %d samples in one record", line, maxRecordSamples))
			continue
		}
		var rec Record
		if name, ss, ok := parseSamplesRecord(b); ok {
			rec = Record{Type: TypeSamples, Name: name, Samples: ss}
		} else if err := json.Unmarshal(b, &rec); err != nil {
			problem := JSONProblem(b, err)
			var syn *json.SyntaxError
			if !errors.As(err, &syn) || !lines.atEnd() {
				// A well-formed line of the wrong types, or a broken line with more
				// after it: not a line a dying writer cut, but a broken file.
				return nil, fmt.Errorf("record %d: %s", line, problem)
			}
			// A line cut by a dying writer is the end of what can be read.
			cut = fmt.Sprintf("record %d is damaged: %s", line, problem)
			break
		}
		if !sawHeader {
			if rec.Type != TypeHeader || rec.Format != Format || rec.Metadata == nil {
				return nil, fmt.Errorf("first record is not a %s header", Format)
			}
			if rec.Version > Version {
				return nil, fmt.Errorf("data file version %d is newer than this bloatbench reads (%d): upgrade bloatbench", rec.Version, Version)
			}
			if err := checkMetadata(rec.Metadata); err != nil {
				return nil, fmt.Errorf("header: %w", err)
			}
			run.Metadata = *rec.Metadata
			m := run.Metadata
			window = [2]float64{m.T0 - m.TotalLength - sampleSlack, m.T0 + 2*m.TotalLength + sampleSlack}
			sawHeader = true
			continue
		}
		switch rec.Type {
		case TypeSeries:
			if rec.Series == nil {
				continue
			}
			if rec.Series.Name == "" {
				// Nothing can name its samples. A few are a broken writer's; many
				// are not a data file, and reading on would take minutes.
				if dropped.series++; dropped.series > maxNameless {
					cut = fmt.Sprintf("record %d: more than %d series without a name", line, maxNameless)
					break read
				}
				continue
			}
			if len(run.Series) >= lim.series {
				cut = fmt.Sprintf("record %d: more than %d series, more than any run declares", line, lim.series)
				break read
			}
			run.Series = append(run.Series, *rec.Series)
		case TypeSamples:
			for i, s := range rec.Samples {
				// The key is formatted only for a sample that fails: formatting one
				// for each was a tenth of reading a 1024-stream file.
				if CheckSample("", s) != nil {
					return nil, fmt.Errorf("record %d (series %q): %w", line, rec.Name, CheckSample(fmt.Sprintf("samples[%d]", i), s))
				}
			}
			if nSamples+len(rec.Samples) > lim.samples {
				cut = fmt.Sprintf("record %d: more than %d samples, the most bloatbench reads of one file", line, lim.samples)
				break read
			}
			// A sample far outside the run was not taken by it ("{}" is a sample at
			// 0): left out and counted, not kept.
			kept := rec.Samples[:0]
			for _, s := range rec.Samples {
				if s.T >= window[0] && s.T <= window[1] {
					kept = append(kept, s)
				}
			}
			dropped.samples += len(rec.Samples) - len(kept)
			if len(kept) > 0 {
				nSamples += len(kept)
				chunks[rec.Name] = append(chunks[rec.Name], kept)
			}
		case TypeEvent:
			if rec.Event == nil {
				continue
			}
			if eventBytes += len(b); len(run.Events) >= lim.events || eventBytes > lim.eventBytes {
				dropped.events++
				continue
			}
			run.Events = append(run.Events, *rec.Event)
		case TypeState:
			if rec.State == nil {
				continue
			}
			if stateBytes += len(b); stateBytes > lim.stateBytes {
				dropped.states++
				continue
			}
			run.States = append(run.States, *rec.State)
		case TypeEnd:
			if rec.End != nil {
				sawEnd = true
				run.Incomplete = !rec.End.Complete
				run.Error = rec.End.Error
			}
		}
	}
	for name, cs := range chunks {
		n := 0
		for _, c := range cs {
			n += len(c)
		}
		all := make([]Sample, 0, n)
		for _, c := range cs {
			all = append(all, c...)
		}
		run.Samples[name] = all
		delete(chunks, name)
	}
	if !sawHeader {
		if cut != "" {
			return nil, fmt.Errorf("no readable header: %s", cut)
		}
		return nil, fmt.Errorf("empty data file")
	}
	m := run.Metadata
	if len(m.Aggregates) > MaxAggregates {
		return nil, fmt.Errorf("header: %d aggregates, more than the %d bloatbench computes", len(m.Aggregates), MaxAggregates)
	}
	if err := CheckGrid("metadata.step", m.Step, "metadata.total_length", m.TotalLength, GridValues(run)); err != nil {
		return nil, err
	}
	if dropped.series > 0 {
		skipped = joinErr(skipped, fmt.Sprintf("%d series without a name left out", dropped.series))
	}
	if dropped.samples > 0 {
		skipped = joinErr(skipped, fmt.Sprintf("%d samples outside the run (before t0 - total_length or after t0 + 2 x total_length) left out", dropped.samples))
	}
	if dropped.events > 0 {
		skipped = joinErr(skipped, fmt.Sprintf("%d events left out past %d events or %s", dropped.events, lim.events, mib(lim.eventBytes)))
	}
	if dropped.states > 0 {
		skipped = joinErr(skipped, fmt.Sprintf("%d bottleneck states left out past %s", dropped.states, mib(lim.stateBytes)))
	}
	switch {
	case cut != "":
		run.Incomplete = true
		run.Error = joinErr(run.Error, "file read up to the cut: "+cut)
	case !sawEnd:
		run.Incomplete = true
		run.Error = joinErr(run.Error, "the run did not end (controller killed?)")
	}
	if skipped != "" {
		run.Incomplete = true
		run.Error = joinErr(run.Error, skipped)
	}
	return run, nil
}

// readProblem says why reading stopped before record n.
func readProblem(n int, err error, capBytes int64) string {
	switch {
	case errors.Is(err, ErrTooLarge):
		return fmt.Sprintf("record %d: more than %s of data when decompressed, the most bloatbench reads of one file", n, mib(int(capBytes)))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("record %d: file is cut short", n)
	}
	return fmt.Sprintf("record %d: %v", n, err)
}

// mib writes a size for people: MiB when it is one or more, else bytes.
func mib(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// lineReader gives a stream's lines one at a time, as bufio.Scanner does, but
// steps over a line longer than its limit (reporting its length) instead of
// failing the stream: one record over the cap must not cost the records after it.
type lineReader struct {
	r     *bufio.Reader
	limit int
	buf   []byte
	err   error // what ended the stream, after its last line
}

func newLineReader(r io.Reader, limit int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), limit: limit}
}

// next returns the next line without its newline; a line past the limit comes
// back empty with its length in long. At the end of the stream err is io.EOF.
func (l *lineReader) next() (line []byte, long int, err error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		if long == 0 && len(l.buf)+len(frag) <= l.limit+1 {
			l.buf = append(l.buf, frag...)
		} else {
			if long == 0 {
				long = len(l.buf)
				l.buf = l.buf[:0]
			}
			long += len(frag)
		}
		switch {
		case err == nil:
			if long > 0 {
				return nil, long - 1, nil
			}
			return bytes.TrimSuffix(l.buf[:len(l.buf)-1], []byte{'\r'}), 0, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && (len(l.buf) > 0 || long > 0):
			// A last line without a newline is still a line.
			l.err = err
			return l.buf, long, nil
		}
		l.err = err
		return nil, 0, err
	}
}

// atEnd says whether the stream has no line after the one last returned.
func (l *lineReader) atEnd() bool {
	if l.err != nil {
		return true
	}
	_, err := l.r.Peek(1)
	return err != nil
}

// lastKey finds the last object key before a position in a JSON line.
var lastKey = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"\s*:[^"]*$`)

// JSONProblem says what is wrong with JSON data and at which key, for errors:
// encoding/json gives a byte offset or a Go type, where people look for a key.
func JSONProblem(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ):
		return fmt.Sprintf("key %s: %s where a %s belongs", typ.Field, typ.Value, typ.Type)
	case errors.As(err, &syn) && syn.Offset > 0 && syn.Offset <= int64(len(data)):
		at := data[syn.Offset-1:]
		hint := ""
		if bytes.HasPrefix(at, []byte("NaN")) || bytes.HasPrefix(at, []byte("Inf")) || bytes.HasPrefix(at, []byte("-Inf")) {
			hint = " (NaN and Infinity are not JSON numbers: no run writes them)"
		}
		// The key is near: look at the last few KB only, whatever the data's size.
		before := data[max(0, syn.Offset-4096) : syn.Offset-1]
		if k := lastKey.FindSubmatch(before); k != nil {
			return fmt.Sprintf("key %q: %v%s", k[1], err, hint)
		}
		return fmt.Sprintf("%v%s", err, hint)
	}
	return err.Error()
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
