package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// TestReadFlowsFromOVS reads back, from a real ovs-vswitchd, the flows of
// one table with one feature's cookies, and nothing else.
func TestReadFlowsFromOVS(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"); err != nil {
		t.Fatal(err)
	}
	ck := plan.MakeCookie(plan.FeatureService, "service/default/web:http/TCP", 3)
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-group", "br0", "group_id=4242,type=select,selection_method=hash,bucket=bucket_id=0,actions=drop"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		fmt.Sprintf("table=30,cookie=%s,priority=100,tcp,nw_dst=10.96.0.10,tp_dst=80,actions=group:4242", ck),
		// Same table, another feature's; the feature's, in another table.
		"table=30,cookie=0x0400000000000001,priority=100,tcp,nw_dst=10.96.0.11,tp_dst=80,actions=group:4242",
		fmt.Sprintf("table=35,cookie=%s,priority=100,tcp,nw_dst=10.244.2.5,actions=drop", ck),
	} {
		if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flow", "br0", f); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{OVSRundir: sb.Dir, PodBridge: "br0"}
	flows, err := readFlows(context.Background(), cfg.MgmtSocket("br0"), plan.PodServiceLB, plan.FeatureService, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1 || flows[0].Table != 30 || plan.Cookie(flows[0].Cookie)&plan.OwnerMask != ck&plan.OwnerMask {
		t.Fatalf("read %d flows (%v), want the one service flow of table 30", len(flows), flows)
	}
}

// TestSwitchWhileEmpty gives a gateway bridge without flows, in a real
// ovs-vswitchd, table 0's NORMAL miss flow, and leaves a bridge with flows
// alone.
func TestSwitchWhileEmpty(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "breth0", "--", "set", "bridge", "breth0", "datapath_type=netdev", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{OVSRundir: sb.Dir, GatewayBridge: "breth0"}
	dump := func() string {
		t.Helper()
		out, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "--no-stats", "breth0")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	if d := dump(); d != "" {
		t.Fatalf("a new secure bridge has flows: %s", d)
	}
	put, err := switchWhileEmpty(context.Background(), cfg.MgmtSocket("breth0"), logrus.New())
	if err != nil || !put {
		t.Fatalf("empty bridge: put %v, %v", put, err)
	}
	if d := dump(); d != "priority=0 actions=NORMAL" {
		t.Fatalf("flows = %q, want table 0's NORMAL miss flow alone", d)
	}
	// With flows (a restarted agent's): nothing changes.
	if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "breth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flow", "breth0", "table=2,cookie=0x7,priority=5,actions=drop"); err != nil {
		t.Fatal(err)
	}
	put, err = switchWhileEmpty(context.Background(), cfg.MgmtSocket("breth0"), logrus.New())
	if err != nil || put {
		t.Fatalf("bridge with flows: put %v, %v", put, err)
	}
	if d := dump(); d != "cookie=0x7, table=2, priority=5 actions=drop" {
		t.Errorf("flows = %q, want the one flow as it was", d)
	}
}
