package servicefeature

import (
	"context"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// installedFlows returns the br0 service flows p's stores hold, with the
// cookies the reconciler would have stamped on them.
func installedFlows(p *Proxy) []openflow.Flow {
	var out []openflow.Flow
	for _, owner := range store(p, plan.Pod).Owners("service/") {
		st, _ := store(p, plan.Pod).Get(owner)
		for _, f := range st.Flows {
			f.Cookie = uint64(plan.MakeCookie(plan.FeatureService, owner, 7))
			out = append(out, f)
		}
	}
	return out
}

func TestServiceProxyKeepsInstalledGroupIDs(t *testing.T) {
	ctx := context.Background()
	svc := webService("10.96.0.10")
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	slice := webSlice("10.244.2.5", "10.244.1.7")
	slice.Endpoints[1].NodeName = ptr.To("node1") // a local endpoint: the external group differs
	internalKey := serviceflows.GroupKey(webPort, service.IPv4, false)
	externalKey := serviceflows.GroupKey(webPort, service.IPv4, true)

	// The first agent ran with ids other than the hash-preferred ones (as
	// after a collision).
	first := testServiceProxy(t)
	for key, id := range map[string]uint32{internalKey: 4242, externalKey: 4343} {
		if err := first.ids.Reserve(key, id); err != nil {
			t.Fatal(err)
		}
	}
	recordAndSync(t, ctx, first, svc, slice)
	if got := first.built[webPort].ids; got.id(internalKey) != 4242 || got.id(externalKey) != 4343 {
		t.Fatalf("first agent's ids %v, want the reserved 4242 and 4343", got)
	}

	// A restarted agent without the flows picks the hash-preferred ids.
	fresh := testServiceProxy(t)
	recordAndSync(t, ctx, fresh, svc, slice)
	if got := fresh.built[webPort].ids; got.id(internalKey) == 4242 {
		t.Fatalf("without restore the ids are %v: the test cannot tell restore from luck", got)
	}

	// With them, it keeps every id, and releases reservations it did not use.
	restarted := testServiceProxy(t)
	restarted.installed = installedFlows(first)
	recordAndSync(t, ctx, restarted, svc, slice)
	if got := restarted.built[webPort].ids; got.id(internalKey) != 4242 || got.id(externalKey) != 4343 {
		t.Errorf("restarted agent's ids %v, want the installed 4242 and 4343", got)
	}
	if restarted.installed != nil {
		t.Error("the installed flows are kept after the first sync")
	}

	// The Service changed while the agent was away: external traffic
	// shares the internal group again, and the external id is released.
	changed := testServiceProxy(t)
	changed.installed = installedFlows(first)
	cluster := svc.DeepCopy()
	cluster.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	recordAndSync(t, ctx, changed, cluster, slice)
	if got := changed.built[webPort].ids; got.id(internalKey) != 4242 || len(got) != 1 {
		t.Errorf("ids after the change %v, want only the internal 4242", got)
	}
	if n := changed.ids.Len(); n != 1 {
		t.Errorf("%d ids held, want 1: the unused external reservation stays", n)
	}
	if _, held := changed.ids.Owner(4343); held {
		t.Error("id 4343 is still held")
	}
}

func TestRestoreGroupIDsIgnoresStrangers(t *testing.T) {
	p := testServiceProxy(t)
	p.svcs.Record(nil, webService("10.96.0.10"))
	p.svcs.Update()
	owner := serviceflows.Owner(webPort)
	vip := netip.MustParseAddr("10.96.0.10")
	flows := []openflow.Flow{
		// Another table, a foreign cookie, an owner nobody knows, no group.
		{Table: 31, Cookie: uint64(plan.MakeCookie(plan.FeatureService, owner, 1)), Match: openflow.NewMatch(openflow.EthType(openflow.EthTypeIPv4), openflow.IPv4Dst(vip)), Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Group{ID: 9}}}}},
		{Table: uint8(plan.PodServiceLB), Cookie: 0x1234, Match: openflow.NewMatch(openflow.EthType(openflow.EthTypeIPv4), openflow.IPv4Dst(vip)), Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Group{ID: 9}}}}},
		{Table: uint8(plan.PodServiceLB), Cookie: uint64(plan.MakeCookie(plan.FeatureService, "service/default/other:http/TCP", 1)), Match: openflow.NewMatch(openflow.EthType(openflow.EthTypeIPv4), openflow.IPv4Dst(vip)), Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Group{ID: 9}}}}},
		{Table: uint8(plan.PodServiceLB), Cookie: uint64(plan.MakeCookie(plan.FeatureService, owner, 1)), Match: openflow.NewMatch(openflow.EthType(openflow.EthTypeIPv4), openflow.IPv4Dst(vip))},
		// Out of the service group range.
		{Table: uint8(plan.PodServiceLB), Cookie: uint64(plan.MakeCookie(plan.FeatureService, owner, 1)), Match: openflow.NewMatch(openflow.EthType(openflow.EthTypeIPv4), openflow.IPv4Dst(vip)), Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Group{ID: plan.ServiceGroups.Last + 1}}}}},
	}
	if keys := p.restoreGroupIDs(flows); len(keys) != 0 || p.ids.Len() != 0 {
		t.Errorf("restored %v (%d ids held) from flows that are not the port's", keys, p.ids.Len())
	}
}

// id returns the id of key, 0 when g has none.
func (g groupIDs) id(key string) uint32 {
	id, _ := g.lookup(key)
	return id
}

// recordAndSync records svc and slice on p, then syncs it.
func recordAndSync(t *testing.T, ctx context.Context, p *Proxy, svc *v1.Service, slice *discovery.EndpointSlice) {
	t.Helper()
	p.svcs.Record(nil, svc)
	p.eps.Record(nil, slice)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
}
