package datafile

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
	sc := bufio.NewScanner(gz)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	run := &Run{Samples: map[string][]Sample{}}
	var sawHeader, sawEnd bool
	var damage string
	line := 0
	for sc.Scan() {
		line++
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			// A line cut by a dying writer is the end of what can be read.
			damage = fmt.Sprintf("record %d is damaged: %v", line, err)
			break
		}
		if !sawHeader {
			if rec.Type != TypeHeader || rec.Format != Format || rec.Metadata == nil {
				return nil, fmt.Errorf("first record is not a %s header", Format)
			}
			if rec.Version > Version {
				return nil, fmt.Errorf("data file version %d is newer than this bloatbench reads (%d): upgrade bloatbench", rec.Version, Version)
			}
			run.Metadata = *rec.Metadata
			sawHeader = true
			continue
		}
		switch rec.Type {
		case TypeSeries:
			if rec.Series != nil {
				run.Series = append(run.Series, *rec.Series)
			}
		case TypeSamples:
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
	if err := sc.Err(); err != nil && damage == "" {
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

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
