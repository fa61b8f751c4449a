package vnetipam

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDoc checks that docs/virtual-networks.md names every event reason
// and every metric of the controller.
func TestDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/virtual-networks.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, r := range []string{ReasonSubnetNotFound, ReasonSubnetInvalid, ReasonSubnetConflict, ReasonSubnetFull,
		ReasonVNIMismatch, ReasonNodeNotFound, ReasonMalformed, ReasonAddressConflict, ReasonAddressOutsideSubnet, reasonAPIError,
		freedGone, freedExtra} {
		if !strings.Contains(doc, "`"+r+"`") {
			t.Errorf("docs/virtual-networks.md does not name %s", r)
		}
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg).leader.Set(0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.Contains(doc, "`"+mf.GetName()) {
			t.Errorf("docs/virtual-networks.md does not name the metric %s", mf.GetName())
		}
	}
	if len(mfs) < 6 {
		t.Errorf("%d metrics gathered", len(mfs))
	}
}
