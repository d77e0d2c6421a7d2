package datafile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
)

// maxLine bounds one record; a samples record of one series stays far below it.
const maxLine = 64 << 20

// Read loads a data file. A file cut short (a controller that died) is read up to the
// damage and returned with Incomplete set; a file that is not a bloatbench data file
// is an error.
func Read(path string) (*Run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read data file: %w", err)
	}
	defer f.Close()
	run, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", path, err)
	}
	run.Path = path
	return run, nil
}

// Decode reads a data file's bytes.
func Decode(r io.Reader) (*Run, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not a gzip file (is it a bloatbench data file?): %w", err)
	}
	sc := bufio.NewScanner(Capped(gz, MaxDecompressed))
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	run := &Run{Samples: map[string][]Sample{}}
	var sawHeader, sawEnd bool
	var damage string
	gridSeries := 0
	line := 0
	for sc.Scan() {
		line++
		var rec Record
		if name, ss, ok := parseSamplesRecord(sc.Bytes()); ok {
			rec = Record{Type: TypeSamples, Name: name, Samples: ss}
		} else if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			problem := JSONProblem(sc.Bytes(), err)
			var syn *json.SyntaxError
			if !errors.As(err, &syn) || sc.Scan() {
				// A well-formed line of the wrong types, or a broken line with more
				// after it: not a line a dying writer cut, but a broken file.
				return nil, fmt.Errorf("record %d: %s", line, problem)
			}
			// A line cut by a dying writer is the end of what can be read.
			damage = fmt.Sprintf("record %d is damaged: %s", line, problem)
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
			sawHeader = true
			continue
		}
		switch rec.Type {
		case TypeSeries:
			if rec.Series != nil {
				run.Series = append(run.Series, *rec.Series)
				if k := rec.Series.Kind; k == KindTCP || k == KindPing {
					gridSeries++
				}
			}
		case TypeSamples:
			for i, s := range rec.Samples {
				// The key is formatted only for a sample that fails: formatting one
				// for each was a tenth of reading a 1024-stream file.
				if CheckSample("", s) != nil {
					return nil, fmt.Errorf("record %d (series %q): %w", line, rec.Name, CheckSample(fmt.Sprintf("samples[%d]", i), s))
				}
			}
			run.Samples[rec.Name] = append(run.Samples[rec.Name], rec.Samples...)
		case TypeEvent:
			if rec.Event != nil {
				run.Events = append(run.Events, *rec.Event)
			}
		case TypeState:
			if rec.State != nil {
				run.States = append(run.States, *rec.State)
			}
		case TypeEnd:
			if rec.End != nil {
				sawEnd = true
				run.Incomplete = !rec.End.Complete
				run.Error = rec.End.Error
			}
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, ErrTooLarge):
		return nil, fmt.Errorf("more than %d MiB of data when decompressed, more than any run writes: a gzip bomb, or not a bloatbench data file", MaxDecompressed>>20)
	case errors.Is(err, bufio.ErrTooLong):
		return nil, fmt.Errorf("record %d is longer than %d MiB, which no run writes", line+1, maxLine>>20)
	case err != nil && damage == "":
		if errors.Is(err, io.ErrUnexpectedEOF) {
			damage = "file is cut short"
		} else {
			damage = err.Error()
		}
	}
	if !sawHeader {
		if damage != "" {
			return nil, fmt.Errorf("no readable header: %s", damage)
		}
		return nil, fmt.Errorf("empty data file")
	}
	m := run.Metadata
	if err := CheckGrid("metadata.step", m.Step, "metadata.total_length", m.TotalLength, gridSeries); err != nil {
		return nil, err
	}
	switch {
	case damage != "":
		run.Incomplete = true
		run.Error = joinErr(run.Error, damage)
	case !sawEnd:
		run.Incomplete = true
		run.Error = joinErr(run.Error, "the run did not end (controller killed?)")
	}
	return run, nil
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
