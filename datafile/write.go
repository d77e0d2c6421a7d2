package datafile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// flushEvery bounds what a controller killed mid-run can lose.
const flushEvery = time.Second

// Writer appends records to a data file as a run goes. It is safe for concurrent use.
type Writer struct {
	mu        sync.Mutex
	f         *os.File
	gz        *gzip.Writer
	buf       bytes.Buffer
	lastFlush time.Time
	// pending holds samples until the next flush, by series, in the order the
	// series first came: one record per series a flush instead of one per batch
	// an agent sends. With 1024 streams an agent's batch (every 100 ms) holds one
	// sample of each; a record each was 52,000 records a 10 s run, and their
	// decoding most of what summary took.
	pending map[string][]Sample
	order   []string
	closed  bool
	err     error
}

// Create makes a new data file at path; it never overwrites one.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create data file: %w", err)
	}
	return &Writer{f: f, gz: gzip.NewWriter(f), lastFlush: time.Now()}, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// CreateIn makes a new data file in dir named after the test, the start time and
// the title, adding a counter when that name is taken.
func CreateIn(dir, test, title string, start time.Time) (*Writer, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("create output directory: %w", err)
	}
	base := test + "-" + start.Format("2006-01-02T150405")
	if t := strings.Trim(unsafeName.ReplaceAllString(title, "_"), "_"); t != "" {
		base += "." + t
	}
	for i := 0; i < 1000; i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		path := filepath.Join(dir, name+Ext)
		w, err := Create(path)
		if err == nil {
			return w, path, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("create data file in %s: too many files named %s", dir, base)
}

// Ext is the data file's name ending.
const Ext = ".bb.json.gz"

// Bounds of what the writer writes, so that it never writes a record the reader
// leaves out (MaxRecord): texts from hosts are truncated with a marker, and samples
// are written in records of at most maxSamplesRecord.
const (
	// MaxText bounds an event's message, a fact, a note: 64 KiB is a long kernel
	// log; JSON's escapes make at most 6 times as many bytes of it.
	MaxText = 64 << 10
	// maxFactBytes bounds the facts kept of one host (a host has a few hundred,
	// of some KB in all); maxFact one fact's value.
	maxFactBytes = 1 << 20
	maxFact      = 4 << 10
	// MaxRaw bounds a kernel's read-back or statistics (tc -s -j output) kept as
	// JSON: mq with 64 fq_codel children writes about 100 KB.
	MaxRaw = 4 << 20
	// maxSamplesRecord is the most samples one record holds (about 6 MB of JSON).
	maxSamplesRecord = 100_000
)

// Truncate cuts s to at most n bytes, on a UTF-8 boundary, and says how much it
// left out.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(" [... %d bytes left out]", len(s)-cut)
}

// boundRaw keeps raw JSON up to MaxRaw; past it, or with a reason, a JSON string
// that says why it was left out.
func boundRaw(raw json.RawMessage, reason ...string) json.RawMessage {
	if len(raw) <= MaxRaw && len(reason) == 0 {
		return raw
	}
	why := fmt.Sprintf("%d bytes of kernel output left out: more than the %d MiB a data file keeps", len(raw), MaxRaw>>20)
	if len(reason) > 0 {
		why = "kernel output left out: " + reason[0]
	}
	b, _ := json.Marshal("(" + why + ")")
	return b
}

// boundMetadata truncates what hosts and people put into a header.
func boundMetadata(m Metadata) Metadata {
	m.Note = Truncate(m.Note, MaxText)
	m.Title = Truncate(m.Title, MaxText)
	var hosts []Host // nil stays nil: a file reads back as it was written
	if m.Hosts != nil {
		hosts = make([]Host, len(m.Hosts))
	}
	for i, h := range m.Hosts {
		h.Hostname, h.Kernel = Truncate(h.Hostname, MaxText), Truncate(h.Kernel, MaxText)
		if len(h.Facts) > 0 {
			// In key order, so that what is kept does not depend on map order.
			keys := slices.Sorted(maps.Keys(h.Facts))
			facts := make(map[string]string, len(keys))
			size := 0
			for i, k := range keys {
				k2, v := Truncate(k, 256), Truncate(h.Facts[k], maxFact)
				if size += len(k2) + len(v); size > maxFactBytes {
					facts["bloatbench.facts_left_out"] = fmt.Sprint(len(keys) - i)
					break
				}
				facts[k2] = v
			}
			h.Facts = facts
		}
		hosts[i] = h
	}
	m.Hosts = hosts
	if m.Setup != nil {
		setup := *m.Setup
		setup.Devices = append([]SetupDevice(nil), setup.Devices...)
		for i := range setup.Devices {
			setup.Devices[i].ReadBack = boundRaw(setup.Devices[i].ReadBack)
		}
		m.Setup = &setup
	}
	return m
}

// Header writes the first record. It is flushed at once so that even a run that
// dies in its first second leaves a readable file.
func (w *Writer) Header(m Metadata) error {
	m = boundMetadata(m)
	if line, err := encode(Record{Type: TypeHeader, Format: Format, Version: Version, Metadata: &m}); err == nil && len(line) > MaxRecord/2 && m.Setup != nil {
		// Many devices' read-backs: the header must stay readable, the read-backs
		// can go (the commands that made them stay).
		for i := range m.Setup.Devices {
			m.Setup.Devices[i].ReadBack = boundRaw(m.Setup.Devices[i].ReadBack[:0:0], "the header's read-backs were more than a record may hold")
		}
	}
	if err := w.write(Record{Type: TypeHeader, Format: Format, Version: Version, Metadata: &m}); err != nil {
		return err
	}
	return w.Flush()
}

// AddSeries declares a series before its samples.
func (w *Writer) AddSeries(s Series) error {
	return w.write(Record{Type: TypeSeries, Series: &s})
}

// Append records samples of a series. They are written with the next flush, at most
// a second later, together with the series' other samples by then.
func (w *Writer) Append(series string, samples []Sample) error {
	if len(samples) == 0 {
		return nil
	}
	// What encoding would refuse at the flush is refused here, where the caller
	// can tell which samples; at the flush it would end the file.
	for _, s := range samples {
		for _, v := range []float64{s.T, s.V, s.Dur} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("encode samples record of %q: %v is not a JSON number", series, v)
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	if w.pending == nil {
		w.pending = map[string][]Sample{}
	}
	if _, ok := w.pending[series]; !ok {
		w.order = append(w.order, series)
	}
	w.pending[series] = append(w.pending[series], samples...)
	return w.flushIfDueLocked()
}

// State records a bottleneck's statistics before or after the run.
func (w *Writer) State(st State) error {
	st.TC = boundRaw(st.TC)
	return w.write(Record{Type: TypeState, State: &st})
}

// Event records a note; a message longer than MaxText is truncated.
func (w *Writer) Event(e Event) error {
	e.Message = Truncate(e.Message, MaxText)
	e.Host = Truncate(e.Host, 256)
	return w.write(Record{Type: TypeEvent, Event: &e})
}

// encode is a record's line. HTML is not escaped: a host's log of "<" would be six
// times its size as "\u003c", and nothing reads the file as HTML.
func encode(r Record) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (w *Writer) write(r Record) error {
	line, err := encode(r)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", r.Type, err)
	}
	if len(line) > MaxRecord {
		// The bounds above keep every record below this; a record past it would
		// be left out by readers, so it is replaced by a note that says so.
		line, err = encode(Record{Type: TypeEvent, Event: &Event{T: Unix(time.Now()), Level: "warning",
			Message: fmt.Sprintf("a %s record of %d MiB was left out: longer than the %d MiB a record may be", r.Type, len(line)>>20, MaxRecord>>20)}})
		if err != nil {
			return fmt.Errorf("encode %s record: %w", r.Type, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	w.buf.Write(line) // encode ends it with a newline
	return w.flushIfDueLocked()
}

func (w *Writer) usableLocked() error {
	if w.closed {
		return fmt.Errorf("data file %s: write after close", w.f.Name())
	}
	return w.err
}

func (w *Writer) flushIfDueLocked() error {
	if time.Since(w.lastFlush) >= flushEvery {
		return w.flushLocked()
	}
	return nil
}

// pendingLocked moves the pending samples into the buffer, a record per series
// (or more, of maxSamplesRecord each).
func (w *Writer) pendingLocked() error {
	for _, name := range w.order {
		for ss := w.pending[name]; len(ss) > 0; {
			n := min(len(ss), maxSamplesRecord)
			line, err := encode(Record{Type: TypeSamples, Name: name, Samples: ss[:n]})
			if err != nil {
				return fmt.Errorf("encode samples record of %q: %w", name, err)
			}
			w.buf.Write(line)
			ss = ss[n:]
		}
	}
	clear(w.pending)
	w.order = w.order[:0]
	return nil
}

// Flush ends the current gzip member and writes it out.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	w.lastFlush = time.Now()
	if w.err != nil {
		return w.err
	}
	if err := w.pendingLocked(); err != nil {
		w.err = err
		return err
	}
	if w.buf.Len() == 0 {
		return nil
	}
	if _, err := w.gz.Write(w.buf.Bytes()); err != nil {
		w.err = fmt.Errorf("write data file %s: %w", w.f.Name(), err)
		return w.err
	}
	w.buf.Reset()
	if err := w.gz.Close(); err != nil {
		w.err = fmt.Errorf("write data file %s: %w", w.f.Name(), err)
		return w.err
	}
	w.gz.Reset(w.f)
	return nil
}

// Close writes the end record (complete when runErr is nil) and closes the file.
func (w *Writer) Close(runErr error) error {
	end := End{T: Unix(time.Now()), Complete: runErr == nil}
	if runErr != nil {
		end.Error = runErr.Error()
	}
	// The pending samples go before the end record, the run's last.
	w.mu.Lock()
	if w.usableLocked() == nil {
		if err := w.pendingLocked(); err != nil {
			w.err = err
		}
	}
	w.mu.Unlock()
	werr := w.write(Record{Type: TypeEnd, End: &end})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	ferr := w.flushLocked()
	w.closed = true
	cerr := w.f.Close()
	for _, e := range []error{werr, ferr, cerr} {
		if e != nil {
			return e
		}
	}
	return nil
}

// Path is where the file is.
func (w *Writer) Path() string { return w.f.Name() }
