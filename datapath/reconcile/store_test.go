package reconcile

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

func mustSet(t *testing.T, s *Store, owner string, st State) {
	t.Helper()
	if err := s.Set(owner, st); err != nil {
		t.Fatal(err)
	}
}

func mustSync(t *testing.T, s *Store, sw *fakeSwitch, opts DiffOptions) *Diff {
	t.Helper()
	d, err := syncFake(s, sw, opts, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSetRejects(t *testing.T) {
	good := dstFlow(0, 100, 1, openflow.OutputPort(1))
	withCookie := good
	withCookie.Cookie = 5
	withTimeout := good
	withTimeout.IdleTimeout = 10
	noBucketWeight := selectGroup(1, 1)
	noBucketWeight.Buckets[0].Weight = 0
	dupBuckets := selectGroup(1, 1, 2)
	dupBuckets.Buckets[1].ID = 0
	tests := []struct {
		name  string
		owner string
		st    State
		want  string
		is    error
	}{
		{"unknown owner prefix", "bogus/x", State{Flows: []openflow.Flow{good}}, "unknown prefix", nil},
		{"cookie set", "pod/a", State{Flows: []openflow.Flow{withCookie}}, "cookie is set by the reconciler", ErrInvalid},
		{"timeout", "pod/a", State{Flows: []openflow.Flow{withTimeout}}, "no timeouts", ErrInvalid},
		{"duplicate flow", "pod/a", State{Flows: []openflow.Flow{good, good}}, "flows 0 and 1 have the same", ErrInvalid},
		{"duplicate group", "service/a", State{Groups: []openflow.GroupEntry{selectGroup(1, 1), selectGroup(1, 2)}}, "group 1 listed twice", ErrInvalid},
		{"select weight 0", "service/a", State{Groups: []openflow.GroupEntry{noBucketWeight}}, "weight 0", ErrInvalid},
		{"duplicate bucket id", "service/a", State{Groups: []openflow.GroupEntry{dupBuckets}}, "duplicate bucket id", ErrInvalid},
		{"meter 0", "service/a", State{Meters: []openflow.MeterEntry{{ID: 0}}}, "meter 0", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(StoreOptions{})
			err := s.Set(tt.owner, tt.st)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("%v does not wrap %v", err, tt.is)
			}
			if len(s.Owners("")) != 0 || s.Pending() {
				t.Fatal("a rejected Set changed the store")
			}
		})
	}
}

func TestSetChecksThePlan(t *testing.T) {
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	// Table 7 is not declared on br0.
	err := s.Set("pod/a", State{Flows: []openflow.Flow{dstFlow(7, 100, 1)}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no table 7") {
		t.Fatalf("undeclared table: %v", err)
	}
	// The pod feature may not write to ServiceLB.
	err = s.Set("pod/a", State{Flows: []openflow.Flow{dstFlow(uint8(plan.PodServiceLB), 100, 1)}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "may not write to br0 table 30 (ServiceLB)") {
		t.Fatalf("feature not allowed: %v", err)
	}
	mustSet(t, s, "service/default/web:80/TCP", State{Flows: []openflow.Flow{dstFlow(uint8(plan.PodServiceLB), 200, 1)}})
}

func TestConflictsBetweenOwners(t *testing.T) {
	s := NewStore(StoreOptions{})
	mustSet(t, s, "pod/a", State{Flows: []openflow.Flow{dstFlow(0, 100, 1)}, Groups: []openflow.GroupEntry{selectGroup(9, 1)}})
	err := s.Set("pod/b", State{Flows: []openflow.Flow{dstFlow(0, 100, 1)}})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "pod/a") || !strings.Contains(err.Error(), "owner pod/b") {
		t.Fatalf("flow conflict: %v", err)
	}
	err = s.Set("pod/b", State{Groups: []openflow.GroupEntry{selectGroup(9, 2)}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("group conflict: %v", err)
	}
	// Contested names the flows another owner has, so that pod/b can
	// set the rest.
	want := State{Flows: []openflow.Flow{dstFlow(0, 100, 2), dstFlow(0, 100, 1), dstFlow(0, 100, 3)}}
	c := s.Contested("pod/b", want)
	if len(c) != 1 || c[0] != (Contest{Index: 1, Owner: "pod/a"}) {
		t.Fatalf("contested = %+v, want flow 1 held by pod/a", c)
	}
	if c := s.Contested("pod/a", want); len(c) != 0 {
		t.Fatalf("an owner contests its own flows: %+v", c)
	}
	// Once pod/a lets go, pod/b may take it.
	mustSet(t, s, "pod/a", State{})
	if c := s.Contested("pod/b", want); len(c) != 0 {
		t.Fatalf("contested after pod/a let go: %+v", c)
	}
	mustSet(t, s, "pod/b", State{Flows: []openflow.Flow{dstFlow(0, 100, 1)}})
}

func TestMinimalDiff(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	st := State{Flows: []openflow.Flow{
		dstFlow(0, 100, 1, openflow.OutputPort(1)),
		dstFlow(0, 100, 2, openflow.OutputPort(2)),
		dstFlow(0, 100, 3, openflow.OutputPort(3)),
	}}
	mustSet(t, s, "pod/a", st)
	d := mustSync(t, s, sw, DiffOptions{})
	if d.Stats != (DiffStats{FlowAdds: 3}) {
		t.Fatalf("first sync: %s", d.Stats)
	}
	// The same state again: nothing to do.
	mustSet(t, s, "pod/a", st)
	if d := mustSync(t, s, sw, DiffOptions{}); !d.Empty() {
		t.Fatalf("unchanged state: %s", d.Stats)
	}
	// Change one flow's actions, drop one, add one.
	st2 := State{Flows: []openflow.Flow{
		dstFlow(0, 100, 1, openflow.OutputPort(1)),
		dstFlow(0, 100, 2, openflow.OutputPort(9)),
		dstFlow(0, 100, 4, openflow.OutputPort(4)),
	}}
	mustSet(t, s, "pod/a", st2)
	d = mustSync(t, s, sw, DiffOptions{})
	if d.Stats != (DiffStats{FlowAdds: 1, FlowModifies: 1, FlowDeletes: 1}) {
		t.Fatalf("edit: %s", d.Stats)
	}
	if sw.messages != 6 {
		t.Fatalf("sent %d messages in all, want 6", sw.messages)
	}
	// An update that cancels out sends nothing.
	mustSet(t, s, "pod/a", st)
	mustSet(t, s, "pod/a", st2)
	if d := mustSync(t, s, sw, DiffOptions{}); !d.Empty() {
		t.Fatalf("cancelled update: %s", d.Stats)
	}
	// Removing the owner deletes its flows.
	mustSet(t, s, "pod/a", State{})
	d = mustSync(t, s, sw, DiffOptions{})
	if d.Stats != (DiffStats{FlowDeletes: 3}) || len(sw.flows) != 0 {
		t.Fatalf("delete: %s, %d left", d.Stats, len(sw.flows))
	}
	if len(s.flows) != 0 {
		t.Fatalf("store keeps %d empty slots", len(s.flows))
	}
}

func TestGroupsBeforeFlowsAndDeletedAfter(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	svc := State{
		Groups: []openflow.GroupEntry{selectGroup(7, 1, 2)},
		Meters: []openflow.MeterEntry{{ID: 3, Flags: openflow.MeterFlagPktps, Bands: []openflow.MeterBand{{Type: openflow.MeterBandDrop, Rate: 10}}}},
		Flows: []openflow.Flow{
			dstFlow(30, 200, 1, openflow.Group{ID: 7}),
			{Table: 30, Priority: 100, Match: openflow.NewMatch(openflow.EthType(0x0800)),
				Instructions: []openflow.Instruction{openflow.Meter{ID: 3}, openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(openflow.PortController)}}}},
		},
	}
	mustSet(t, s, "service/default/web:80/TCP", svc)
	d := s.diff(DiffOptions{})
	if len(d.Batches) != 1 || len(d.MetersBefore) != 1 {
		t.Fatalf("diff: %d batches, %d meters before", len(d.Batches), len(d.MetersBefore))
	}
	msgs, _, err := batchMessages(d.Batches[0], openflow.Version15, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := msgs[0].(*openflow.PackedGroupMod); !ok {
		t.Fatalf("first message is %T, want the group", msgs[0])
	}
	// Let the fake switch apply it (it rejects flows using missing groups).
	for _, c := range d.MetersBefore {
		if err := sw.meterMod(meterMessage(c, openflow.MeterAdd)); err != nil {
			t.Fatal(err)
		}
		s.commitMeter(c)
	}
	if err := sw.bundle(msgs); err != nil {
		t.Fatal(err)
	}
	s.commitBatch(d.Batches[0])

	mustSet(t, s, "service/default/web:80/TCP", State{})
	d = s.diff(DiffOptions{})
	msgs, _, err = batchMessages(d.Batches[0], openflow.Version15, 1)
	if err != nil {
		t.Fatal(err)
	}
	if gm, ok := msgs[len(msgs)-1].(*openflow.GroupMod); !ok || gm.Command != openflow.GroupDelete {
		t.Fatalf("last message is %v, want the group delete", msgs[len(msgs)-1])
	}
	if len(d.MetersAfter) != 1 || len(d.MetersBefore) != 0 {
		t.Fatalf("meter delete must come after the bundle: %+v", d)
	}
}

func TestBlockedUntilTheGroupExists(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	// The service's flow uses a group that a second owner provides, and
	// that owner is not there yet.
	mustSet(t, s, "service/a", State{Flows: []openflow.Flow{dstFlow(30, 200, 1, openflow.Group{ID: 5})}})
	mustSet(t, s, "pod/x", State{Flows: []openflow.Flow{dstFlow(0, 100, 9, openflow.OutputPort(9))}})
	d := mustSync(t, s, sw, DiffOptions{})
	if err := d.Blocked["service/a"]; err == nil || !strings.Contains(err.Error(), "group 5") {
		t.Fatalf("blocked = %v", d.Blocked)
	}
	if d.Stats.FlowAdds != 1 || len(sw.flows) != 1 {
		t.Fatalf("the unrelated owner must go through: %s", d.Stats)
	}
	if !s.Pending() {
		t.Fatal("the blocked change must stay queued")
	}
	if err := s.Errors()["service/a"]; err == nil || !strings.Contains(err.Error(), "group 5") {
		t.Fatalf("Errors() = %v", s.Errors())
	}
	mustSet(t, s, "service/g", State{Groups: []openflow.GroupEntry{selectGroup(5, 1)}})
	d = mustSync(t, s, sw, DiffOptions{})
	if len(d.Blocked) != 0 || d.Stats.FlowAdds != 1 || d.Stats.GroupAdds != 1 {
		t.Fatalf("after the group came: %s blocked %v", d.Stats, d.Blocked)
	}
	if len(s.Errors()) != 0 {
		t.Fatalf("errors left: %v", s.Errors())
	}
	// Now the provider may not withdraw the group while it is used.
	mustSet(t, s, "service/g", State{})
	d = mustSync(t, s, sw, DiffOptions{})
	if err := d.Blocked["service/g"]; err == nil || !strings.Contains(err.Error(), "still use it") {
		t.Fatalf("group delete while used: blocked %v, %s", d.Blocked, d.Stats)
	}
	if _, ok := sw.groups[5]; !ok {
		t.Fatal("the used group was deleted")
	}
}

func TestFailedOwnerBacksOffAlone(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	sw.failOn = 66
	now := time.Unix(1000, 0)
	mustSet(t, s, "pod/bad", State{Flows: []openflow.Flow{dstFlow(66, 100, 1)}})
	mustSet(t, s, "pod/good", State{Flows: []openflow.Flow{dstFlow(0, 100, 2)}})
	// Both in one bundle: it fails, the bad owner is found from the
	// failing message and backed off.
	if _, err := syncFake(s, sw, DiffOptions{Now: now}, 1); err == nil {
		t.Fatal("want the injected failure")
	}
	errs := s.Errors()
	if errs["pod/bad"] == nil || errs["pod/good"] != nil || !strings.Contains(errs["pod/bad"].Error(), "owner pod/bad: add flow (table=66") {
		t.Fatalf("errors %v", errs)
	}
	// The next sync sends the good owner alone.
	d, err := syncFake(s, sw, DiffOptions{Now: now.Add(time.Millisecond)}, 1)
	if err != nil || d.Blocked["pod/bad"] == nil || len(sw.flows) != 1 {
		t.Fatalf("second sync: %v, blocked %v, %d flows", err, d.Blocked, len(sw.flows))
	}
	// After the back-off it is retried (and fails again).
	sw.failOn = -1
	d, err = syncFake(s, sw, DiffOptions{Now: now.Add(time.Minute)}, 1)
	if err != nil || len(sw.flows) != 2 || len(s.Errors()) != 0 {
		t.Fatalf("retry: %v %s, %d flows, errors %v", err, d.Stats, len(sw.flows), s.Errors())
	}
}

func TestSplitKeepsOwnersWhole(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	for i := 0; i < 20; i++ {
		var fs []openflow.Flow
		for j := 0; j < 7; j++ {
			fs = append(fs, dstFlow(30, 200, i*100+j, openflow.Group{ID: uint32(i + 1)}))
		}
		mustSet(t, s, fmt.Sprintf("service/s%02d", i), State{Flows: fs, Groups: []openflow.GroupEntry{selectGroup(uint32(i+1), 1, 2)}})
	}
	d := mustSync(t, s, sw, DiffOptions{MaxBundle: 20})
	if len(d.Batches) < 5 {
		t.Fatalf("%d batches, want a split", len(d.Batches))
	}
	for _, b := range d.Batches {
		if b.Len()%8 != 0 {
			t.Fatalf("batch of %d changes splits an owner (%v)", b.Len(), b.Owners())
		}
	}
}

func TestFlowChangingHandsTravelsWithBothOwners(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	var a, b []openflow.Flow
	for i := 0; i < 10; i++ {
		a = append(a, dstFlow(0, 100, i, openflow.OutputPort(1)))
		b = append(b, dstFlow(0, 100, 100+i, openflow.OutputPort(2)))
	}
	mustSet(t, s, "pod/a", State{Flows: a})
	mustSet(t, s, "pod/b", State{Flows: b})
	mustSync(t, s, sw, DiffOptions{})
	// Flow 0 moves from a to b, with other actions.
	mustSet(t, s, "pod/a", State{Flows: a[1:]})
	mustSet(t, s, "pod/b", State{Flows: append(b, dstFlow(0, 100, 0, openflow.OutputPort(2)))})
	d := mustSync(t, s, sw, DiffOptions{MaxBundle: 1})
	if d.Stats != (DiffStats{FlowModifies: 1}) || len(d.Batches) != 1 {
		t.Fatalf("move: %s in %d batches", d.Stats, len(d.Batches))
	}
	if got := d.Batches[0].Owners(); len(got) != 2 {
		t.Fatalf("owners %v", got)
	}
	f := sw.flows[dstFlow(0, 100, 0).Key()]
	if o, _ := s.OwnerOfCookie(f.Cookie); o != "pod/b" {
		t.Fatalf("moved flow carries the cookie of %q", o)
	}
}

func TestObserveKeepsWhatMatches(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	keep := dstFlow(0, 100, 1, openflow.OutputPort(1))
	change := dstFlow(0, 100, 2, openflow.OutputPort(2))
	mustSet(t, s, "pod/a", State{Flows: []openflow.Flow{keep, change}, Groups: []openflow.GroupEntry{selectGroup(3, 1)}})
	mustSync(t, s, sw, DiffOptions{})

	// A new incarnation: a fresh store, one flow's actions changed, one
	// foreign flow and one learned flow on the switch, the generation
	// moved on.
	foreign := dstFlow(0, 100, 50, openflow.OutputPort(7))
	sw.flows[foreign.Key()] = foreign
	learnedFlow := dstFlow(31, 100, 51, openflow.OutputPort(7))
	learnedFlow.Cookie = uint64(plan.LearnedCookie("service/x"))
	sw.flows[learnedFlow.Key()] = learnedFlow
	sw.groups[99] = selectGroup(99, 1)

	s2 := NewStore(StoreOptions{})
	mustSet(t, s2, "pod/a", State{Flows: []openflow.Flow{keep, dstFlow(0, 100, 2, openflow.OutputPort(9))}, Groups: []openflow.GroupEntry{selectGroup(3, 1)}})
	if unwanted := s2.observe(sw.observed(), true); unwanted != 2 {
		t.Fatalf("unwanted = %d, want the foreign flow and group", unwanted)
	}
	d, err := syncFake(s2, sw, DiffOptions{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d.Stats != (DiffStats{FlowModifies: 1, FlowDeletes: 1, GroupDeletes: 1}) || len(d.Batches) != 1 {
		t.Fatalf("start-up diff: %s in %d batches", d.Stats, len(d.Batches))
	}
	kept := sw.flows[keep.Key()]
	if plan.Cookie(kept.Cookie).Generation() != 1 {
		t.Errorf("kept flow was rewritten (generation %d)", plan.Cookie(kept.Cookie).Generation())
	}
	if got := sw.flows[change.Key()]; plan.Cookie(got.Cookie).Generation() != 2 {
		t.Errorf("changed flow has generation %d", plan.Cookie(got.Cookie).Generation())
	}
	if _, ok := sw.flows[learnedFlow.Key()]; !ok {
		t.Error("the learned flow was deleted")
	}
	// And then there is nothing left to do.
	s2.observe(sw.observed(), true)
	if d := s2.diff(DiffOptions{}); !d.Empty() {
		t.Fatalf("after start-up: %s", d.Stats)
	}
}

func TestObserveFlowEvents(t *testing.T) {
	s := NewStore(StoreOptions{})
	sw := newFakeSwitch()
	f := dstFlow(0, 100, 1, openflow.OutputPort(1))
	mustSet(t, s, "pod/a", State{Flows: []openflow.Flow{f}})
	mustSync(t, s, sw, DiffOptions{})
	installed := sw.flows[f.Key()]

	// Someone deletes it: repair re-adds it.
	delete(sw.flows, f.Key())
	if !s.observeFlow(&installed, false, false) {
		t.Fatal("delete of a desired flow needs repair")
	}
	if d := mustSync(t, s, sw, DiffOptions{}); d.Stats != (DiffStats{FlowAdds: 1}) {
		t.Fatalf("repair delete: %s", d.Stats)
	}
	// Someone modifies it.
	mod := installed
	mod.Instructions = []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(5)}}}
	sw.flows[f.Key()] = mod
	if !s.observeFlow(&mod, true, false) {
		t.Fatal("modify needs repair")
	}
	if d := mustSync(t, s, sw, DiffOptions{}); d.Stats != (DiffStats{FlowModifies: 1}) {
		t.Fatalf("repair modify: %s", d.Stats)
	}
	// Someone adds a foreign flow.
	foreign := dstFlow(0, 1000, 2, openflow.OutputPort(5))
	sw.flows[foreign.Key()] = foreign
	if !s.observeFlow(&foreign, true, false) {
		t.Fatal("foreign flow needs repair")
	}
	if d := mustSync(t, s, sw, DiffOptions{}); d.Stats != (DiffStats{FlowDeletes: 1}) {
		t.Fatalf("repair foreign: %s", d.Stats)
	}
	// Our own flow reported as added again, unchanged: nothing to do.
	again := sw.flows[f.Key()]
	if s.observeFlow(&again, true, false) {
		t.Fatal("an unchanged flow needs no repair")
	}
	if sw.dump() != dumpDesired(s) {
		t.Fatalf("switch differs:\n%s\nwant\n%s", sw.dump(), dumpDesired(s))
	}
}

// dumpDesired renders the store's desired state the way fakeSwitch.dump
// renders the switch.
func dumpDesired(s *Store) string {
	sw := newFakeSwitch()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.owners {
		for i := range o.flows {
			f := stamped(o.flows[i].value(), o.cookie)
			sw.flows[f.Key()] = f
		}
		for i := range o.groups {
			sw.groups[o.groups[i].id] = *o.groups[i].value()
		}
		for i := range o.meters {
			m := o.meters[i].meter
			sw.meters[m.ID] = *m
		}
	}
	return sw.dump()
}

// TestRandomUpdatesAgainstModel drives random sequences of owner updates
// (services with groups and meters, pods, flows changing hands) through
// the diff and a model of the switch with small bundles. After every
// bundle, every owner on the switch must be entirely in its old state or
// entirely in its new one, and no flow may use a missing group; after every
// sync the switch must equal the desired state.
func TestRandomUpdatesAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			s := NewStore(StoreOptions{})
			sw := newFakeSwitch()
			owners := []string{"service/a", "service/b", "service/c", "pod/x", "pod/y", "pod/z", "node/n"}
			var before, after map[uint64]string
			sw.afterBundle = func(sw *fakeSwitch) {
				now := ownerViews(sw)
				for cookie := range union(before, after) {
					if now[cookie] != before[cookie] && now[cookie] != after[cookie] {
						t.Fatalf("owner %s is half updated:\nswitch %q\nbefore %q\nafter  %q",
							ownerOf(s, cookie), now[cookie], before[cookie], after[cookie])
					}
				}
			}
			for step := 0; step < 40; step++ {
				before = ownerViews(sw)
				for n := r.IntN(4) + 1; n > 0; n-- {
					o := owners[r.IntN(len(owners))]
					if err := s.Set(o, randomState(r, o)); err != nil && !errors.Is(err, ErrConflict) {
						t.Fatal(err)
					}
				}
				after = desiredViews(s)
				if _, err := syncFake(s, sw, DiffOptions{MaxBundle: 1 + r.IntN(12)}, 1); err != nil {
					t.Fatal(err)
				}
				if got, want := sw.dump(), dumpDesired(s); got != want {
					t.Fatalf("step %d: switch differs from desired:\n%s\n--- want\n%s", step, got, want)
				}
				if s.Pending() {
					t.Fatalf("step %d: changes left queued", step)
				}
			}
		})
	}
}

func union(a, b map[uint64]string) map[uint64]bool {
	out := map[uint64]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func ownerOf(s *Store, cookie uint64) string {
	n, _ := s.OwnerOfCookie(cookie)
	return n
}

// ownerViews renders, per owner cookie, the owner's flows on the switch
// and the groups those flows use.
func ownerViews(sw *fakeSwitch) map[uint64]string {
	lines := map[uint64][]string{}
	for _, f := range sw.flows {
		c := f.Cookie & uint64(plan.OwnerMask)
		f.Cookie = c
		lines[c] = append(lines[c], f.String())
		visitInstructions(f.Instructions, func(id uint32) {
			if g, ok := sw.groups[id]; ok {
				lines[c] = append(lines[c], g.String())
			}
		}, func(uint32) {})
	}
	return joinViews(lines)
}

func desiredViews(s *Store) map[uint64]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := map[uint64][]string{}
	groups := map[uint32]string{}
	for _, o := range s.owners {
		for i := range o.groups {
			groups[o.groups[i].id] = o.groups[i].String()
		}
	}
	for _, o := range s.owners {
		for i := range o.flows {
			f := stamped(o.flows[i].value(), o.cookie)
			lines[o.cookie] = append(lines[o.cookie], f.String())
			visitInstructions(f.Instructions, func(id uint32) { lines[o.cookie] = append(lines[o.cookie], groups[id]) }, func(uint32) {})
		}
	}
	return joinViews(lines)
}

func joinViews(lines map[uint64][]string) map[uint64]string {
	out := map[uint64]string{}
	for c, ls := range lines {
		sortStrings(ls)
		out[c] = strings.Join(ls, "\n")
	}
	return out
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// randomState builds a random state for owner: services get a group
// (id from the owner's letter) and flows using it; everyone draws flow
// keys from a small shared space so that keys change hands.
func randomState(r *rand.Rand, owner string) State {
	if r.IntN(6) == 0 {
		return State{}
	}
	var st State
	gid := uint32(owner[len(owner)-1])
	if strings.HasPrefix(owner, "service/") {
		var ports []uint32
		for n := r.IntN(4) + 1; n > 0; n-- {
			ports = append(ports, uint32(r.IntN(5)+1))
		}
		st.Groups = append(st.Groups, selectGroup(gid, ports...))
	}
	seen := map[int]bool{}
	for n := r.IntN(6) + 1; n > 0; n-- {
		k := r.IntN(30)
		if seen[k] {
			continue
		}
		seen[k] = true
		var act openflow.Action = openflow.OutputPort(uint32(r.IntN(3) + 1))
		if st.Groups != nil && r.IntN(2) == 0 {
			act = openflow.Group{ID: gid}
		}
		st.Flows = append(st.Flows, dstFlow(uint8(k%3), 100, k, act))
	}
	return st
}

func TestFNV64a(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("a"), []byte("nodeflow pipeline=2")} {
		h := fnv.New64a()
		h.Write(b)
		if got, want := fnv64a(b, fnvOffset), h.Sum64(); got != want {
			t.Errorf("fnv64a(%q) = %x, want %x", b, got, want)
		}
	}
}

// TestBatchMessagesOrigin checks that origin names the change behind every
// message of a batch, past a group too big for one message (sent as
// several) and a deleted flow and group.
func TestBatchMessagesOrigin(t *testing.T) {
	s := NewStore(StoreOptions{})
	var eps []netip.Addr
	for i := range 5000 {
		eps = append(eps, ipN("10.128.0.0", i))
	}
	big := serviceState(7, netip.MustParseAddr("10.96.0.7"), 80, eps, 8080, false)
	big.Flows = big.Flows[len(big.Flows)-1:] // the group and the ServiceLB flow
	mustSet(t, s, "service/ns/big:80/TCP", big)
	mustSet(t, s, "service/ns/small:80/TCP", serviceState(8, netip.MustParseAddr("10.96.0.8"), 80, eps[:2], 8080, false))
	mustSet(t, s, "service/ns/mid:80/TCP", serviceState(9, netip.MustParseAddr("10.96.0.9"), 80, eps[:3], 8080, false))
	for _, b := range s.diff(DiffOptions{}).Batches {
		s.commitBatch(b)
	}
	// Now the small service goes (a flow and group delete) while the big
	// one changes (its group split again, its flow moved to another port:
	// a delete and an add).
	mustSet(t, s, "service/ns/small:80/TCP", State{})
	big2 := serviceState(7, netip.MustParseAddr("10.96.0.7"), 81, eps[1:], 8080, false)
	big2.Flows = big2.Flows[len(big2.Flows)-1:]
	mustSet(t, s, "service/ns/big:80/TCP", big2)
	mustSet(t, s, "service/ns/mid:80/TCP", serviceState(9, netip.MustParseAddr("10.96.0.9"), 80, eps[1:3], 8080, false))
	d := s.diff(DiffOptions{})
	if len(d.Batches) != 1 {
		t.Fatalf("%d batches, want 1", len(d.Batches))
	}
	b := d.Batches[0]
	msgs, origin, err := batchMessages(b, openflow.Version15, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The group changes' messages, in order, named by their change.
	var groupWant []string
	for _, c := range b.groupsBefore {
		mods, err := c.to.mods(openflow.Version15)
		if err != nil {
			t.Fatal(err)
		}
		for range mods {
			groupWant = append(groupWant, fmt.Sprintf("owner %s: modify group %d", c.to.owner.name, c.id))
		}
	}
	groupMsgs := len(groupWant)
	if len(b.groupsBefore) != 2 || groupMsgs < 3 {
		t.Fatalf("%d group changes in %d messages, want 2 with the big group split", len(b.groupsBefore), groupMsgs)
	}
	for i := range msgs {
		var want string
		switch {
		case i < groupMsgs:
			want = groupWant[i]
		case i < groupMsgs+len(b.flowDeletes):
			want = ": delete flow ("
		case i < groupMsgs+len(b.flowDeletes)+len(b.flowUpdates):
			want = "flow ("
		default:
			want = "owner service/ns/small:80/TCP: delete group 8"
		}
		if got := origin(i); !strings.Contains(got, want) {
			t.Errorf("origin(%d) of %d = %q, want %q", i, len(msgs), got, want)
		}
	}
	if got := origin(len(msgs)); !strings.Contains(got, fmt.Sprintf("message %d of %d", len(msgs), len(msgs))) {
		t.Errorf("origin past the end = %q", got)
	}
}
