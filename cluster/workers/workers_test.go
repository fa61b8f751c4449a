package workers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func TestRun(t *testing.T) {
	q := workqueue.NewTyped[int]()
	var handled atomic.Int64
	next := func(context.Context) bool {
		k, quit := q.Get()
		if quit {
			return false
		}
		defer q.Done(k)
		handled.Add(1)
		return true
	}
	for i := range 10 {
		q.Add(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, 3, q, next); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for handled.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10 keys handled", handled.Load())
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
	select {
	case <-done:
		t.Fatal("Run returned before ctx ended")
	default:
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if !q.ShuttingDown() {
		t.Fatal("the queue is not shut down")
	}
}
