package reconcile

import (
	"flag"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/golden"
	"nodeflow/lib/openflow"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func goldenFile(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), got, *update)
}

// sampleStore holds a realistic desired state: pipeline misses, a pod,
// services with hash select groups and ct/nat, a meter and a metered
// packet-in.
func sampleStore(t *testing.T) *Store {
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	mustSet(t, s, "pipeline", pipelineState())
	mustSet(t, s, "pod/default/a", podState(3, mac(2), netip.MustParseAddr("10.128.0.2"), 7))
	mustSet(t, s, "service/default/web:80/TCP", serviceState(11, netip.MustParseAddr("10.96.0.10"), 80,
		[]netip.Addr{netip.MustParseAddr("10.128.0.2"), netip.MustParseAddr("10.128.1.5")}, 8080, false))
	mustSet(t, s, "service/default/host:80/TCP", serviceState(12, netip.MustParseAddr("10.96.0.11"), 80,
		[]netip.Addr{netip.MustParseAddr("169.254.169.2")}, 8081, true))
	mustSet(t, s, "unidle/default/empty:80/TCP", meterState())
	mustSet(t, s, "service/default/empty:80/TCP", serviceState(13, netip.MustParseAddr("10.96.0.12"), 80, nil, 0, false))
	return s
}

// goldenStore is sampleStore with the version note.
func goldenStore(t *testing.T) *Store {
	s := sampleStore(t)
	mustSet(t, s, VersionOwner, VersionState(3, ""))
	return s
}

// TestRenderGolden pins the printed form of the desired state: what
// `nodeflow flows` shows.
func TestRenderGolden(t *testing.T) {
	s := goldenStore(t)
	var sb strings.Builder
	if err := s.Render(&sb, "", 3); err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "render.golden", sb.String())

	sb.Reset()
	if err := s.Render(&sb, "service/default/web", 3); err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "render-owner.golden", sb.String())
}

// TestDifferencesGolden pins the printed form of `nodeflow flows --diff`.
func TestDifferencesGolden(t *testing.T) {
	s := goldenStore(t)
	sw := newFakeSwitch()
	mustSync(t, s, sw, DiffOptions{})
	obs := sw.observed()
	// Drift: one flow gone, one flow's actions changed, one foreign flow,
	// one group's buckets changed.
	var kept []openflow.Flow
	for _, f := range obs.Flows {
		switch {
		case f.Table == uint8(plan.PodLocalDelivery):
			continue
		case f.Table == uint8(plan.PodClassifier) && f.Priority == 100:
			f.Instructions = []openflow.Instruction{openflow.ApplyActions{}}
		}
		kept = append(kept, f)
	}
	kept = append(kept, openflow.Flow{Table: 0, Priority: 1000, Match: openflow.NewMatch(openflow.EthType(0x0800))})
	obs.Flows = kept
	for i := range obs.Groups {
		if obs.Groups[i].ID == 11 {
			obs.Groups[i].Buckets = obs.Groups[i].Buckets[:1]
		}
	}
	var sb strings.Builder
	if err := WriteDifferences(&sb, s.Compare(obs, "", 1)); err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "diff.golden", sb.String())

	sb.Reset()
	if err := WriteDifferences(&sb, s.Compare(obs, "pod/", 1)); err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "diff-owner.golden", sb.String())

	if ds := s.Compare(sw.observed(), "", 1); len(ds) != 0 {
		t.Fatalf("no drift, yet %d differences: %+v", len(ds), ds)
	}
}

// TestNoteRoundTrip reads back what VersionState writes, including a note
// of pipeline 1 (no agent) and text that is not a note.
func TestNoteRoundTrip(t *testing.T) {
	for _, n := range []Note{
		{Pipeline: plan.PipelineVersion, Generation: 7, Agent: "v0.2.0-3-gabcdef0"},
		{Pipeline: 1, Generation: 65535},
	} {
		st := VersionState(n.Generation, n.Agent)
		if n.Pipeline != plan.PipelineVersion {
			st = State{Flows: []openflow.Flow{{Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Note{Data: []byte(n.String())}}}}}}}
		}
		got, ok := ParseNote(VersionNote(&st.Flows[0]))
		if !ok || got != n {
			t.Errorf("note %q read back as %+v, %v", n.String(), got, ok)
		}
	}
	if got := (Note{Pipeline: 2, Generation: 1, Agent: "a b"}).String(); got != "nodeflow pipeline=2 generation=1 agent=a_b" {
		t.Errorf("a version with a space: %q", got)
	}
	for _, bad := range []string{"", "nodeflow", "nodeflow pipeline=x generation=1", "other pipeline=1 generation=1", "nodeflow generation=1 agent=v1"} {
		if n, ok := ParseNote(bad); ok {
			t.Errorf("ParseNote(%q) = %+v, want not a note", bad, n)
		}
	}
}
