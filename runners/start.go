package runners

import (
	"context"
	"time"
)

// startTime turns a spec's start, Unix seconds on this host's clock (0: now), into a
// time with a monotonic reading: later waits are not moved by clock steps.
func startTime(start float64) time.Time {
	now := time.Now()
	if start <= 0 {
		return now
	}
	return now.Add(time.Until(time.Unix(0, int64(start*1e9))))
}

// sleepUntil waits until t (at once when t has passed) or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
