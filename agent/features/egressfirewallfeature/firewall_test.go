package egressfirewallfeature

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/agent/feature"
	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/dnstest"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/lib/openflow"
	"nodeflow/model/egressfirewall"
)

func TestCIDRRulesAndStatus(t *testing.T) {
	e := newEnv(t, ef("a", "default", "Allow 192.0.2.0/24 TCP/443", "Deny 0.0.0.0/0"))
	want := e.want("a", 0x11,
		egressfirewallflows.Rule{Action: egressfirewall.Allow, Prefixes: pfx("192.0.2.0/24"), Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 443}}},
		egressfirewallflows.Rule{Action: egressfirewall.Deny, Prefixes: pfx("0.0.0.0/0")})
	got := e.flows(egressfirewallflows.Owner("a"))
	if !slices.Equal(got, want) {
		t.Fatalf("flows after the first sync:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The guards are there from the first sync.
	if g := e.flows(egressfirewallflows.GuardOwner); len(g) == 0 {
		t.Error("no guards")
	}
	// Status: this node's message, its own field manager, the roll-up.
	a := e.lastApplied("a", "default", "node1: "+StatusApplied)
	if a.manager != FieldManager("node1") || !a.force {
		t.Errorf("applied by %q force %v, want %q forced", a.manager, a.force, FieldManager("node1"))
	}
	if st := a.obj["status"].(map[string]any)["status"]; st != StatusApplied {
		t.Errorf("status.status %v, want %q", st, StatusApplied)
	}
	if md := a.obj["metadata"].(map[string]any); md["uid"] == "" || md["uid"] == nil {
		t.Errorf("apply without the uid precondition: %v", md)
	}

	// An update replaces the rules in one owner.
	u := ef("a", "default", "Deny 198.51.100.0/24", "Allow 0.0.0.0/0")
	u.SetUID(e.enforcedUID("a"))
	e.update(u)
	want = e.want("a", 0x11,
		egressfirewallflows.Rule{Action: egressfirewall.Deny, Prefixes: pfx("198.51.100.0/24")},
		egressfirewallflows.Rule{Action: egressfirewall.Allow, Prefixes: pfx("0.0.0.0/0")})
	e.waitFlows(egressfirewallflows.Owner("a"), "updated rules", func(got []string) bool { return slices.Equal(got, want) })

	// A namespace without an id gets its rules when the id comes.
	e.create(ef("f", "default", "Deny 203.0.113.0/24"))
	e.lastApplied("f", "default", "node1: "+StatusNotApplied+": namespace f has no namespace id yet")
	if got := e.flows(egressfirewallflows.Owner("f")); len(got) != 0 {
		t.Fatalf("flows without an id: %v", got)
	}
	e.h.IDs().Set("f", 0x99)
	e.waitFlows(egressfirewallflows.Owner("f"), "rules once the id comes", func(got []string) bool {
		return has(got, "reg1=0x99/0xffffff", "nw_dst=203.0.113.0/24")
	})
	e.lastApplied("f", "default", "node1: "+StatusApplied)

	// Deleting the object removes the rules.
	if err := e.dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace("a").Delete(context.Background(), "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.Owner("a"), "no rules after delete", func(got []string) bool { return len(got) == 0 })
}

func TestBadInputKeepsGoodState(t *testing.T) {
	e := newEnv(t, ef("a", "default", "Allow 192.0.2.0/24", "Deny 0.0.0.0/0"))
	before := e.flows(egressfirewallflows.Owner("a"))
	if len(before) == 0 {
		t.Fatal("no flows")
	}
	// An invalid update (the API server's CRD would refuse most of these;
	// the agent checks them all the same): the old rules stay.
	bad := ef("a", "default", "Allow 192.0.2.0/24", "Deny 0.0.0.0/0")
	bad.SetUID(e.enforcedUID("a"))
	egress := bad.Object["spec"].(map[string]any)["egress"].([]any)
	egress[1].(map[string]any)["to"].(map[string]any)["cidrSelector"] = "::ffff:10.0.0.0/104"
	egress[0].(map[string]any)["ports"] = []any{map[string]any{"protocol": "ICMP"}}
	e.update(bad)
	ev := e.event("Warning", egressfirewall.ReasonInvalid, "spec.egress[0].ports[0].protocol", "spec.egress[1].to.cidrSelector")
	t.Logf("event: %s", ev)
	e.lastApplied("a", "default", "node1: "+StatusNotApplied+": EgressFirewall a/default: spec.egress[0].ports[0].protocol")
	if got := e.flows(egressfirewallflows.Owner("a")); !slices.Equal(got, before) {
		t.Errorf("flows changed by an invalid update:\n%s", strings.Join(got, "\n"))
	}
	// A node selector with a bad operator.
	e.create(ef("b", "default", "Allow 10.1.0.0/16"))
	bad = ef("b", "default", "Allow 10.1.0.0/16")
	bad.SetUID(e.enforcedUID("b"))
	egress = bad.Object["spec"].(map[string]any)["egress"].([]any)
	to := egress[0].(map[string]any)["to"].(map[string]any)
	delete(to, "cidrSelector")
	to["nodeSelector"] = map[string]any{"matchExpressions": []any{map[string]any{"key": "role", "operator": "Near"}}}
	e.update(bad)
	e.event("Warning", egressfirewall.ReasonInvalid, "spec.egress[0].to.nodeSelector")
	// A name that is not default (the CRD refuses it too).
	e.create(ef("c", "other", "Deny 0.0.0.0/0"))
	e.event("Warning", egressfirewall.ReasonNotDefault, "metadata.name")
	if got := e.flows(egressfirewallflows.Owner("c")); len(got) != 0 {
		t.Errorf("an EgressFirewall not named default is enforced: %v", got)
	}
	// Each problem is reported once.
	e.markAllAndWait()
	e.noEvent()
}

// markAllAndWait syncs every namespace again.
func (e *env) markAllAndWait() {
	e.f.markAll()
	e.f.syncNow(nil)
}

func TestTwoEgressNetworkPoliciesAndBothKinds(t *testing.T) {
	e := newEnv(t,
		enp("a", "newer", 1700000200, "Deny 0.0.0.0/0"),
		enp("a", "older", 1700000100, "Allow 192.0.2.0/24", "Deny 0.0.0.0/0"),
	)
	// The oldest is enforced, the other reported.
	want := e.want("a", 0x11,
		egressfirewallflows.Rule{Action: egressfirewall.Allow, Prefixes: pfx("192.0.2.0/24")},
		egressfirewallflows.Rule{Action: egressfirewall.Deny, Prefixes: pfx("0.0.0.0/0")})
	if got := e.flows(egressfirewallflows.Owner("a")); !slices.Equal(got, want) {
		t.Fatalf("flows:\n%s\nwant the oldest policy's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	e.event("Warning", egressfirewall.ReasonDuplicate, "EgressNetworkPolicy a/newer", "a/older is older")

	// An EgressFirewall in the same namespace wins over both.
	e.create(ef("a", "default", "Deny 203.0.113.0/24"))
	want = e.want("a", 0x11, egressfirewallflows.Rule{Action: egressfirewall.Deny, Prefixes: pfx("203.0.113.0/24")})
	e.waitFlows(egressfirewallflows.Owner("a"), "the EgressFirewall's rules", func(got []string) bool { return slices.Equal(got, want) })
	e.event("Warning", egressfirewall.ReasonShadowed, "EgressFirewall a/default takes precedence")
}

func TestNodeSelector(t *testing.T) {
	e := newEnv(t,
		testNode("node1", "172.30.0.11", map[string]string{"role": "infra"}),
		testNode("node2", "172.30.0.12", nil),
		ef("a", "default", "Allow nodes:role=infra TCP/6443", "Deny 0.0.0.0/0"),
	)
	got := e.flows(egressfirewallflows.Owner("a"))
	if !has(got, "nw_dst=172.30.0.11", "tp_dst=6443") || has(got, "nw_dst=172.30.0.12") {
		t.Fatalf("flows:\n%s", strings.Join(got, "\n"))
	}
	// This node's IP is reached through the host alias too.
	if !has(got, "nw_dst=169.254.169.2", "tp_dst=6443", "goto_table:55") {
		t.Errorf("no alias flow for the node IP:\n%s", strings.Join(got, "\n"))
	}
	// A label change follows.
	n2 := testNode("node2", "172.30.0.12", map[string]string{"role": "infra"})
	if _, err := e.h.Client.CoreV1().Nodes().Update(context.Background(), n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.Owner("a"), "node2 selected", func(got []string) bool { return has(got, "nw_dst=172.30.0.12", "tp_dst=6443") })
	// A node that joins.
	if _, err := e.h.Client.CoreV1().Nodes().Create(context.Background(), testNode("node3", "172.30.0.13", map[string]string{"role": "infra"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.Owner("a"), "node3 selected", func(got []string) bool { return has(got, "nw_dst=172.30.0.13", "tp_dst=6443") })
	// And one that leaves.
	if err := e.h.Client.CoreV1().Nodes().Delete(context.Background(), "node3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.Owner("a"), "node3 gone", func(got []string) bool { return !has(got, "nw_dst=172.30.0.13") })
}

func TestDNSNameLookups(t *testing.T) {
	e := newEnvDNS(t, func(s *dnstest.Server) {
		s.Set("www.example.com", 1, netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7"))
	}, ef("a", "default", "Allow dns:www.example.com", "Deny 0.0.0.0/0"))
	// Looked up at once when added; the answer may come after the
	// first sync, which then has no address for the rule.
	e.waitFlows(egressfirewallflows.Owner("a"), "the name's addresses", func(got []string) bool {
		return has(got, "nw_dst=198.51.100.7", "goto_table:55") && has(got, "ipv6_dst=2001:db8::7", "goto_table:55")
	})
	// Another namespace shares the name: one entry in the cache.
	e.create(ef("b", "default", "Deny dns:www.example.com"))
	e.waitFlows(egressfirewallflows.Owner("b"), "the shared name", func(got []string) bool { return has(got, "nw_dst=198.51.100.7") })
	if st, _ := e.f.names.Status("www.example.com"); st.Refs != 2 {
		t.Errorf("refs %d, want 2", st.Refs)
	}
	// An answer that changes: the new address comes, the old one goes
	// once its TTL has passed.
	e.dns.Set("www.example.com", 0, netip.MustParseAddr("198.51.100.8"))
	for _, ns := range []string{"a", "b"} {
		e.waitFlows(egressfirewallflows.Owner(ns), "the changed answer", func(got []string) bool {
			return has(got, "nw_dst=198.51.100.8") && !has(got, "nw_dst=198.51.100.7") && !has(got, "ipv6_dst=2001:db8::7")
		})
	}
	// A name that fails keeps its addresses.
	e.dns.SetMode("www.example.com", dnstest.ServFail)
	n := e.dns.Queries("www.example.com", "A", "udp")
	featuretest.WaitFor(5*time.Second, func() bool { return e.dns.Queries("www.example.com", "A", "udp") > n+1 })
	if got := e.flows(egressfirewallflows.Owner("a")); !has(got, "nw_dst=198.51.100.8") {
		t.Errorf("a failing lookup dropped the addresses:\n%s", strings.Join(got, "\n"))
	}
}

func TestDNSLearning(t *testing.T) {
	dnsSvc := kubeDNS("kube-system", "kube-dns", "uid-dns", "10.96.0.10")
	e := newEnv(t,
		testPod("a", "client", "10.244.1.5", "fd00:10:244:1::5"),
		testPod("b", "other", "10.244.1.6"),
		dnsSvc, endpointSlice(dnsSvc, "kube-dns-1", "endpointslice-controller.k8s.io", true, "10.244.2.3"),
		ef("a", "default", "Allow dns:*.example.com", "Deny dns:bad.example.org", "Deny 0.0.0.0/0"),
	)
	// The learning flows catch the replies to the namespace's pods only:
	// per pod address, the untrusted count, clause 1 and the punt; the
	// trusted sources (the Service's ClusterIP and endpoint, the IPv6
	// resolver from the gateway and the host).
	dnsFlows := e.waitFlows(egressfirewallflows.DNSOwner, "learning flows", func(got []string) bool { return len(got) == 10 })
	if !has(dnsFlows, "nw_dst=10.244.1.5", "tp_src=53", "conjunction(") || !has(dnsFlows, "ipv6_dst=fd00:10:244:1::5", "tp_src=53", "conjunction(") ||
		!has(dnsFlows, "conj_id=", "controller(") || !has(dnsFlows, "reg1=0x42/0xffffff", "nw_src=10.96.0.10", "ct_state=+rpl+trk") ||
		!has(dnsFlows, "reg1=0x42/0xffffff", "nw_src=10.244.2.3") || !has(dnsFlows, "ipv6_src=fd00:172:30::100", "reg0=0x3/0xf") {
		t.Fatalf("learning flows:\n%s", strings.Join(dnsFlows, "\n"))
	}
	st, _ := e.h.Stores[plan.Pod].Get(egressfirewallflows.DNSOwner)
	if len(st.Meters) != 1 || st.Meters[0].ID != plan.MeterEgressFirewallDNS {
		t.Errorf("meters %+v", st.Meters)
	}

	// A reply for a name a wildcard matches: installed, then released.
	e.f.HandlePacketIn(fromKubeDNS(dnsReply(t, "10.96.0.10", "10.244.1.5", "api.example.com", 300, "198.51.100.20")))
	released := func(n int) []featuretest.Sent {
		var out []featuretest.Sent
		featuretest.WaitFor(5*time.Second, func() bool { out = e.h.Sent(); return len(out) >= n })
		if len(out) != n {
			t.Fatalf("%d messages sent, want %d", len(out), n)
		}
		return out
	}
	sent := released(1)
	if got := e.flows(egressfirewallflows.Owner("a")); !has(got, "nw_dst=198.51.100.20", "goto_table:55") {
		t.Fatalf("released before the address was installed:\n%s", strings.Join(got, "\n"))
	}
	po, ok := sent[0].Msg.(*openflow.PacketOut)
	if !ok || po.InPort != 7 || len(po.Actions) != 1 || po.Actions[0] != openflow.ResubmitTable(uint8(plan.PodRouting)) {
		t.Fatalf("release %#v", sent[0].Msg)
	}
	if len(po.Match.Fields) != 2 || po.Match.Fields[0].String() != openflow.Reg(0, 1, 0xffffffff).String() ||
		po.Match.Fields[1].String() != openflow.Reg(1, kubeSystemID, 0xffffffff).String() {
		t.Errorf("release carries %v, want the packet-in's registers", po.Match)
	}
	// A Deny for an exact name holds as well.
	e.f.HandlePacketIn(packetIn(dnsReply(t, "fd00:172:30::100", "fd00:10:244:1::5", "bad.example.org", 300, "2001:db8::bad")))
	released(2)
	if got := e.flows(egressfirewallflows.Owner("a")); !has(got, "ipv6_dst=2001:db8::bad", "actions=drop") {
		t.Fatalf("deny not installed:\n%s", strings.Join(got, "\n"))
	}
	// A reply that no rule names is released at once; nothing changes.
	before := e.flows(egressfirewallflows.Owner("a"))
	e.f.HandlePacketIn(fromKubeDNS(dnsReply(t, "10.96.0.10", "10.244.1.5", "www.example.net", 300, "203.0.113.9")))
	released(3)
	// A name two labels below the wildcard is not matched either.
	e.f.HandlePacketIn(fromKubeDNS(dnsReply(t, "10.96.0.10", "10.244.1.5", "a.b.example.com", 300, "203.0.113.10")))
	released(4)
	if got := e.flows(egressfirewallflows.Owner("a")); !slices.Equal(got, before) {
		t.Errorf("an unmatched reply changed the rules:\n%s", strings.Join(got, "\n"))
	}
	// A reply from a source that is no DNS server the pods should use
	// (another pod, say) is released unlearned.
	e.f.HandlePacketIn(packetIn(dnsReply(t, "10.244.2.9", "10.244.1.5", "evil.example.com", 300, "203.0.113.66")))
	released(5)
	if got := e.flows(egressfirewallflows.Owner("a")); !slices.Equal(got, before) {
		t.Errorf("an untrusted reply changed the rules:\n%s", strings.Join(got, "\n"))
	}
	if v := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyUntrusted)); v != 1 {
		t.Errorf("untrusted %v replies, want 1", v)
	}
	if v := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyLearned)); v != 2 {
		t.Errorf("learned %v replies, want 2", v)
	}
	if v := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyPassed)); v != 2 {
		t.Errorf("passed %v replies, want 2", v)
	}

	// A new pod in the namespace gets a learning flow; the namespace's
	// policy losing its dnsName rules removes them all.
	if _, err := e.h.Client.CoreV1().Pods("a").Create(context.Background(), testPod("a", "second", "10.244.1.7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.DNSOwner, "the new pod's learning flow", func(got []string) bool { return has(got, "nw_dst=10.244.1.7") })
	u := ef("a", "default", "Deny 0.0.0.0/0")
	u.SetUID(e.enforcedUID("a"))
	e.update(u)
	e.waitFlows(egressfirewallflows.DNSOwner, "no learning flows", func(got []string) bool { return len(got) == 0 })
	if st, _ := e.h.Stores[plan.Pod].Get(egressfirewallflows.DNSOwner); len(st.Meters) != 0 {
		t.Errorf("meter kept without flows")
	}
	if names := e.f.names.Names(); len(names) != 0 {
		t.Errorf("names still registered: %v", names)
	}
}

func TestUnresolvedName(t *testing.T) {
	e := newEnvDNS(t, func(s *dnstest.Server) { s.SetNegativeTTL(1) },
		ef("a", "default", "Allow 192.0.2.0/24", "Allow dns:never.example.com", "Deny 0.0.0.0/0"))
	e.event("Warning", ReasonDNSNameUnresolved, "spec.egress[1].to.dnsName", `"never.example.com" does not resolve`, "NXDOMAIN")
	e.lastApplied("a", "default", "node1: "+StatusNotApplied+": EgressFirewall a/default: spec.egress[1].to.dnsName")
	// The other rules are in place all the same.
	if got := e.flows(egressfirewallflows.Owner("a")); !has(got, "nw_dst=192.0.2.0/24", "goto_table:55") || !has(got, "priority=10997", "actions=drop") {
		t.Fatalf("flows:\n%s", strings.Join(got, "\n"))
	}
	// The name comes into being: applied.
	e.dns.Set("never.example.com", 30, netip.MustParseAddr("198.51.100.1"))
	e.waitFlows(egressfirewallflows.Owner("a"), "the name's address", func(got []string) bool { return has(got, "nw_dst=198.51.100.1") })
	e.lastApplied("a", "default", "node1: "+StatusApplied)
}

// TestRestartKeepsLearnedAddresses: the addresses a previous incarnation
// installed for a wildcard (which is never looked up) are in the first
// sync, so the start-up bundle keeps them.
func TestRestartKeepsLearnedAddresses(t *testing.T) {
	prev, err := egressfirewallflows.Build(egressfirewallflows.Config{}, egressfirewallflows.Namespace{Name: "a", ID: 0x11, ConjBlock: 1, Rules: []egressfirewallflows.Rule{
		{Action: egressfirewall.Allow, Prefixes: pfx("198.51.100.9/32", "2001:db8::9/128")},
		{Action: egressfirewall.Deny, Prefixes: pfx("0.0.0.0/0")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range prev {
		prev[i].Cookie = uint64(plan.MakeCookie(plan.FeatureEgressFirewall, egressfirewallflows.Owner("a"), 7))
	}
	e := newEnvHost(t, nil, func(h *featuretest.Host) { h.Installed[plan.Pod] = prev },
		ef("a", "default", "Allow dns:*.example.com", "Deny 0.0.0.0/0"))
	got := e.flows(egressfirewallflows.Owner("a"))
	if !has(got, "priority=10999,", "nw_dst=198.51.100.9", "goto_table:55") || !has(got, "priority=10999,", "ipv6_dst=2001:db8::9") {
		t.Fatalf("first sync without the installed addresses:\n%s", strings.Join(got, "\n"))
	}
	if st, _ := e.f.names.Status("*.example.com"); st.Refs != 1 || len(st.Addrs) != 2 {
		t.Errorf("the wildcard after start-up: %+v (want one reference, two addresses)", st)
	}
}

func TestDeniedCounters(t *testing.T) {
	e := newEnv(t, ef("a", "default", "Deny 198.51.100.0/24", "Allow 0.0.0.0/0"), ef("b", "default", "Deny 0.0.0.0/0"))
	e.enforcedUID("a")
	e.enforcedUID("b")
	stat := func(ns string, prio uint16, dst string, n uint64, deny bool) openflow.FlowStats {
		f := openflow.Flow{Table: uint8(plan.PodEgressFirewall), Priority: prio,
			Cookie: uint64(plan.MakeCookie(plan.FeatureEgressFirewall, egressfirewallflows.Owner(ns), 1)),
			Match:  openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4DstPrefix(netip.MustParsePrefix(dst)))}
		if !deny {
			f.Instructions = []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodRouting)}}
		}
		return openflow.FlowStats{Flow: f, PacketCount: n}
	}
	last := &feature.Growth[denyKey]{}
	e.f.addDenied([]openflow.FlowStats{
		stat("a", 10999, "198.51.100.0/24", 5, true),
		stat("a", 10998, "0.0.0.0/0", 100, false), // an allow: not counted
		stat("b", 10999, "10.0.0.0/8", 3, true),
	}, last)
	// The next read: a grew by 2; b's flow was replaced (its counter
	// started again), so its whole count is new.
	e.f.addDenied([]openflow.FlowStats{
		stat("a", 10999, "198.51.100.0/24", 7, true),
		stat("b", 10999, "10.0.0.0/8", 1, true),
	}, last)
	for ns, want := range map[string]float64{"a": 7, "b": 4} {
		if got := testutil.ToFloat64(e.f.m.denied.WithLabelValues(ns)); got != want {
			t.Errorf("denied packets of %s: %v, want %v", ns, got, want)
		}
	}
}

// Two versions of an object have the same spec when the API server gave
// them the same generation (a status write), whatever their content; a
// new generation or another object is a change; without generations the
// specs themselves are compared.
func TestSpecEqual(t *testing.T) {
	obj := func(uid string, gen int64, cidr string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"egress": []any{
			map[string]any{"type": "Deny", "to": map[string]any{"cidrSelector": cidr}}}}}}
		u.SetUID(types.UID(uid))
		u.SetGeneration(gen)
		return u
	}
	for _, c := range []struct {
		name string
		a, b *unstructured.Unstructured
		want bool
	}{
		{"status write", obj("u", 3, "10.0.0.0/8"), obj("u", 3, "10.0.0.0/8"), true},
		{"new generation", obj("u", 3, "10.0.0.0/8"), obj("u", 4, "10.0.0.0/8"), false},
		{"another object", obj("u", 3, "10.0.0.0/8"), obj("v", 3, "10.0.0.0/8"), false},
		{"no generations, same spec", obj("u", 0, "10.0.0.0/8"), obj("u", 0, "10.0.0.0/8"), true},
		{"no generations, new spec", obj("u", 0, "10.0.0.0/8"), obj("u", 0, "10.0.0.0/9"), false},
	} {
		if got := specEqual(c.a, c.b); got != c.want {
			t.Errorf("%s: specEqual = %v, want %v", c.name, got, c.want)
		}
	}
}
