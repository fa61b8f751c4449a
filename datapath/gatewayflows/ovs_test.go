package gatewayflows

import (
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// TestOVSRendersTheSame installs the built flows over nodeflow's own
// OpenFlow connection into a sandboxed breth0 and checks that
// `ovs-ofctl -O OpenFlow15 dump-flows --no-stats` prints exactly the lines
// Flow.String renders: the encoding is what the builders mean, and the
// golden files read like a dump.
func TestOVSRendersTheSame(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "breth0", "--", "set", "bridge", "breth0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"seed", seedConfig()}, {"dual-stack", dualConfig()}} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := Flows(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, PipelineFlows(plan.Gateway)...)
			for i := range fs {
				fs[i].Cookie = uint64(plan.MakeCookie(plan.FeatureGateway, Owner, 7))
			}
			flowtest.InstallAndCompare(t, sb, "breth0", fs)
		})
	}
}
