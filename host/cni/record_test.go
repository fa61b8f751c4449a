package cni

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func record(port, container string) PortRecord {
	return PortRecord{Bridge: "br0", Port: port, ContainerID: container, IfName: "eth0",
		ExternalIDs: map[string]string{ExternalIDOwner: OwnerCNI, ExternalIDPodName: "p-" + container}}
}

// TestPortRecords: records round-trip, a damaged one is reported (not
// hiding the others) and removed by GC with those of invalid attachments,
// and names that are not interface names are refused.
func TestPortRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodeflow")
	st := openStore(t, dir)
	a, b := record("nfaaaa", "c1"), record("nfbbbb", "c2")
	for _, r := range []PortRecord{a, b} {
		if err := st.PutPort(r); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := st.Port("nfaaaa")
	if err != nil || !ok || got.ContainerID != "c1" || got.ExternalIDs[ExternalIDPodName] != "p-c1" || got.Version != portRecordVersion {
		t.Fatalf("Port(nfaaaa) = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := st.Port("nfcccc"); ok || err != nil {
		t.Fatalf("Port(missing) = %v, %v", ok, err)
	}
	// A damaged record, as a crash of something else could leave.
	if err := os.WriteFile(filepath.Join(dir, portsDir, "nfdddd.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, bad, err := st.Ports()
	if err != nil || len(recs) != 2 || len(bad) != 1 || bad["nfdddd.json"] == nil {
		t.Fatalf("Ports = %d records, bad %v, %v; want 2 and the damaged one reported", len(recs), bad, err)
	}
	for _, name := range []string{"", "../x", "a/b", "averyveryverylongname"} {
		if err := st.PutPort(record(name, "c9")); err == nil {
			t.Errorf("PutPort(%q): no error", name)
		}
	}
	// GC keeps c1's record and removes c2's and the damaged one.
	gone, err := st.gcPorts(map[Attachment]bool{{ContainerID: "c1", IfName: "eth0"}: true})
	if err != nil || len(gone) != 1 || gone[0] != "nfbbbb" {
		t.Fatalf("gcPorts = %v, %v; want [nfbbbb]", gone, err)
	}
	st.Close()
	err = WithPortRecords(context.Background(), t.TempDir()+"/..", "absent", func(recs []PortRecord, bad map[string]error) error {
		if len(recs) != 0 || len(bad) != 0 {
			t.Errorf("a store that does not exist has records: %v %v", recs, bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = WithPortRecords(context.Background(), filepath.Dir(dir), "nodeflow", func(recs []PortRecord, bad map[string]error) error {
		if len(recs) != 1 || recs[0].Port != "nfaaaa" || len(bad) != 0 {
			t.Errorf("after GC: %v, bad %v; want nfaaaa alone", recs, bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (PortRecord{Version: 1, Bridge: "br0", Port: "x", ContainerID: "c", IfName: "eth0"}).validate("x.json"); err == nil || !strings.Contains(err.Error(), "externalIDs") {
		t.Errorf("a record without the owner id: %v, want an error naming externalIDs", err)
	}
}
