package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// recordQueueWarnings writes the summary's warnings of where the queue was into
// the run's data file as events before it ends: the qdiscs under test held less
// than half of the loaded ping's delay, a queue drained slower than its
// configured rate, or a probe went through a tx queue that held none of the
// flows it is compared with. They are the reading of the run that a cover letter must not
// miss, so the file says them to whatever reads it later, not only the summary
// printed when the run ends. The file so far is read back (the samples are not
// kept in memory); a run with no bottleneck under test has nothing to say, and
// skips the read. Never the run's failure: what goes wrong is logged.
func (o *Options) recordQueueWarnings(ctx context.Context, eps []*endpoint, w *datafile.Writer) {
	under := false
	for _, ep := range eps {
		under = under || o.isBottleneck(ep.host.Name)
	}
	if !under {
		return
	}
	if err := w.Flush(); err != nil {
		o.logf("warning: the queue's warnings are not in the data file: %v", err)
		return
	}
	run, err := datafile.ReadContext(ctx, w.Path())
	if err != nil {
		o.logf("warning: the queue's warnings are not in the data file: %v", err)
		return
	}
	for _, msg := range report.Summarize(run).QueueWarnings {
		if err := w.Event(datafile.Event{T: datafile.Unix(time.Now()), Level: "warning", Message: msg}); err != nil {
			o.logf("warning: the queue's warnings are not in the data file: %v", fmt.Errorf("write an event: %w", err))
			return
		}
	}
}
