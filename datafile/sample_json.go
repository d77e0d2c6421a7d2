package datafile

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// sampleFields is Sample without its UnmarshalJSON: encoding/json's own decoding.
type sampleFields Sample

// UnmarshalJSON reads a sample as encoding/json would, faster. Samples are nearly all
// of a data file and of an agent's batches (a 60 s run of 1024 streams has 300,000),
// and encoding/json's reflection took most of summary's second on one. The samples
// bloatbench writes, a flat object of numbers and a bool with its keys as written
// and no spaces, are read here; anything else (other spellings of the keys, spaces,
// strings, null, a wrong type) goes to encoding/json, which gives the same result or
// the same error as before.
func (s *Sample) UnmarshalJSON(b []byte) error {
	if x, ok := parseSample(b, *s); ok {
		*s = x
		return nil
	}
	return json.Unmarshal(b, (*sampleFields)(s))
}

// parseSample reads b onto x when b is a sample as bloatbench writes it; ok is false
// for anything else.
func parseSample(b []byte, x Sample) (_ Sample, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return x, false
	}
	if len(b) == 2 {
		return x, true
	}
	i := 1
	for {
		// "key":
		if b[i] != '"' {
			return x, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j+1 >= len(b) || b[j] != '"' || b[j+1] != ':' {
			return x, false
		}
		key := b[i+1 : j]
		// the value, up to the next comma or the end
		i = j + 2
		k := i
		for k < len(b) && b[k] != ',' && b[k] != '}' {
			k++
		}
		if k >= len(b) {
			return x, false
		}
		val := b[i:k]
		switch string(key) {
		case "t", "v", "dur":
			if !isNumber(val) {
				return x, false
			}
			f, err := strconv.ParseFloat(string(val), 64)
			if err != nil {
				return x, false
			}
			switch key[0] {
			case 't':
				x.T = f
			case 'v':
				x.V = f
			default:
				x.Dur = f
			}
		case "n":
			if !isNumber(val) {
				return x, false
			}
			n, err := strconv.ParseUint(string(val), 10, 32)
			if err != nil {
				return x, false
			}
			x.N = uint32(n)
		case "bytes", "seq":
			if !isNumber(val) {
				return x, false
			}
			n, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				return x, false
			}
			if key[0] == 'b' {
				x.Bytes = n
			} else {
				if int64(int(n)) != n {
					return x, false
				}
				x.Seq = int(n)
			}
		case "lost", "user_stamp":
			var v bool
			switch string(val) {
			case "true":
				v = true
			case "false":
			default:
				return x, false
			}
			if key[0] == 'l' {
				x.Lost = v
			} else {
				x.UserStamp = v
			}
		default:
			return x, false
		}
		if b[k] == '}' {
			return x, k == len(b)-1
		}
		i = k + 1
		if i >= len(b) {
			return x, false
		}
	}
}

// isNumber says val is a JSON number, by its grammar: strconv accepts more (Inf,
// NaN, hex, "+1", ".5", "01"), which encoding/json refuses.
func isNumber(val []byte) bool {
	i := 0
	digits := func() bool {
		start := i
		for i < len(val) && val[i] >= '0' && val[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(val) && val[i] == '-' {
		i++
	}
	switch {
	case i < len(val) && val[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(val) && val[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(val) && (val[i] == 'e' || val[i] == 'E') {
		i++
		if i < len(val) && (val[i] == '+' || val[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	return i == len(val)
}

// samplesPrefix and samplesInfix frame a samples record as Writer writes it.
var (
	samplesPrefix = []byte(`{"type":"samples","name":"`)
	samplesInfix  = []byte(`","samples":[`)
)

// parseSamplesRecord reads a samples record laid out exactly as Writer writes it,
// without encoding/json: ok is false for any other line, which then goes to
// encoding/json for the same result or the same error. It checks all it reads,
// since nothing has checked the line before.
func parseSamplesRecord(line []byte) (name string, samples []Sample, ok bool) {
	rest, found := bytes.CutPrefix(line, samplesPrefix)
	if !found {
		return "", nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || !bytes.HasPrefix(rest[end:], samplesInfix) {
		return "", nil, false
	}
	raw := rest[:end]
	// encoding/json would unescape, or replace bytes that are not UTF-8.
	if bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
		return "", nil, false
	}
	for _, c := range raw {
		if c < 0x20 {
			return "", nil, false
		}
	}
	body, found := bytes.CutSuffix(rest[end+len(samplesInfix):], []byte("]}"))
	if !found || len(body) == 0 {
		return "", nil, false
	}
	// Samples hold no nested objects or strings: each ends at the first '}'.
	samples = make([]Sample, 0, bytes.Count(body, []byte("},"))+1)
	for {
		rb := bytes.IndexByte(body, '}')
		if rb < 0 {
			return "", nil, false
		}
		s, ok := parseSample(body[:rb+1], Sample{})
		if !ok {
			return "", nil, false
		}
		samples = append(samples, s)
		body = body[rb+1:]
		if len(body) == 0 {
			return string(raw), samples, true
		}
		if body[0] != ',' {
			return "", nil, false
		}
		body = body[1:]
	}
}
