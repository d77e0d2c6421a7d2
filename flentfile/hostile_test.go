package flentfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture is the flent-made file, decoded, to break a piece of.
func fixture(t *testing.T) map[string]any {
	t.Helper()
	return readFlentJSON(t, "testdata/ping.loopback.flent-2.1.1.flent.gz")
}

func writeGz(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+Ext)
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// flent files made by hand or by mistake are refused with the file, the key and
// what is wrong: never a panic, never gigabytes of memory.
func TestHostileFlentFilesRefused(t *testing.T) {
	meta := func(k string, v any) func(map[string]any) {
		return func(d map[string]any) { d["metadata"].(map[string]any)[k] = v }
	}
	rawT := func(v any) func(map[string]any) {
		return func(d map[string]any) {
			d["raw_values"].(map[string]any)["Ping (ms) ICMP"].([]any)[3].(map[string]any)["t"] = v
		}
	}
	cases := []struct {
		name string
		edit func(map[string]any)
		text [2]string // a replacement in the JSON text, for what Go cannot encode
		want []string
	}{
		{name: "zero STEP_SIZE", edit: meta("STEP_SIZE", 0), want: []string{"STEP_SIZE", "more than 0"}},
		{name: "negative STEP_SIZE", edit: meta("STEP_SIZE", -0.2), want: []string{"STEP_SIZE", "-0.2"}},
		{name: "zero TOTAL_LENGTH", edit: meta("TOTAL_LENGTH", 0), want: []string{"TOTAL_LENGTH", "more than 0"}},
		{name: "negative TOTAL_LENGTH", edit: meta("TOTAL_LENGTH", -4), want: []string{"TOTAL_LENGTH", "-4"}},
		{name: "billion-point grid", edit: meta("STEP_SIZE", 1e-9), want: []string{"STEP_SIZE", "grid points"}},
		{name: "absurd TOTAL_LENGTH", edit: meta("TOTAL_LENGTH", 1e300), want: []string{"TOTAL_LENGTH"}},
		{name: "NaN TOTAL_LENGTH", text: [2]string{`"TOTAL_LENGTH":4`, `"TOTAL_LENGTH":NaN`}, want: []string{`key "TOTAL_LENGTH"`, "NaN"}},
		{name: "Infinity value", text: [2]string{`"val":0.049`, `"val":Infinity`}, want: []string{`key "val"`, "Infinity"}},
		{name: "huge value", text: [2]string{`"val":0.049`, `"val":1e999`}, want: []string{"raw_values", "1e999"}},
		{name: "absurd raw time", edit: rawT(-1e300), want: []string{`raw_values["Ping (ms) ICMP"][3].t`}},
		{name: "absurd x value", edit: func(d map[string]any) {
			delete(d["raw_values"].(map[string]any), "Ping (ms) ICMP")
			d["x_values"].([]any)[2] = 1e300
		}, want: []string{"x_values[2]", "1e+300"}},
		{name: "absurd result", edit: func(d map[string]any) {
			delete(d["raw_values"].(map[string]any), "Ping (ms) ICMP")
			d["results"].(map[string]any)["Ping (ms) ICMP"].([]any)[2] = 1e300
		}, want: []string{`results["Ping (ms) ICMP"][2].v`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := fixture(t)
			if c.edit != nil {
				c.edit(doc)
			}
			data, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			if c.text[0] != "" {
				if !bytes.Contains(data, []byte(c.text[0])) {
					t.Fatalf("the fixture has no %s", c.text[0])
				}
				data = bytes.Replace(data, []byte(c.text[0]), []byte(c.text[1]), 1)
			}
			path := writeGz(t, "hostile", data)
			_, err = Read(path)
			if err == nil {
				t.Fatal("read without error")
			}
			for _, w := range append(c.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// Files whose JSON is small values that become large objects ("{}" is 3 bytes of
// JSON and a map in memory), and version-1 files whose results would each be
// spread over a long x_values, are refused before they are decoded or converted.
func TestFlentFilesOfManyObjectsRefused(t *testing.T) {
	meta := `"metadata":{"NAME":"ping","T0":"2026-12-02T10:00:00.000000","STEP_SIZE":0.2,"TOTAL_LENGTH":14}`
	var v1 strings.Builder
	v1.WriteString(`{"version":1,` + meta + `,"x_values":[0`)
	v1.WriteString(strings.Repeat(",1", 100_000))
	v1.WriteString(`],"results":{`)
	for i := range 30 {
		if i > 0 {
			v1.WriteString(",")
		}
		v1.WriteString(`"Ping (ms) ` + string(rune('a'+i)) + `":[]`)
	}
	v1.WriteString("}}")
	cases := []struct {
		name, data string
		want       []string
	}{
		{"empty objects", `{"version":4,` + meta + `,"raw_values":{"Ping (ms) ICMP":[{}` + strings.Repeat(",{}", MaxValues) + "]}}",
			[]string{"more than 4000000 JSON values"}},
		{"nulls", `{"version":4,` + meta + `,"results":{"Ping (ms) ICMP":[null` + strings.Repeat(",null", MaxValues) + "]}}",
			[]string{"JSON values"}},
		{"version 1, results x x_values", v1.String(), []string{"version-1", "30 results x 100001 x_values"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeGz(t, strings.ReplaceAll(c.name, " ", "-"), []byte(c.data))
			_, err := Read(path)
			if err == nil {
				t.Fatal("read without error")
			}
			for _, w := range append(c.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestCountValues(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{`1`, 1},
		{`[1,2,3]`, 4},
		{`{"a":1,"b":[null,{}]}`, 8}, // from above: keys count as values
		{`"a,b:[{"`, 1},              // brackets in a string are not values
		{`["a\",b",1]`, 3},           // nor is an escaped quote the string's end
		{`{"x":"\\","y":2}`, 5},      // an escaped backslash is
	} {
		if got := countValues([]byte(c.in)); got != c.want {
			t.Errorf("countValues(%s) = %d, want %d", c.in, got, c.want)
		}
	}
}
