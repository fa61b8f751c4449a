package plan_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/hostportflows"
	"nodeflow/datapath/idlingflows"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/datapath/vnetflows"
	"nodeflow/model/service"
)

// TestOwnerNamespace checks the namespace of each feature's owners, named
// by the features' own owner functions: a feature that renames its owners
// fails here, not in a metric.
func TestOwnerNamespace(t *testing.T) {
	port := service.ServicePortName{Port: "http", Protocol: v1.ProtocolTCP}
	port.Namespace, port.Name = "team-a", "web"
	for _, c := range []struct{ owner, want string }{
		{nodeflows.PodOwner("team-a", "p"), "team-a"},
		{serviceflows.Owner(port), "team-a"},
		{serviceflows.GatewayOwner(port), "team-a"},
		{idlingflows.Owner(port), "team-a"},
		{egressfirewallflows.Owner("team-a"), "team-a"},
		{hostportflows.Owner("team-a", "p"), "team-a"},
		{networkpolicyflows.PolicyOwner("team-a", "deny"), "team-a"},
		{networkpolicyflows.PodOwner("team-a", "p"), "team-a"},
		{vnetflows.LocalOwner("team-a", "att"), "team-a"},

		// The node's own.
		{serviceflows.RejectMeterOwner, ""},
		{serviceflows.CIDROwner, ""},
		{serviceflows.AddressOwner(netip.MustParseAddr("10.96.0.10")), ""},
		{idlingflows.MeterOwner, ""},
		{networkpolicyflows.OwnerBase, ""},
		{vnetflows.VNIOwner(7), ""},
		{nodeflows.OwnerLocal, ""},
		{nodeflows.RemoteOwner("node2"), ""},
		{gatewayflows.PipelineOwner(plan.Pod), ""},
		{"gateway/defaults", ""},
		{"meta", ""},

		// Not owners, or not namespaces.
		{"", ""},
		{"nothing/team-a/x", ""},
		{"service/Team-A/web:80/TCP", ""},
		{"service/-a/web:80/TCP", ""},
		{"netpol/src/10.0.0.0/8", ""},
		{"netpol/policy", ""},
	} {
		if got := plan.OwnerNamespace(c.owner); got != c.want {
			t.Errorf("OwnerNamespace(%q) = %q, want %q", c.owner, got, c.want)
		}
	}
}
