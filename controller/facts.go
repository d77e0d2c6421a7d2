package controller

import (
	"context"
	"sync"
)

// gatherFacts reads every host's facts at the start of a run, before its setup: the
// host as found. A host that cannot tell is recorded with the reason, not failed.
func (s *Session) gatherFacts(ctx context.Context) {
	devs := map[string][]string{}
	for _, b := range s.o.Inventory.Bottleneck {
		devs[b.Host] = append(devs[b.Host], b.Dev)
	}
	var wg sync.WaitGroup
	for _, ep := range s.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
			defer cancel()
			facts, err := ep.agent.Facts(cctx, devs[ep.host.Name])
			if err != nil {
				facts = map[string]string{"error": err.Error()}
			}
			ep.info.Facts = facts
		}()
	}
	wg.Wait()
}
