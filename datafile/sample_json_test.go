package datafile

import (
	"encoding/json"
	"reflect"
	"testing"
)

// sampleCases are samples as bloatbench writes them and as it does not: the fast
// paths must read each exactly as encoding/json does, or refuse it the same way.
var sampleCases = []string{
	`{"t":1796080665.4483225,"v":23.5,"dur":0.2,"bytes":578123}`,
	`{"t":1,"v":0.05,"seq":7}`,
	`{"t":1,"v":0,"seq":8,"lost":true}`,
	`{"t":1,"lost":false}`,
	`{"t":1,"v":26.2,"seq":33,"user_stamp":true}`,
	`{"t":1,"user_stamp":false,"lost":true}`,
	`{"user_stamp":1}`,
	`{"t":1,"v":0.0245,"dur":0.2,"n":17}`,
	`{"n":4294967295}`,
	`{"n":4294967296}`,
	`{"n":-1}`,
	`{"n":1.5}`,
	`{}`,
	`{"t":-0,"v":1e-7,"dur":2E+3}`,
	`{"T":1,"V":2}`,
	`{"t": 1}`,
	`{"t":1,"t":2}`,
	`{"t":"1"}`,
	`{"t":null,"v":3}`,
	`{"bytes":1.5}`,
	`{"bytes":1e3}`,
	`{"bytes":99999999999999999999}`,
	`{"v":1e999}`,
	`{"seq":-3,"other":{"a":[1,2]}}`,
	`{"\u0074":4}`,
	`{"lost":1}`,
	`null`,
	`[1]`,
}

func TestSampleJSONAsEncodingJSON(t *testing.T) {
	for _, c := range sampleCases {
		var fast Sample
		ferr := json.Unmarshal([]byte(c), &fast)
		var slow sampleFields
		serr := json.Unmarshal([]byte(c), &slow)
		if (ferr == nil) != (serr == nil) || !reflect.DeepEqual(fast, Sample(slow)) {
			t.Errorf("%s: read %+v (%v), encoding/json %+v (%v)", c, fast, ferr, slow, serr)
		}
	}
}

// recordCases are lines a data file may hold.
var recordCases = []string{
	`{"type":"samples","name":"TCP download::1","samples":[{"t":1,"v":2,"dur":0.2,"bytes":5},{"t":2,"v":3}]}`,
	`{"type":"samples","name":"Ping (ms) ICMP","samples":[{"t":1,"v":0.02,"seq":1}]}`,
	`{"type":"samples","name":"a\"b","samples":[{"t":1}]}`,
	`{"type":"samples","name":"caf` + "\xe9" + `","samples":[{"t":1}]}`,
	`{"type":"samples","name":"x","samples":[]}`,
	`{"type":"samples","name":"x","samples":[{"t":01}]}`,
	`{"type":"samples","name":"x","samples":[{"t":.5}]}`,
	`{"type":"samples","name":"x","samples":[{"t":+1}]}`,
	`{"type":"samples","name":"x","samples":[{"t":1.}]}`,
	`{"type":"samples","name":"x","samples":[{"t":1},]}`,
	`{"type":"samples","name":"x","samples":[{"t":1}{"t":2}]}`,
	`{"type":"samples","name":"x","samples":[{"t":1}]} `,
	`{"type":"samples","name":"x","samples":[{"t":1,"v":{"a":1}}]}`,
	`{"type":"samples","name":"x","samples":[{"t":1}],"type":"event"}`,
	`{"type":"samples","name":"x","samples":[{"t":Infinity}]}`,
}

func TestSamplesRecordAsEncodingJSON(t *testing.T) {
	for _, c := range recordCases {
		checkRecordLine(t, []byte(c))
	}
}

func checkRecordLine(t *testing.T, line []byte) {
	name, ss, ok := parseSamplesRecord(line)
	var rec Record
	err := json.Unmarshal(line, &rec)
	if !ok {
		return // encoding/json reads it, as before
	}
	if err != nil {
		t.Errorf("%s: read as %q %+v where encoding/json fails: %v", line, name, ss, err)
		return
	}
	want := Record{Type: TypeSamples, Name: name, Samples: ss}
	if !reflect.DeepEqual(rec, want) {
		t.Errorf("%s: read %+v, encoding/json %+v", line, want, rec)
	}
}

func FuzzSamplesRecord(f *testing.F) {
	for _, c := range recordCases {
		f.Add([]byte(c))
	}
	for _, c := range sampleCases {
		f.Add([]byte(`{"type":"samples","name":"x","samples":[` + c + `]}`))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkRecordLine(t, line)
		var fast Sample
		ferr := json.Unmarshal(line, &fast)
		var slow sampleFields
		serr := json.Unmarshal(line, &slow)
		if (ferr == nil) != (serr == nil) || !reflect.DeepEqual(fast, Sample(slow)) {
			t.Errorf("%s: read %+v (%v), encoding/json %+v (%v)", line, fast, ferr, slow, serr)
		}
	})
}
