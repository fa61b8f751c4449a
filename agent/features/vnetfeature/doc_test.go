package vnetfeature

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDoc checks that docs/virtual-networks.md names every event reason,
// every metric and the field manager of the connection agent.
func TestDoc(t *testing.T) {
	b, err := os.ReadFile("../../../docs/virtual-networks.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, r := range []string{ReasonVNIInvalid, ReasonSubnetNotFound, ReasonAddressInvalid, ReasonAddressConflict,
		ReasonInterfaceFailed, ReasonNoNodeAddress} {
		if !strings.Contains(doc, "`"+r+"`") {
			t.Errorf("docs/virtual-networks.md does not name the reason %s", r)
		}
	}
	reg := prometheus.NewRegistry()
	if err := newMetrics().register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.Contains(doc, mf.GetName()) {
			t.Errorf("docs/virtual-networks.md does not name the metric %s", mf.GetName())
		}
	}
	for _, s := range []string{strings.TrimSuffix(FieldManager("x"), "x"), NetnsPrefix, OwnerVNet, ExternalIDAttachment} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/virtual-networks.md does not say %q", s)
		}
	}
}
