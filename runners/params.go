package runners

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// wholeNumber is a parameter that is a whole number, written as a number or as a
// string (a test parameter's value is a string: count: ${download_streams}).
type wholeNumber int

func (n *wholeNumber) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%s is not a whole number", b)
	}
	*n = wholeNumber(v)
	return nil
}

// seconds is a duration parameter in seconds, written as a number or a string.
type seconds float64

func (d *seconds) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v < 0 {
		return fmt.Errorf("%s is not a number of seconds", b)
	}
	*d = seconds(v)
	return nil
}

// boolFlag is a parameter that is true or false, written as a JSON boolean or as
// a string (a test parameter's value is a string: per_core: ${per_core}).
type boolFlag bool

func (f *boolFlag) UnmarshalJSON(b []byte) error {
	switch strings.TrimSpace(strings.Trim(string(b), `"`)) {
	case "true":
		*f = true
	case "false":
		*f = false
	default:
		return fmt.Errorf("%s is not true or false", b)
	}
	return nil
}

// textParam is a parameter kept as text that a test may write as a string or as a
// number (tos: 184 and bandwidth: 1000000 are numbers in YAML); the kind reads
// the text.
type textParam string

func (t *textParam) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*t = textParam(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("%s is neither text nor a number", b)
	}
	*t = textParam(n.String())
	return nil
}

var _ json.Unmarshaler = (*wholeNumber)(nil)
