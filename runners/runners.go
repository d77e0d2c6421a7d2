// Package runners holds what produces samples on an endpoint: TCP streams counted at
// the receiver, and ICMP ping. Runners only measure; they never format output.
package runners

import (
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// Emit records a sample of a series. It must be safe for concurrent use.
type Emit func(series string, s datafile.Sample)

// unix is a sample time.
func unix(t time.Time) float64 { return datafile.Unix(t) }
