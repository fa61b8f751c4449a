package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

func TestAuditFlowParts(t *testing.T) {
	for _, tt := range []struct{ flows, per, want int }{
		{0, 5000, 1}, {5000, 5000, 1}, {5001, 5000, 2}, {20000, 5000, 4}, {20001, 5000, 8},
		{100000, 5000, 32}, {1000000, 5000, MaxAuditParts},
	} {
		if got := auditFlowParts(tt.flows, tt.per); got != tt.want {
			t.Errorf("auditFlowParts(%d, %d) = %d, want %d", tt.flows, tt.per, got, tt.want)
		}
	}
	// The parts cover every cookie once.
	const parts = 8
	seen := map[int]int{}
	for i := range 1000 {
		c := uint64(benchCookie(i))
		n := 0
		for p := range parts {
			if req := flowPartRequest(p, parts); c&req.CookieMask == req.Cookie {
				seen[p]++
				n++
			}
		}
		if n != 1 {
			t.Fatalf("cookie %#x falls in %d parts", c, n)
		}
	}
	for p := range parts {
		if seen[p] < 1000/parts/2 {
			t.Errorf("part %d of %d holds %d of 1,000 owners", p, parts, seen[p])
		}
	}
}

// partsRun is a reconciler on a real switch with 2,000 flows over 40
// owners (benchOwner 100 to 139) and the 20 services of driftState, audited continuously in parts
// of about 200 flows (16 flow parts and the groups' part).
type partsRun struct {
	sb   *ovs.Sandbox
	s    *Store
	run  *running
	mu   sync.Mutex
	reps []SyncReport
	hook func(SyncReport) // called on the loop after each report
	// refused is an owner whose changes the switch refuses: passes that
	// retry it report its error.
	refused string
}

func startParts(t *testing.T) *partsRun {
	t.Helper()
	p := &partsRun{}
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	p.sb = sb
	p.s = driftState(t)
	for o := range 40 {
		mustSet(t, p.s, benchOwner(100+o), State{Flows: benchOwnerFlows(100+o, 50, 0)})
	}
	p.run = start(t, addr, p.s, Options{AuditInterval: 50 * time.Millisecond, AuditPartFlows: 200,
		OnSync: func(rep SyncReport) {
			p.mu.Lock()
			p.reps = append(p.reps, rep)
			hook := p.hook
			p.mu.Unlock()
			if hook != nil {
				hook(rep)
			}
		}})
	return p
}

// audits waits until n whole audits in parts have ended after the call,
// and returns the reports since the call.
func (p *partsRun) audits(t *testing.T, n int) []SyncReport {
	t.Helper()
	p.mu.Lock()
	from := len(p.reps)
	p.mu.Unlock()
	var out []SyncReport
	waittest.Poll(t, fmt.Sprintf("%d audits in parts", n), 30*time.Second, func() error {
		p.mu.Lock()
		out = append([]SyncReport(nil), p.reps[from:]...)
		p.mu.Unlock()
		ended := 0
		for i, rep := range out {
			if rep.Err != nil && (p.refused == "" || !strings.Contains(rep.Err.Error(), p.refused)) {
				t.Fatalf("%s pass: %v", rep.Kind, rep.Err)
			}
			if rep.Kind == SyncAudit {
				t.Fatalf("a whole audit ran (report %d); want parts", i)
			}
			if rep.Kind == SyncAuditPart && rep.Part == rep.Parts && rep.Part > 1 {
				ended++
			}
		}
		if ended < n {
			return fmt.Errorf("%d ended", ended)
		}
		return nil
	})
	return out
}

// TestAuditInPartsChangesBetween changes owners between the parts of
// audits (adds, updates and deletes, in parts read and parts to come): the
// changes go in passes of their own between the parts, and no part finds
// anything to repair, because there is nothing: a part that did would have
// mistaken a change made during the audit for drift.
func TestAuditInPartsChangesBetween(t *testing.T) {
	p := startParts(t)
	gen := p.run.r.Generation()
	step := 0
	p.mu.Lock()
	p.hook = func(rep SyncReport) {
		if rep.Kind != SyncAuditPart {
			return
		}
		step++
		var err error
		switch o := 100 + step%40; step % 3 {
		case 0:
			err = p.s.Set(benchOwner(o), State{Flows: benchOwnerFlows(o, 50, step)})
		case 1:
			err = p.s.Delete(benchOwner(40 + o))
		default:
			err = p.s.Set(benchOwner(40+o), State{Flows: benchOwnerFlows(40+o, 20, step)})
		}
		if err != nil {
			t.Error(err)
		}
	}
	p.mu.Unlock()
	reps := p.audits(t, 2)
	p.mu.Lock()
	p.hook = nil
	p.mu.Unlock()

	parts, between := 0, 0
	for i, rep := range reps {
		switch rep.Kind {
		case SyncAuditPart:
			parts++
			if rep.Parts != 17 {
				t.Errorf("audit part %d of %d, want 17 parts (16 of flows, the groups)", rep.Part, rep.Parts)
			}
			if rep.Stats.Total() != 0 || rep.Unwanted != 0 {
				t.Errorf("audit part %d of %d (report %d) repaired %s, %d unwanted; nothing drifted", rep.Part, rep.Parts, i, rep.Stats, rep.Unwanted)
			}
		case SyncIncremental:
			if rep.Stats.Total() > 0 {
				between++
			}
		}
	}
	if parts < 2*17 || between < parts/2 {
		t.Errorf("%d passes carried changes between %d audit parts", between, parts)
	}
	p.run.flush(t)
	if err := sameState(t, p.sb, "br0", p.s, gen, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d audit parts, %d passes with changes between them", parts, between)
}

// TestAuditInPartsRepairs makes drift that only an audit can see: flows
// changed and deleted through the reconciler's own connection (its flow
// monitor does not report its own changes), and a group changed (the flow
// monitor sees no group changes). A changed flow is put back by the part
// that reads it; a deleted one, which no part can see, by the last part,
// once all have been read; the group by the last part too.
func TestAuditInPartsRepairs(t *testing.T) {
	p := startParts(t)
	gen := p.run.r.Generation()
	ctx := context.Background()
	for _, o := range []int{1, 7, 13, 22, 38} {
		fs := benchOwnerFlows(100+o, 50, 0)
		if err := p.run.conn.Apply(ctx, fs[o].DeleteStrictMod()); err != nil {
			t.Fatal(err)
		}
		changed := fs[o+1]
		changed.Cookie = benchCookie(100+o) - 1 + uint64(gen)
		changed.Instructions = nil
		if err := p.run.conn.Apply(ctx, changed.ModifyStrictMod()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.sb.Ofctl("-O", "OpenFlow15", "mod-group", "br0", "group_id=1,type=select,bucket=bucket_id:0,actions=drop"); err != nil {
		t.Fatal(err)
	}
	reps := p.audits(t, 2)
	var added, modified, groups int
	modParts := map[int]bool{}
	for _, rep := range reps {
		if rep.Kind != SyncAuditPart {
			continue
		}
		if rep.Stats.FlowModifies > 0 {
			modParts[rep.Part] = true
		}
		if rep.Part < rep.Parts && (rep.Stats.FlowAdds > 0 || rep.Stats.GroupModifies > 0) {
			t.Errorf("part %d of %d put back %s; only the last part can", rep.Part, rep.Parts, rep.Stats)
		}
		added += rep.Stats.FlowAdds
		modified += rep.Stats.FlowModifies
		groups += rep.Stats.GroupModifies
	}
	if added != 5 || modified != 5 || groups != 1 {
		t.Errorf("the audit parts added %d flows, modified %d and put back %d groups, want 5, 5 and 1", added, modified, groups)
	}
	if len(modParts) < 2 || modParts[17] {
		t.Errorf("changed flows were put back in parts %v, want several flow parts", modParts)
	}
	if err := sameState(t, p.sb, "br0", p.s, gen, false); err != nil {
		t.Fatal(err)
	}
}

// TestAuditInPartsWithARefusedOwner: an owner that the switch refuses is
// retried in the passes between the parts and in the parts themselves,
// whose errors it makes; the audits still end, part after part.
func TestAuditInPartsWithARefusedOwner(t *testing.T) {
	p := startParts(t)
	p.refused = "pod/bad"
	mustSet(t, p.s, "pod/bad", State{Flows: []openflow.Flow{dstFlow(10, 100, 1, openflow.SetField{Field: openflow.TCPDst(80)})}})
	reps := p.audits(t, 2)
	failed := 0
	for _, rep := range reps {
		if rep.Err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no pass retried the refused owner")
	}
	t.Logf("%d of %d passes reported the refused owner", failed, len(reps))
}

// benchCookie is benchOwner(i)'s cookie in generation 1.
func benchCookie(i int) uint64 {
	c, err := plan.OwnerCookie(benchOwner(i), 1)
	if err != nil {
		panic(err)
	}
	return uint64(c)
}
