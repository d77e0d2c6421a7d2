package yamlkeys

import (
	"bytes"
	"testing"

	"go.yaml.in/yaml/v3"
)

type host struct {
	SSH    string `yaml:"ssh"`
	TestIP string `yaml:"test_ip,omitempty"`
	User   string `yaml:"user"`
	Skip   string `yaml:"-"`
	Inline struct {
		Extra string `yaml:"extra"`
	} `yaml:",inline"`
}

type inv struct {
	Client string           `yaml:"client"`
	Hosts  map[string]*host `yaml:"hosts"`
	List   []host           `yaml:"list"`
}

// The message yaml.v3 gives, rewritten: the key, a suggestion, the keys valid there.
func TestExplain(t *testing.T) {
	types := Of(inv{})
	for _, tc := range []struct{ doc, want string }{
		{"hosts:\n  a: {ssh: x, test_ipp: y}\n", "yaml: unmarshal errors:\n  line 2: unknown key test_ipp (did you mean test_ip?); valid here: extra, ssh, test_ip, user"},
		{"clinet: a\n", "yaml: unmarshal errors:\n  line 1: unknown key clinet (did you mean client?); valid here: client, hosts, list"},
		{"zzz: a\n", "yaml: unmarshal errors:\n  line 1: unknown key zzz; valid here: client, hosts, list"},
	} {
		dec := yaml.NewDecoder(bytes.NewReader([]byte(tc.doc)))
		dec.KnownFields(true)
		var v inv
		err := dec.Decode(&v)
		if err == nil {
			t.Fatalf("%q decoded", tc.doc)
		}
		if got := types.Explain(err.Error()); got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.doc, got, tc.want)
		}
	}
	if got := types.Explain("line 3: cannot unmarshal !!str"); got != "line 3: cannot unmarshal !!str" {
		t.Errorf("another message changed: %q", got)
	}
}

func TestNearest(t *testing.T) {
	keys := []string{"bottleneck", "client", "server", "hosts", "path_devices"}
	for in, want := range map[string]string{
		"bottlneck": "bottleneck", "sever": "server", "cleint": "client", "host": "hosts", "xyz": "", "": "",
		"paths_devices": "path_devices", "srv": "",
	} {
		if got := Nearest(in, keys); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
