package egressfirewallfeature

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"nodeflow/agent/feature"
	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/dnstest"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/model/dnsnames"
	"nodeflow/model/egressfirewall"
)

// env is a firewall on a test host with a fake API (typed and dynamic)
// and a DNS server the test controls.
type env struct {
	t   *testing.T
	h   *featuretest.Host
	f   *Firewall
	dyn *dynamicfake.FakeDynamicClient
	dns *dnstest.Server

	mu      sync.Mutex
	applied []appliedStatus // status applies, in order
}

type appliedStatus struct {
	namespace, name, manager string
	force                    bool
	obj                      map[string]any
}

// newEnv starts a firewall with the given API objects: typed ones
// (Nodes, Pods, Services, EndpointSlices) and unstructured egress firewall
// objects. Namespaces "a" to "e" have ids 0x11 to 0x15, kube-system
// 0x42.
func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	return newEnvDNS(t, nil, objs...)
}

// newEnvDNS is newEnv with the DNS server's records set by setup before
// the firewall starts.
func newEnvDNS(t *testing.T, setup func(*dnstest.Server), objs ...runtime.Object) *env {
	t.Helper()
	return newEnvHost(t, setup, nil, objs...)
}

// newEnvHost is newEnvDNS with the host prepared by prepare (the flows
// the switch holds, say) before the firewall's Init.
func newEnvHost(t *testing.T, setup func(*dnstest.Server), prepare func(*featuretest.Host), objs ...runtime.Object) *env {
	t.Helper()
	return newEnvOpts(t, setup, prepare, nil, objs...)
}

// newEnvOpts is newEnvHost with the firewall's options changed by opts.
func newEnvOpts(t *testing.T, setup func(*dnstest.Server), prepare func(*featuretest.Host), opts func(*Options), objs ...runtime.Object) *env {
	t.Helper()
	var typed, untyped []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*unstructured.Unstructured); ok {
			untyped = append(untyped, o)
		} else {
			typed = append(typed, o)
		}
	}
	srv, err := dnstest.Start("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if setup != nil {
		setup(srv)
	}
	h := featuretest.New(featuretest.DefaultNode(), typed...)
	h.Client.(*fake.Clientset).Resources = []*metav1.APIResourceList{
		{GroupVersion: egressfirewall.EgressFirewallGVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: "egressfirewalls", Namespaced: true, Kind: "EgressFirewall"}}},
		{GroupVersion: egressfirewall.EgressNetworkPolicyGVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: "egressnetworkpolicies", Namespaced: true, Kind: "EgressNetworkPolicy"}}},
	}
	for i, ns := range []string{"a", "b", "c", "d", "e"} {
		h.IDs().Set(ns, uint32(0x11+i))
	}
	h.IDs().Set("kube-system", kubeSystemID)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		egressfirewall.EgressFirewallGVR:      "EgressFirewallList",
		egressfirewall.EgressNetworkPolicyGVR: "EgressNetworkPolicyList",
	}, untyped...)
	e := &env{t: t, h: h, dyn: dyn, dns: srv}
	// The fake tracker cannot apply; record the applies and answer with
	// the object.
	dyn.PrependReactor("patch", "egressfirewalls", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchActionImpl)
		if pa.GetSubresource() != "status" || pa.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		var obj map[string]any
		if err := json.Unmarshal(pa.GetPatch(), &obj); err != nil {
			return true, nil, err
		}
		force := pa.PatchOptions.Force != nil && *pa.PatchOptions.Force
		e.mu.Lock()
		e.applied = append(e.applied, appliedStatus{namespace: pa.GetNamespace(), name: pa.GetName(), manager: pa.PatchOptions.FieldManager, force: force, obj: obj})
		e.mu.Unlock()
		return true, &unstructured.Unstructured{Object: obj}, nil
	})
	if prepare != nil {
		prepare(h)
	}
	o := Options{Dynamic: dyn, DNSServers: []string{srv.Addr}, MaxHold: 2 * time.Second,
		TrustedDNS: []netip.Prefix{netip.MustParsePrefix("fd00:172:30::100/128")},
		DNS:        dnsnames.Options{MinTTL: 200 * time.Millisecond, MinBackoff: 100 * time.Millisecond}}
	if opts != nil {
		opts(&o)
	}
	f := New(o)
	e.f = f
	h.Restrict(f.Owns())
	ctx := h.Synced(t, f)
	go f.Run(ctx)
	return e
}

// flows returns the flows of owner in br0's store, as ovs-ofctl text.
func (e *env) flows(owner string) []string {
	st, _ := e.h.Stores[plan.Pod].Get(owner)
	var out []string
	for _, fl := range st.Flows {
		out = append(out, strings.TrimSpace(fl.String()))
	}
	slices.Sort(out)
	return out
}

// waitFlows waits until owner's flows satisfy cond.
func (e *env) waitFlows(owner, what string, cond func([]string) bool) []string {
	e.t.Helper()
	var got []string
	if !featuretest.WaitFor(5*time.Second, func() bool { got = e.flows(owner); return cond(got) }) {
		e.t.Fatalf("%s: %s: flows now:\n%s", owner, what, strings.Join(got, "\n"))
	}
	return got
}

// has reports whether some flow holds every substring.
func has(flows []string, subs ...string) bool {
	for _, f := range flows {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(f, s)
		}
		if ok {
			return true
		}
	}
	return false
}

// want returns the flows Build gives for rules in a namespace with id,
// as text, for comparison.
func (e *env) want(ns string, id uint32, rules ...egressfirewallflows.Rule) []string {
	e.t.Helper()
	block, err := e.f.conj.Get(egressfirewallflows.Owner(ns))
	if err != nil {
		e.t.Fatal(err)
	}
	fs, err := egressfirewallflows.Build(e.f.config(), egressfirewallflows.Namespace{Name: ns, ID: id, ConjBlock: block, Rules: rules})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, fl := range fs {
		out = append(out, strings.TrimSpace(fl.String()))
	}
	slices.Sort(out)
	return out
}

// event waits for a recorded event holding every substring.
func (e *env) event(subs ...string) string {
	e.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-e.h.Events.Events:
			ok := true
			for _, s := range subs {
				ok = ok && strings.Contains(ev, s)
			}
			if ok {
				return ev
			}
		case <-deadline:
			e.t.Fatalf("no event with %q", subs)
		}
	}
}

// noEvent checks that no event is pending.
func (e *env) noEvent() {
	e.t.Helper()
	select {
	case ev := <-e.h.Events.Events:
		e.t.Errorf("unexpected event %q", ev)
	default:
	}
}

// lastApplied waits for a status apply on ns/name holding msg.
func (e *env) lastApplied(ns, name, msg string) appliedStatus {
	e.t.Helper()
	var got appliedStatus
	ok := featuretest.WaitFor(5*time.Second, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for i := len(e.applied) - 1; i >= 0; i-- {
			a := e.applied[i]
			if a.namespace == ns && a.name == name {
				got = a
				st, _ := a.obj["status"].(map[string]any)
				ms, _ := st["messages"].([]any)
				return len(ms) == 1 && strings.Contains(fmt.Sprint(ms[0]), msg)
			}
		}
		return false
	})
	if !ok {
		e.t.Fatalf("no status apply on %s/%s with %q; last: %+v", ns, name, msg, got)
	}
	return got
}

// resource is the client of u's kind in u's namespace.
func (e *env) resource(u *unstructured.Unstructured) dynamic.ResourceInterface {
	gvr := egressfirewall.EgressFirewallGVR
	if u.GetKind() == string(egressfirewall.KindEgressNetworkPolicy) {
		gvr = egressfirewall.EgressNetworkPolicyGVR
	}
	return e.dyn.Resource(gvr).Namespace(u.GetNamespace())
}

func (e *env) create(u *unstructured.Unstructured) {
	e.t.Helper()
	if _, err := e.resource(u).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) update(u *unstructured.Unstructured) {
	e.t.Helper()
	if _, err := e.resource(u).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// rule is a shorthand for an EgressFirewall rule: "Allow 10.0.0.0/8",
// "Deny dns:x.example.com", "Allow nodes:role=infra TCP/6443".
func rule(s string) egressfirewall.EgressFirewallRule {
	parts := strings.Fields(s)
	r := egressfirewall.EgressFirewallRule{Type: egressfirewall.RuleType(parts[0])}
	switch d := parts[1]; {
	case strings.HasPrefix(d, "dns:"):
		r.To.DNSName = strings.TrimPrefix(d, "dns:")
	case strings.HasPrefix(d, "nodes:"):
		sel, err := metav1.ParseToLabelSelector(strings.TrimPrefix(d, "nodes:"))
		if err != nil {
			panic(err)
		}
		r.To.NodeSelector = sel
	default:
		r.To.CIDRSelector = d
	}
	for _, p := range parts[2:] {
		proto, port, _ := strings.Cut(p, "/")
		fp := egressfirewall.EgressFirewallPort{Protocol: proto}
		if port != "" {
			var n int32
			fmt.Sscan(port, &n)
			fp.Port = &n
		}
		r.Ports = append(r.Ports, fp)
	}
	return r
}

var uidSeq int

// ef returns an EgressFirewall of the rules.
func ef(ns, name string, rules ...string) *unstructured.Unstructured {
	uidSeq++
	o := &egressfirewall.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("uid-%d", uidSeq)),
		CreationTimestamp: metav1.NewTime(time.Unix(1700000000+int64(uidSeq), 0))}}
	for _, r := range rules {
		o.Spec.Egress = append(o.Spec.Egress, rule(r))
	}
	return o.Unstructured()
}

// enp returns an EgressNetworkPolicy of the rules, created at the given
// Unix time.
func enp(ns, name string, created int64, rules ...string) *unstructured.Unstructured {
	uidSeq++
	o := &egressfirewall.EgressNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("uid-%d", uidSeq)),
		CreationTimestamp: metav1.NewTime(time.Unix(created, 0))}}
	for _, s := range rules {
		r := rule(s)
		o.Spec.Egress = append(o.Spec.Egress, egressfirewall.EgressNetworkPolicyRule{Type: r.Type, To: egressfirewall.EgressNetworkPolicyPeer{CIDRSelector: r.To.CIDRSelector, DNSName: r.To.DNSName}})
	}
	return o.Unstructured()
}

func testNode(name, ip string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

func testPod(ns, name string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: "node1"}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func pfx(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// dnsReply returns the frame of a DNS reply from server to pod, answering
// name with addrs (A or AAAA by the first address's family).
func dnsReply(t *testing.T, server, pod, name string, ttl uint32, addrs ...string) []byte {
	t.Helper()
	q := new(dns.Msg)
	qt := dns.TypeA
	if len(addrs) > 0 && netip.MustParseAddr(addrs[0]).Is6() {
		qt = dns.TypeAAAA
	}
	q.SetQuestion(dns.Fqdn(name), qt)
	m := new(dns.Msg)
	m.SetReply(q)
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		hdr := dns.RR_Header{Name: dns.Fqdn(name), Class: dns.ClassINET, Ttl: ttl}
		if ip.Is4() {
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: ip.AsSlice()})
		} else {
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()})
		}
	}
	payload, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return flowtest.UDPFrame(t, server, pod, 53, 40000, payload)
}

// kubeSystemID is kube-system's namespace id in the tests.
const kubeSystemID = 0x42

// packetIn returns the DNS learning packet-in of frame, from the patch
// port (2) with reg0 = FromGateway, untracked in the service zone before:
// a reply from a resolver outside the cluster.
func packetIn(frame []byte) feature.PacketIn {
	return packetInFrom(frame, 2, plan.FromGateway, 0, openflow.CtNew|openflow.CtTrk)
}

// fromKubeDNS returns the packet-in of a reply through the cluster DNS
// Service, answered by its pod on this node.
func fromKubeDNS(frame []byte) feature.PacketIn {
	return packetInFrom(frame, 7, plan.FromPod, kubeSystemID, openflow.CtEst|openflow.CtRpl|openflow.CtTrk|openflow.CtSNAT)
}

// packetInFrom returns the DNS learning packet-in of frame as br0 sends
// it: its in_port, PktSource and namespace id in the registers, and the
// service zone's ct_state.
func packetInFrom(frame []byte, port uint32, from plan.Mark, nsID uint32, ct uint32) feature.PacketIn {
	fields := []openflow.Field{openflow.InPort(port), openflow.Reg(0, uint32(from.Value()), 0xffffffff)}
	if nsID != 0 {
		fields = append(fields, openflow.Reg(1, nsID, 0xffffffff))
	}
	fields = append(fields, openflow.CtState(ct, 0xffffffff))
	return feature.PacketIn{Bridge: plan.Pod, Category: plan.PacketInDNS, Msg: &openflow.PacketIn{
		Format: openflow.PacketInFormatNXT2, BufferID: openflow.NoBuffer, TotalLen: uint32(len(frame)),
		Reason: openflow.PacketInAction, Table: uint8(plan.PodEgressFirewall), Data: frame,
		Userdata: []byte{byte(plan.PacketInDNS)},
		Match:    openflow.NewMatch(fields...),
	}}
}

// kubeDNS returns the cluster DNS Service, with uid and ClusterIPs.
func kubeDNS(ns, name string, uid types.UID, clusterIPs ...string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIPs[0], ClusterIPs: clusterIPs, Selector: map[string]string{"k8s-app": "kube-dns"}}}
}

// endpointSlice returns an EndpointSlice of svc's namespace, name and
// addresses (of the first address's family), labelled for svc's name and
// managed by managedBy, owned by svc when owned.
func endpointSlice(svc *corev1.Service, name, managedBy string, owned bool, addrs ...string) *discovery.EndpointSlice {
	sl := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: name, Labels: map[string]string{
			discovery.LabelServiceName: svc.Name, discovery.LabelManagedBy: managedBy}},
		AddressType: discovery.AddressTypeIPv4,
	}
	if len(addrs) > 0 && netip.MustParseAddr(addrs[0]).Is6() {
		sl.AddressType = discovery.AddressTypeIPv6
	}
	if owned {
		sl.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true)}}
	}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{Addresses: []string{a}})
	}
	return sl
}

// enforcedUID waits until namespace ns enforces a policy and returns the
// UID of its object.
func (e *env) enforcedUID(ns string) types.UID {
	e.t.Helper()
	var uid types.UID
	if !featuretest.WaitFor(5*time.Second, func() bool {
		e.f.mu.Lock()
		defer e.f.mu.Unlock()
		if st := e.f.ns[ns]; st != nil && st.enforced != nil {
			uid = st.enforced.Source.UID
			return true
		}
		return false
	}) {
		e.t.Fatalf("namespace %s enforces nothing", ns)
	}
	return uid
}
