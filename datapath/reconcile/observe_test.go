package reconcile

import (
	"encoding/binary"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// dumpOf returns the flow stats reply, as the switch would send it (in
// one part), of the store's desired flows with their owners' cookies.
func dumpOf(t *testing.T, s *Store) [][]byte {
	t.Helper()
	var stats []openflow.FlowStats
	for _, o := range s.owners {
		for i := range o.flows {
			f := *o.flows[i].value()
			f.Cookie = o.cookie | 1
			f.Match = ovsMatch(t, &o.flows[i].packed)
			stats = append(stats, openflow.FlowStats{Flow: f})
		}
	}
	r, err := openflow.NewFlowStatsReply(openflow.Version15, stats)
	if err != nil {
		t.Fatal(err)
	}
	m, err := openflow.Marshal(openflow.Version15, 1, r)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{m}
}

// TestObserveInPlace checks an audit of a dump read in place: flows equal
// to the desired ones are settled without decoding; a flow whose
// instructions do not decode is left out as absent (so it is sent again)
// and counted, and nothing else is disturbed.
func TestObserveInPlace(t *testing.T) {
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	for i := range 3 {
		if err := s.Set(benchOwner(i), State{Flows: benchOwnerFlows(i, 10, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	msgs := dumpOf(t, s)
	obs := &Observed{}
	if err := obs.readFlowParts(msgs); err != nil {
		t.Fatal(err)
	}
	s.observe(obs, true)
	for _, b := range s.diff(DiffOptions{}).Batches {
		s.commitBatch(b)
	}
	w0, t0, d0 := s.Fingerprints()
	obs = &Observed{}
	if err := obs.readFlowParts(msgs); err != nil {
		t.Fatal(err)
	}
	if unwanted := s.observe(obs, false); unwanted != 0 || s.Pending() {
		t.Fatalf("a dump equal to the desired state: %d unwanted, pending %v", unwanted, s.Pending())
	}
	if w1, t1, d1 := s.Fingerprints(); w1-w0 != 30 || t1 != t0 || d1 != d0 {
		t.Errorf("settled by encoding %d, by text %d, decoded %d; want 30, 0, 0", w1-w0, t1-t0, d1-d0)
	}

	// Break the first flow's first instruction: its length runs past the
	// entry (the entry's own framing stays whole).
	bad := append([]byte(nil), msgs[0]...)
	first := bad[openflow.HeaderLen+8:]
	entryLen := int(binary.BigEndian.Uint16(first))
	matchLen := int(binary.BigEndian.Uint16(first[24+2:]))
	at := 24 + matchLen + (8-matchLen%8)%8
	statsLen := int(binary.BigEndian.Uint16(first[at+2:]))
	at += statsLen + (8-statsLen%8)%8
	if at+4 > entryLen {
		t.Fatalf("no instruction to break in an entry of %d bytes", entryLen)
	}
	binary.BigEndian.PutUint16(first[at+2:], 0xfff8)
	obs = &Observed{}
	if err := obs.readFlowParts([][]byte{bad}); err != nil {
		t.Fatal(err)
	}
	before := s.undecodableFlows()
	s.observe(obs, false)
	if n := s.undecodableFlows() - before; n != 1 {
		t.Fatalf("%d flows counted undecodable, want 1", n)
	}
	d := s.diff(DiffOptions{})
	if d.Stats.FlowAdds != 1 || d.Stats.Total() != 1 {
		t.Errorf("after an undecodable flow: %s, want the one flow added again", d.Stats)
	}
}

// TestMassRemovalAudits checks what a flow monitor reply of removals asks
// for: a few are repaired flow by flow; a mass deletion (massRemoval or
// more in one reply) asks for one read of the whole switch and marks no
// flow itself, so that its late reports do not send the flows again.
func TestMassRemovalAudits(t *testing.T) {
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	if err := s.Set(benchOwner(0), State{Flows: benchOwnerFlows(0, massRemoval, 0)}); err != nil {
		t.Fatal(err)
	}
	for _, b := range s.diff(DiffOptions{}).Batches {
		s.commitBatch(b)
	}
	if s.Pending() {
		t.Fatal("pending after the commit")
	}
	removals := func(n int) []openflow.FlowUpdate {
		var us []openflow.FlowUpdate
		for i := range s.owners[benchOwner(0)].flows[:n] {
			f := *s.owners[benchOwner(0)].flows[i].value()
			us = append(us, openflow.FlowUpdate{Event: openflow.FlowUpdateRemoved, Table: f.Table, Priority: f.Priority,
				Cookie: s.owners[benchOwner(0)].cookie | 1, Match: f.Match})
		}
		return us
	}
	if res := s.observeUpdates(removals(massRemoval)); !res.audit || res.repair || s.Pending() {
		t.Errorf("mass removal: %+v, pending %v; want an audit and no flow marked", res, s.Pending())
	}
	if res := s.observeUpdates(removals(3)); res.audit || !res.repair || !s.Pending() {
		t.Errorf("3 removals: %+v, pending %v; want their repair", res, s.Pending())
	}
	if d := s.diff(DiffOptions{}); d.Stats.Total() != 3 {
		t.Errorf("repair of 3 removals: %s", d.Stats)
	}
}
