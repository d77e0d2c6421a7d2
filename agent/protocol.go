// Package agent is the endpoint side of bloatbench and the controller's handle on it.
// The controller starts `bloatbench agent` on each endpoint over SSH and speaks this
// protocol over the session's stdin and stdout: one JSON object a line, requests one
// way, replies and sample batches the other. Sample times are the agent's clock; the
// controller corrects them with the offset it estimates at start.
package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/runners"
)

// ProtocolVersion changes when either side could misread the other. 2: jobs carry
// their start time (an agent of 1 would start them at once); ping's reply says where
// its timestamps come from. 3: one start request for every kind of job, looked up
// in the agent's registry; agents declare the series they find. 4: jobs may be
// prepared ahead of their start (OpPrepare). 5: the agent reads its host's facts
// (OpFacts) and tells its identity in its hello.
const ProtocolVersion = 5

// Operations a request can ask for.
const (
	OpHello = "hello" // who are you: versions, hostname, kernel
	OpClock = "clock" // what time is it, for the offset estimate
	// OpStart starts a job of any kind the agent's registry has (runners.Kinds).
	OpStart = "start"
	// OpPrepare does the slow part of a job's start ahead of it, before the run
	// picks its t0 (a kind's Prepare: the sojourn tracer's BPF programs, which an
	// emulated guest takes seconds of CPU to verify); the start of that job name
	// takes what it prepared. A kind with nothing to prepare answers at once.
	OpPrepare = "prepare"
	OpStop    = "stop" // end a job early
	// OpExec runs a shell command on the host and answers with its output: the
	// controller's tc, sysfs and ethtool work goes through the running agent, not a
	// new SSH session (and login shell) per command.
	OpExec = "exec"
	// OpFacts reads the host's facts (package hostfacts) with the request's
	// devices as its bottlenecks.
	OpFacts = "facts"
)

// Message types from the agent.
const (
	TypeReply = "reply" // answers request ID
	TypeBatch = "batch" // samples, by series
	TypeDone  = "done"  // a job ended, with its error if any
	TypeLog   = "log"   // a warning worth recording
	// TypeAlert is a warning the person running the test must see, not only
	// the data file: it is printed as the run goes, and recorded.
	TypeAlert = "alert"
	// TypeSeries declares a series a job found as it ran (a qdisc's statistic),
	// sent before any of its samples.
	TypeSeries = "series"
)

// Request is one line from the controller.
type Request struct {
	ID    int64            `json:"id"`
	Op    string           `json:"op"`
	Job   string           `json:"job,omitempty"`
	Start *runners.JobSpec `json:"start,omitempty"`
	Exec  *ExecSpec        `json:"exec,omitempty"`
	// Devs are OpFacts' devices.
	Devs []string `json:"devs,omitempty"`
}

// ExecSpec is a command for `sh -c`, already quoted by the controller, with its
// standard input and how long it may take.
type ExecSpec struct {
	Cmd     string  `json:"cmd"`
	Stdin   []byte  `json:"stdin,omitempty"`
	Timeout float64 `json:"timeout"` // seconds; 0 = none
}

// ExecResult is how a command ended. A command that ran and exited non-zero is a
// result, not a protocol error: Exit and Stderr say what happened.
type ExecResult struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Exit   int    `json:"exit"`
	// Killed says the command ran past its timeout and was killed.
	Killed bool `json:"killed,omitempty"`
}

// Hello describes the agent's host.
type Hello struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"`
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	PID      int    `json:"pid"`
	// Identity is who the host is (qdisc.IdentityHere: its machine-id and the
	// agent's network namespace), "" when it cannot tell.
	Identity string `json:"identity,omitempty"`
}

// Message is one line from the agent.
type Message struct {
	Type    string                       `json:"type"`
	ID      int64                        `json:"id,omitempty"`
	Job     string                       `json:"job,omitempty"`
	Error   string                       `json:"error,omitempty"`
	Hello   *Hello                       `json:"hello,omitempty"`
	Clock   int64                        `json:"clock,omitempty"` // Unix nanoseconds
	Port    int                          `json:"port,omitempty"`
	Batch   map[string][]datafile.Sample `json:"batch,omitempty"`
	Message string                       `json:"message,omitempty"`
	Exec    *ExecResult                  `json:"exec,omitempty"`
	// Facts answers OpFacts.
	Facts map[string]string `json:"facts,omitempty"`
	// Timestamps answers a start: where the job's times will come from
	// (datafile.StampsKernel, ...), with the details in Message.
	Timestamps string `json:"timestamps,omitempty"`
	// Series is a TypeSeries declaration.
	Series *datafile.Series `json:"series,omitempty"`
	// Dropped, on the controller's side, is a batch's samples DecodeMessage left
	// out (about how many: more than MaxBatchSamples); Batch is then empty.
	Dropped int `json:"-"`
}

// batchless is a Message whose batch is skipped unread: the JSON decoder steps over
// an object decoded into an empty struct without keeping any of it.
type batchless struct {
	Message
	Batch struct{} `json:"batch"`
}

// maxSeriesName bounds a declared series' name: it is a key in every report.
const maxSeriesName = 512

// MaxBatchSamples bounds the samples of one batch message. An agent sends a batch
// every 100 ms: 1024 streams with their tcp_info at the shortest step (10 ms) make
// some 80,000 samples a batch, and an agent whose sends wait on a slow controller
// splits what piled up into batches of this many (about 11 MB of JSON, well within
// a line, and 5 MB decoded). A batch of more is no agent's: the controller drops it
// unread rather than decode millions of samples into memory.
const MaxBatchSamples = 100_000

// batchSamples counts a batch's samples.
func batchSamples(b map[string][]datafile.Sample) int {
	n := 0
	for _, ss := range b {
		n += len(ss)
	}
	return n
}

// DecodeMessage reads one line from an agent and puts its sample times on the
// controller's clock: offset is the agent's clock minus the controller's, in
// seconds. The agent runs on another host (a different build, a garbled line, a
// hostile host), so every sample is checked as a data file reader checks it: the
// controller writes them into the run's file, and one impossible value there would
// make the whole file unreadable.
func DecodeMessage(line []byte, offset float64) (Message, error) {
	var m Message
	// Every sample is a JSON object or null, so the line's '{' and nulls bound its
	// samples: a line of more cannot hold a batch the controller takes, and it is
	// decoded without one (a line of "{}" or "null" would otherwise be 10 to 16
	// times its size in memory).
	if objects := bytes.Count(line, []byte("{")) + bytes.Count(line, []byte("null")); objects > MaxBatchSamples+2 {
		var b batchless
		if err := json.Unmarshal(line, &b); err != nil {
			return Message{}, err
		}
		m = b.Message
		m.Batch, m.Dropped = nil, objects-2
	} else if err := json.Unmarshal(line, &m); err != nil {
		return Message{}, err
	}
	if n := batchSamples(m.Batch); n > MaxBatchSamples {
		// The count above bounds this already; kept so that the bound holds
		// whatever the JSON spells.
		m.Batch, m.Dropped = nil, n
	}
	if s := m.Series; s != nil && (s.Name == "" || len(s.Name) > maxSeriesName || !utf8.ValidString(s.Name)) {
		return Message{}, fmt.Errorf("series declaration: a name of %d bytes: want 1 to %d bytes of UTF-8", len(s.Name), maxSeriesName)
	}
	for name, ss := range m.Batch {
		for i := range ss {
			ss[i].T -= offset
			// The key is formatted only for a sample that fails (1024 streams send
			// 5000 samples a second).
			if datafile.CheckSample("", ss[i]) != nil {
				return Message{}, datafile.CheckSample(fmt.Sprintf("batch[%q][%d]", name, i), ss[i])
			}
		}
	}
	return m, nil
}
