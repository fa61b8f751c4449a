package plan_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"nodeflow/flows/egressfw"
	"nodeflow/flows/gateway"
	"nodeflow/flows/hostport"
	"nodeflow/flows/node"
	"nodeflow/flows/plan"
	"nodeflow/flows/policy"
	"nodeflow/flows/service"
	"nodeflow/flows/unidle"
	"nodeflow/flows/vnet"
	"nodeflow/proxy"
)

// TestOwnerNamespace checks the namespace of each feature's owners, named
// by the features' own owner functions: a feature that renames its owners
// fails here, not in a metric.
func TestOwnerNamespace(t *testing.T) {
	port := proxy.ServicePortName{Port: "http", Protocol: v1.ProtocolTCP}
	port.Namespace, port.Name = "team-a", "web"
	for _, c := range []struct{ owner, want string }{
		{node.PodOwner("team-a", "p"), "team-a"},
		{service.Owner(port), "team-a"},
		{service.GatewayOwner(port), "team-a"},
		{unidle.Owner(port), "team-a"},
		{egressfw.Owner("team-a"), "team-a"},
		{hostport.Owner("team-a", "p"), "team-a"},
		{policy.PolicyOwner("team-a", "deny"), "team-a"},
		{policy.PodOwner("team-a", "p"), "team-a"},
		{vnet.LocalOwner("team-a", "att"), "team-a"},

		// The node's own.
		{service.RejectMeterOwner, ""},
		{service.CIDROwner, ""},
		{service.AddressOwner(netip.MustParseAddr("10.96.0.10")), ""},
		{unidle.MeterOwner, ""},
		{policy.OwnerBase, ""},
		{vnet.VNIOwner(7), ""},
		{node.OwnerLocal, ""},
		{node.RemoteOwner("node2"), ""},
		{gateway.PipelineOwner(plan.Pod), ""},
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
