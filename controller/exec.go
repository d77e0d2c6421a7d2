package controller

import (
	"context"
	"fmt"

	"github.com/bloatbench/bloatbench/remote"
)

// Exec runs a shell command (the user's own text, given to sh as one argument) on
// one of the session's hosts through its agent, starting the agent again first if it
// died, and returns its output: a batch's commands before and after each run.
func (s *Session) Exec(ctx context.Context, host, cmd string) ([]byte, error) {
	ep := endpointOf(s.eps, host)
	if ep == nil {
		return nil, fmt.Errorf("host %s is not the client, the server or a bottleneck host of %s", host, s.o.Inventory.Path)
	}
	if err := s.revive(ctx); err != nil {
		return nil, err
	}
	return ep.Output(ctx, remote.Command("sh", "-c", cmd), nil)
}
