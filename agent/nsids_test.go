package agent

import (
	"maps"
	"slices"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
)

// TestNamespaceIDsInUse checks what the agent tells nsid: nothing before
// br0 was read, then the ids of the flows its features want.
func TestNamespaceIDsInUse(t *testing.T) {
	store := reconcile.NewStore(reconcile.StoreOptions{})
	a := &Agent{stores: map[plan.Bridge]*reconcile.Store{plan.Pod: store}}
	flow := func(inPort uint32, id uint64) openflow.Flow {
		load, err := plan.NamespaceID.LoadValue(id)
		if err != nil {
			t.Fatal(err)
		}
		return openflow.Flow{Table: 10, Priority: 100, Match: openflow.Match{Fields: []openflow.Field{openflow.InPort(inPort)}},
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{load}}}}
	}
	if err := store.Set("pod/a", reconcile.State{Flows: []openflow.Flow{flow(4, 42), flow(5, 7)}}); err != nil {
		t.Fatal(err)
	}
	if got := a.namespaceIDsInUse(); got != nil {
		t.Fatalf("before br0 was read: %v, want nil (unknown)", got)
	}
	a.podBridgeRead.Store(true)
	if got := slices.Sorted(maps.Keys(a.namespaceIDsInUse())); !slices.Equal(got, []uint32{7, 42}) {
		t.Fatalf("in use: %v, want [7 42]", got)
	}
	if err := store.Delete("pod/a"); err != nil {
		t.Fatal(err)
	}
	if got := a.namespaceIDsInUse(); got == nil || len(got) != 0 {
		t.Fatalf("after the owner went: %v, want an empty set", got)
	}
}
