package sample

import (
	"testing"

	"nodeflow/datapath/plan"
)

// An audit settles every flow of the sample by its encoding alone: what
// Open vSwitch gives back has the bytes this project sent, so the flows
// are compared in the dump's memory, without being decoded, and the text
// comparison (many times dearer) is left for flows that differ.
// A restarted reconciler reads back every installed flow, as an audit
// does; of them only the version note differs (a new generation).
func TestAuditComparesWireForm(t *testing.T) {
	r := newRig(t)
	r.stopReconcilers()
	for _, b := range plan.Bridges {
		store := r.stores[b]
		w0, t0, d0 := store.Fingerprints()
		g0, gd0 := store.GroupComparisons()
		r.reconcile(bridgeName(b), store)
		w1, t1, d1 := store.Fingerprints()
		g1, gd1 := store.GroupComparisons()
		t.Logf("%s: %d groups equal by encoding, %d decoded", bridgeName(b), g1-g0, gd1-gd0)
		if gd1 != gd0 {
			t.Errorf("%s: %d groups of the dump decoded, want none (every group settled in place)", bridgeName(b), gd1-gd0)
		}
		if b == plan.Pod && g1 == g0 {
			t.Errorf("%s: no group compared by encoding", bridgeName(b))
		}
		wire, text, decoded := w1-w0, t1-t0, d1-d0
		t.Logf("%s: %d flows equal by encoding, %d compared as text, %d decoded", bridgeName(b), wire, text, decoded)
		if decoded != text {
			t.Errorf("%s: %d flows of the dump decoded, want only the %d compared as text (the rest settled in place)", bridgeName(b), decoded, text)
		}
		if wire == 0 {
			t.Errorf("%s: no flow compared by encoding", bridgeName(b))
		}
		if text != 1 {
			t.Errorf("%s: %d flows needed the text comparison, want 1 (the version note)", bridgeName(b), text)
		}
	}
}
