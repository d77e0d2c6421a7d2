package runners

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// planCase is one row of a kind's plan table.
type planCase struct {
	kind   string
	params map[string]any
	// want is the agent's parameters the plan gives, or "error: " and what the
	// plan's error says.
	want string
	// series are what the plan declares the job yields.
	series []datafile.Series
}

// checkPlans plans every row on a planner of its own and checks what it gives. A
// plan that goes through is handed to agent (unless nil) with its kind, to be taken
// as the agent takes it (decoded, and resolved alike): what the controller plans,
// the agent must accept.
func checkPlans(t *testing.T, cases []planCase, agent func(kind string, raw json.RawMessage) error) {
	t.Helper()
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.kind, tc.params), func(t *testing.T) {
			kind, ok := Kinds()[tc.kind]
			if !ok {
				t.Fatalf("no kind %q", tc.kind)
			}
			raw, series, err := kind.Plan(tc.params, NewPlanner())
			if wantErr, isErr := strings.CutPrefix(tc.want, "error: "); isErr {
				if err == nil || !strings.Contains(err.Error(), wantErr) {
					t.Fatalf("error %v, want one containing %q", err, wantErr)
				}
				return
			}
			if err != nil || string(raw) != tc.want || !reflect.DeepEqual(series, tc.series) {
				t.Fatalf("got %s, %+v, %v; want %s, %+v", raw, series, err, tc.want, tc.series)
			}
			if agent != nil && len(raw) > 0 {
				if err := agent(tc.kind, raw); err != nil {
					t.Fatalf("agent: %v", err)
				}
			}
		})
	}
}
