package reconcile

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

// BenchmarkChangesDuringAudit measures what an audit costs the changes
// that arrive while it runs: a stream of one-owner updates (Set then
// Flush, one every 2 ms) runs through each audit, and each update's time
// is recorded. Two bridges of one switch hold the same state: one
// reconciler reads its switch whole (the previous design, AuditPartFlows
// -1), the other in parts (the default); their audits alternate, b.N
// each, started by a manual clock, each design first in every other round,
// each audit after 50 quiet updates and a collection. It reports both designs' update times
// during audits (p50, p99, the longest), the same without an audit, and
// the audits' wall time. Two shapes: 100,000 flows (1,000 owners of 100
// ct/nat flows; an update replaces one flow), and the shape of 10,000
// Services on br0 (10,000 owners of 2 flows and a select group of 10
// buckets; an update replaces one flow).
func BenchmarkChangesDuringAudit(b *testing.B) {
	b.Run("flows100k", func(b *testing.B) {
		changesDuringAudit(b, 1000, func(o, version int) State {
			return State{Flows: benchOwnerFlows(o, 100, version)}
		})
	})
	b.Run("services10k", func(b *testing.B) {
		changesDuringAudit(b, 10000, func(o, version int) State {
			return State{Flows: benchOwnerFlows(o, 2, version), Groups: []openflow.GroupEntry{natGroup(o, 10)}}
		})
	})
}

// changesDuringAudit runs BenchmarkChangesDuringAudit with owners owners,
// owner o's state in each version given by state (version 0 first).
func changesDuringAudit(b *testing.B, owners int, state func(o, version int) State) {
	sb, addr0 := testBridge(b, ovs.Options{}, "br0")
	addr1 := addBridge(b, sb, ovs.Options{}, "br1")
	type design struct {
		name  string
		s     *Store
		run   *running
		clk   *waittest.WaitClock
		ended chan struct{}
		// during are update times during audits, quiet without one;
		// audits the audits' wall time.
		during, quiet, audits []time.Duration
		version               int
	}
	designs := []*design{{name: "whole"}, {name: "parts"}}
	for i, d := range designs {
		d.s = NewStore(StoreOptions{})
		for o := range owners {
			if err := d.s.Set(benchOwner(o), state(o, 0)); err != nil {
				b.Fatal(err)
			}
		}
		d.clk = waittest.NewWaitClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		d.ended = make(chan struct{}, 1)
		opts := Options{Bridge: []string{"br0", "br1"}[i], Clock: d.clk, AuditInterval: time.Minute,
			OnSync: func(rep SyncReport) {
				if rep.Kind == SyncAudit || (rep.Kind == SyncAuditPart && rep.Part == rep.Parts) {
					d.ended <- struct{}{}
				}
			}}
		if d.name == "whole" {
			opts.AuditPartFlows = -1
		}
		d.run = start(b, []string{addr0, addr1}[i], d.s, opts)
	}
	ctx := context.Background()
	update := func(d *design) time.Duration {
		d.version++
		t0 := time.Now()
		if err := d.s.Set(benchOwner(owners/2), state(owners/2, d.version%7+1)); err != nil {
			b.Fatal(err)
		}
		if err := d.run.r.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := range b.N {
		// Each design goes first in every other round: what one audit
		// leaves the switch to do falls on the other design equally.
		for k := range designs {
			d := designs[(i+k)%2]
			for range 50 {
				d.quiet = append(d.quiet, update(d))
			}
			// The other design's garbage goes now, not into this audit.
			runtime.GC()
			t0 := time.Now()
			d.clk.Step(time.Hour)
			tick := time.NewTicker(2 * time.Millisecond)
		stream:
			for {
				select {
				case <-d.ended:
					break stream
				case <-tick.C:
					d.during = append(d.during, update(d))
				}
			}
			tick.Stop()
			d.audits = append(d.audits, time.Since(t0))
		}
	}
	b.StopTimer()
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	q := func(ds []time.Duration, p int) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[min(len(ds)-1, len(ds)*p/100)]
	}
	for _, d := range designs {
		b.ReportMetric(ms(q(d.during, 50)), "ms-p50-during-"+d.name)
		b.ReportMetric(ms(q(d.during, 99)), "ms-p99-during-"+d.name)
		b.ReportMetric(ms(slices.Max(d.during)), "ms-max-during-"+d.name)
		b.ReportMetric(ms(q(d.quiet, 99)), "ms-p99-quiet-"+d.name)
		b.ReportMetric(ms(q(d.audits, 50)), "ms-audit-"+d.name)
	}
	b.ReportMetric(float64(q(designs[1].during, 99))/float64(q(designs[0].during, 99)), "p99-parts/whole")
	b.ReportMetric(float64(slices.Max(designs[1].during))/float64(slices.Max(designs[0].during)), "max-parts/whole")
}
