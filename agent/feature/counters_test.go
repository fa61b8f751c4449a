package feature

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGrowth: a counter's growth between reads; a counter first seen, or
// one that went back (a flow replaced), counts whole; one gone is forgotten.
func TestGrowth(t *testing.T) {
	var g Growth[string]
	for _, step := range []struct {
		name   string
		counts map[string]uint64
		want   map[string]uint64
	}{
		{"first read: whole counts", map[string]uint64{"a": 3, "b": 5}, map[string]uint64{"a": 3, "b": 5}},
		{"growth", map[string]uint64{"a": 7, "b": 5}, map[string]uint64{"a": 4, "b": 0}},
		{"b went back: replaced", map[string]uint64{"a": 7, "b": 2}, map[string]uint64{"a": 0, "b": 2}},
		{"a gone", map[string]uint64{"b": 2}, map[string]uint64{"b": 0}},
		{"a back: new", map[string]uint64{"a": 1, "b": 2}, map[string]uint64{"a": 1, "b": 0}},
	} {
		for k, n := range step.counts {
			if got := g.Add(k, n); got != step.want[k] {
				t.Errorf("%s: %s grew %d, want %d", step.name, k, got, step.want[k])
			}
		}
		g.Done()
		for k, n := range step.counts {
			if last, ok := g.Last(k); !ok || last != n {
				t.Errorf("%s: last of %s = %d, %v; want %d", step.name, k, last, ok, n)
			}
		}
		if _, ok := g.Last("a"); ok != (step.counts["a"] != 0) {
			t.Errorf("%s: a remembered = %v", step.name, ok)
		}
	}
}

// TestCounterPoll counts each read by result and stops with ctx.
func TestCounterPoll(t *testing.T) {
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reads"}, []string{"result"})
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		CounterPoll{Interval: time.Millisecond, Reads: reads, What: "test counters", Read: func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a read without a deadline")
			}
			n++
			if n == 4 {
				cancel()
			}
			if n%2 == 0 {
				return errors.New("down")
			}
			return nil
		}}.Run(ctx)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("CounterPoll did not stop with its context")
	}
	if ok, bad := testutil.ToFloat64(reads.WithLabelValues("ok")), testutil.ToFloat64(reads.WithLabelValues("error")); ok != 2 || bad != 2 {
		t.Errorf("reads ok=%v error=%v, want 2 and 2", ok, bad)
	}
}
