package feature

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// CounterReadTimeout bounds one read of a switch's statistics.
const CounterReadTimeout = 30 * time.Second

// CounterPoll reads a switch's statistics (flow or meter counters, through
// Host.FlowStats and Host.MeterStats) at a fixed interval, for the metrics
// that follow them. It is the one counters loop of every feature.
type CounterPoll struct {
	// Interval is the time between reads; the first read comes one
	// Interval after Run starts.
	Interval time.Duration
	// Read reads the statistics and adds them to the feature's metrics;
	// its ctx ends after CounterReadTimeout.
	Read func(ctx context.Context) error
	// Reads counts the reads by result: "ok" or "error". Optional.
	Reads *prometheus.CounterVec
	// Log hears a failed read at debug level, as What: "cannot read
	// What".
	Log  logrus.FieldLogger
	What string
}

// Run reads every Interval until ctx ends.
func (p CounterPoll) Run(ctx context.Context) {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, CounterReadTimeout)
		err := p.Read(rctx)
		cancel()
		result := "ok"
		if err != nil {
			result = "error"
			if p.Log != nil {
				p.Log.WithError(err).Debug("cannot read " + p.What)
			}
		}
		if p.Reads != nil {
			p.Reads.WithLabelValues(result).Inc()
		}
	}
}

// Growth follows counters that only grow (a flow's or a meter's packet
// count) from one read to the next, by key. A key whose count went back,
// or that was not there at the last read, is a new flow or meter: its
// whole count is new. The zero value is ready to use.
type Growth[K comparable] struct {
	last, now map[K]uint64
}

// Add records k's count n in the current read and returns its growth
// since the last read.
func (g *Growth[K]) Add(k K, n uint64) uint64 {
	if g.now == nil {
		g.now = map[K]uint64{}
	}
	g.now[k] = n
	prev, had := g.last[k]
	if had && n >= prev {
		return n - prev
	}
	return n
}

// Last returns k's count at the last read, and whether it had one.
func (g *Growth[K]) Last(k K) (uint64, bool) {
	n, ok := g.last[k]
	return n, ok
}

// Done ends a read: the keys it did not Add are forgotten.
func (g *Growth[K]) Done() {
	g.last, g.now = g.now, nil
	if g.last == nil {
		g.last = map[K]uint64{}
	}
}
