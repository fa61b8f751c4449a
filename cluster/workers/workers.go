// Package workers runs the workers of a cluster controller's work queue.
package workers

import (
	"context"
	"sync"
)

// Queue is the part of a client-go work queue that Run needs.
type Queue interface {
	// ShutDown makes the queue's Get return quit once it is drained.
	ShutDown()
}

// Run starts n workers, each calling next until it returns false (next
// returns false once the queue is shut down). When ctx ends, Run shuts
// the queue down and returns after every worker has stopped.
func Run(ctx context.Context, n int, q Queue, next func(context.Context) bool) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for next(ctx) {
			}
		})
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}
