package networkpolicyfeature

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/model/networkpolicy"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// The matrix of the upstream Netpol tests: pods a, b and c in namespaces
// x, y and z (labels pod=<name>, and ns=<namespace> on the namespace),
// serving TCP 80 (named serve-80) and 81, UDP 81 (serve-81-udp).
var matrixNS = []string{"x", "y", "z"}
var matrixNames = []string{"a", "b", "c"}

func matrixAddr(ns, name string) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(ns[0]-'x') + 1, byte(name[0]-'a') + 1})
}

func matrixAddr6(ns, name string) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd00:10:244:%d::%d", ns[0]-'x'+1, name[0]-'a'+1))
}

// matrixPort is the br0 port of a local matrix pod: 1..9.
func matrixPort(ns, name string) uint32 { return uint32(ns[0]-'x')*3 + uint32(name[0]-'a') + 1 }

func matrixPod(ns, name string, local bool) *Pod {
	p := &Pod{Namespace: ns, Name: name, Labels: map[string]string{"pod": name},
		IPs: []netip.Addr{matrixAddr(ns, name), matrixAddr6(ns, name)}, Local: local,
		Ports: []v1.ContainerPort{
			{Name: "serve-80", ContainerPort: 80}, {Name: "serve-81-tcp", ContainerPort: 81},
			{Name: "serve-81-udp", ContainerPort: 81, Protocol: v1.ProtocolUDP},
		}}
	if local {
		p.OFPort = matrixPort(ns, name)
	}
	return p
}

func nodeConfig() networkpolicyflows.Config {
	return networkpolicyflows.Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")},
		Masquerade: conntrack.DefaultPlan()}
}

// randomPolicy returns a policy over the matrix's labels.
func randomPolicy(rng *rand.Rand, name string) *networkingv1.NetworkPolicy {
	pick := func(n int) int { return rng.IntN(n) }
	podSel := func() *metav1.LabelSelector {
		switch pick(4) {
		case 0:
			return &metav1.LabelSelector{}
		case 1:
			return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "pod", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}
		}
		return &metav1.LabelSelector{MatchLabels: map[string]string{"pod": matrixNames[pick(3)]}}
	}
	nsSel := func() *metav1.LabelSelector {
		if pick(3) == 0 {
			return &metav1.LabelSelector{}
		}
		return &metav1.LabelSelector{MatchLabels: map[string]string{"ns": matrixNS[pick(3)]}}
	}
	peers := func() []networkingv1.NetworkPolicyPeer {
		var out []networkingv1.NetworkPolicyPeer
		for range pick(3) {
			switch pick(5) {
			case 0:
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: podSel()})
			case 1:
				out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: nsSel()})
			case 2:
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: podSel(), NamespaceSelector: nsSel()})
			case 3:
				out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{"10.244.2.0/24"}}})
			default:
				a := matrixAddr(matrixNS[pick(3)], matrixNames[pick(3)])
				out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: a.String() + "/32"}})
			}
		}
		return out
	}
	ports := func() []networkingv1.NetworkPolicyPort {
		var out []networkingv1.NetworkPolicyPort
		for range pick(3) {
			port := func(p intstr.IntOrString, proto v1.Protocol) networkingv1.NetworkPolicyPort {
				return networkingv1.NetworkPolicyPort{Port: &p, Protocol: ptr.To(proto)}
			}
			switch pick(6) {
			case 0:
				out = append(out, port(intstr.FromInt32(80), v1.ProtocolTCP))
			case 1:
				out = append(out, port(intstr.FromInt32(81), v1.ProtocolUDP))
			case 2:
				out = append(out, port(intstr.FromString("serve-80"), v1.ProtocolTCP))
			case 3:
				out = append(out, port(intstr.FromString("serve-81-udp"), v1.ProtocolUDP))
			case 4:
				p := port(intstr.FromInt32(79), v1.ProtocolTCP)
				p.EndPort = ptr.To(int32(81))
				out = append(out, p)
			default:
				out = append(out, networkingv1.NetworkPolicyPort{Protocol: ptr.To(v1.ProtocolUDP)})
			}
		}
		return out
	}
	spec := networkingv1.NetworkPolicySpec{PodSelector: *podSel()}
	for range pick(3) {
		spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: peers(), Ports: ports()})
	}
	for range pick(3) {
		spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{To: peers(), Ports: ports()})
	}
	switch pick(4) {
	case 0:
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 1:
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 2:
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: matrixNS[pick(3)], Name: name}, Spec: spec}
}

func mustCompile(t *testing.T, np *networkingv1.NetworkPolicy) *networkpolicy.Policy {
	t.Helper()
	p, err := networkpolicy.Compile(np)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mirror keeps every owner's flows as a feature would, from TakeDirty and
// Flows.
type mirror map[string][]string

func (m mirror) sync(t *testing.T, x *Index) {
	t.Helper()
	for _, o := range x.TakeDirty() {
		fs, err := x.Flows(o)
		if err != nil {
			t.Fatalf("owner %s: %v", o, err)
		}
		if len(fs) == 0 {
			delete(m, o)
			continue
		}
		var lines []string
		for _, f := range fs {
			lines = append(lines, f.String())
		}
		m[o] = lines
	}
}

var (
	conjRE    = regexp.MustCompile(`(conjunction\(|conj_id=)(\d+)`)
	conjActRE = regexp.MustCompile(`conjunction\([^)]*\)`)
	laneRE    = regexp.MustCompile(`priority=\d+,`)
)

// normal renders the mirror with conjunction ids replaced by the rule
// they are (policy, direction, position), so that two indexes that
// allocated ids in another order compare equal.
func (m mirror) normal(x *Index) string {
	names := map[string]string{}
	for _, st := range x.policies {
		for i, r := range st.rules {
			names[fmt.Sprint(r.id)] = fmt.Sprintf("%s#%s%d", st.key, r.dir, i)
		}
	}
	var out []string
	// The clause flows of one match, across lanes, as one set of actions.
	clauses := map[string]map[string]bool{}
	for o, lines := range m {
		for _, l := range lines {
			l = conjRE.ReplaceAllStringFunc(l, func(s string) string {
				sub := conjRE.FindStringSubmatch(s)
				return sub[1] + names[sub[2]]
			})
			i := strings.Index(l, "actions=conjunction")
			if i < 0 {
				out = append(out, o+": "+l)
				continue
			}
			k := o + ": " + laneRE.ReplaceAllString(l[:i], "priority=lane,")
			if clauses[k] == nil {
				clauses[k] = map[string]bool{}
			}
			for _, a := range conjActRE.FindAllString(l[i:], -1) {
				clauses[k][a] = true
			}
		}
	}
	for k, acts := range clauses {
		out = append(out, k+"actions="+strings.Join(slices.Sorted(maps.Keys(acts)), ","))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// state is what the index was told last, to build a fresh one from it.
type state struct {
	pods     map[string]*Pod
	ns       map[string]map[string]string
	policies map[string]*networkpolicy.Policy
}

func (s *state) fresh(t *testing.T) (*Index, mirror) {
	x := NewIndex(nodeConfig())
	// Another order than the incremental one: policies first.
	for _, k := range slices.Sorted(maps.Keys(s.policies)) {
		x.SetPolicy(k, s.policies[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.pods)) {
		x.SetPod(k, s.pods[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.ns)) {
		x.SetNamespace(k, s.ns[k])
	}
	m := mirror{}
	m.sync(t, x)
	return x, m
}

// TestIndexIncremental applies random changes one at a time and checks,
// after each, that the flows kept by following the dirty owners equal the
// flows of an index built afresh from the same state.
func TestIndexIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	x := NewIndex(nodeConfig())
	m := mirror{}
	s := &state{pods: map[string]*Pod{}, ns: map[string]map[string]string{}, policies: map[string]*networkpolicy.Policy{}}
	for step := range 400 {
		var what string
		switch rng.IntN(4) {
		case 0:
			ns, name := matrixNS[rng.IntN(3)], matrixNames[rng.IntN(3)]
			key := ns + "/" + name
			if rng.IntN(4) == 0 {
				what = "delete pod " + key
				delete(s.pods, key)
				x.SetPod(key, nil)
				break
			}
			p := matrixPod(ns, name, rng.IntN(3) > 0)
			p.Labels["pod"] = matrixNames[rng.IntN(3)]
			if rng.IntN(5) == 0 {
				p.IPs = p.IPs[:1]
			}
			what = fmt.Sprintf("pod %s labels %v local %v", key, p.Labels, p.Local)
			s.pods[key] = p
			x.SetPod(key, p)
		case 1:
			ns := matrixNS[rng.IntN(3)]
			lbl := map[string]string{"ns": matrixNS[rng.IntN(3)]}
			if rng.IntN(4) == 0 {
				lbl = nil
				delete(s.ns, ns)
			} else {
				s.ns[ns] = lbl
			}
			what = fmt.Sprintf("namespace %s labels %v", ns, lbl)
			x.SetNamespace(ns, lbl)
		default:
			name := fmt.Sprintf("p%d", rng.IntN(6))
			np := randomPolicy(rng, name)
			key := np.Namespace + "/" + name
			// One name per namespace at a time, as in the API.
			for k := range s.policies {
				if strings.HasSuffix(k, "/"+name) && k != key {
					delete(s.policies, k)
					x.SetPolicy(k, nil)
				}
			}
			if rng.IntN(4) == 0 {
				what = "delete policy " + key
				delete(s.policies, key)
				x.SetPolicy(key, nil)
				break
			}
			what = "policy " + key
			p := mustCompile(t, np)
			s.policies[key] = p
			x.SetPolicy(key, p)
		}
		m.sync(t, x)
		fx, fm := s.fresh(t)
		if got, want := m.normal(x), fm.normal(fx); got != want {
			t.Fatalf("step %d (%s): incremental flows differ from a fresh index's:\n--- incremental\n%s\n--- fresh\n%s", step, what, got, want)
		}
	}
}

func TestSubtract(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		cidr   string
		except []string
		want   string
	}{
		{"10.0.0.0/8", nil, "10.0.0.0/8"},
		{"10.0.0.0/8", []string{"10.0.0.0/8"}, ""},
		{"10.0.0.0/8", []string{"0.0.0.0/0"}, ""},
		{"10.0.0.0/8", []string{"192.168.0.0/16"}, "10.0.0.0/8"},
		{"10.244.0.0/16", []string{"10.244.2.0/24"}, "10.244.0.0/23 10.244.3.0/24 10.244.4.0/22 10.244.8.0/21 10.244.16.0/20 10.244.32.0/19 10.244.64.0/18 10.244.128.0/17"},
		{"10.0.0.0/30", []string{"10.0.0.1/32", "10.0.0.2/32"}, "10.0.0.0/32 10.0.0.3/32"},
		{"fd00::/126", []string{"fd00::3/128"}, "fd00::/127 fd00::2/128"},
	}
	for _, tc := range tests {
		var ex []netip.Prefix
		for _, e := range tc.except {
			ex = append(ex, p(e))
		}
		var got []string
		for _, q := range Subtract(p(tc.cidr), ex) {
			got = append(got, q.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s except %v = %v, want %s", tc.cidr, tc.except, got, tc.want)
		}
	}
}

// openflowFlows returns every owner's flows.
func allFlows(t *testing.T, x *Index, m mirror) []openflow.Flow {
	t.Helper()
	var out []openflow.Flow
	for _, o := range slices.Sorted(maps.Keys(m)) {
		fs, err := x.Flows(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fs...)
	}
	return out
}

// TestIndexAgainstVerdict installs the index's flows for the matrix, every
// pod local, in a real Open vSwitch, and traces a first packet from every
// pod to every other pod, on TCP 80 and UDP 81: the flows must allow
// exactly what netpol's truth table (Cluster.Verdict) allows, for the
// fixed cases of the upstream tests and for random policy sets.
func TestIndexAgainstVerdict(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	nsLabels := map[string]map[string]string{"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"}}
	rng := rand.New(rand.NewPCG(3, 5))
	var sets [][]*networkingv1.NetworkPolicy
	deny := func(ns string, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deny"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: types}}
	}
	sets = append(sets,
		[]*networkingv1.NetworkPolicy{deny("x", networkingv1.PolicyTypeIngress)},
		[]*networkingv1.NetworkPolicy{deny("y", networkingv1.PolicyTypeEgress)},
		[]*networkingv1.NetworkPolicy{deny("x", networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress), randomPolicy(rng, "r")},
		// Egress to a named port anywhere: every pod that has it.
		[]*networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: "named"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{
					{Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(intstr.FromString("serve-80"))}}}}}}},
		// Ingress on a range and a named port, from a namespace.
		[]*networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "z", Name: "range"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}}}},
					Ports: []networkingv1.NetworkPolicyPort{
						{Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(70)), EndPort: ptr.To(int32(80))},
						{Protocol: ptr.To(v1.ProtocolUDP), Port: ptr.To(intstr.FromString("serve-81-udp"))}}}}}}},
	)
	for i := range 6 {
		var set []*networkingv1.NetworkPolicy
		for j := range 1 + rng.IntN(3) {
			set = append(set, randomPolicy(rng, fmt.Sprintf("r%d-%d", i, j)))
		}
		sets = append(sets, set)
	}
	type probe struct {
		proto v1.Protocol
		port  int32
	}
	probes := []probe{{v1.ProtocolTCP, 80}, {v1.ProtocolUDP, 81}}
	for i, set := range sets {
		x := NewIndex(nodeConfig())
		cl := &networkpolicy.Cluster{Namespaces: nsLabels}
		pods := map[string]*Pod{}
		for _, ns := range matrixNS {
			x.SetNamespace(ns, nsLabels[ns])
			for _, name := range matrixNames {
				p := matrixPod(ns, name, true)
				pods[p.key()] = p
				x.SetPod(p.key(), p)
			}
		}
		var desc []string
		for _, np := range set {
			p := mustCompile(t, np)
			cl.Policies = append(cl.Policies, p)
			x.SetPolicy(np.Namespace+"/"+np.Name, p)
			desc = append(desc, fmt.Sprintf("%s/%s %+v", np.Namespace, np.Name, np.Spec))
		}
		m := mirror{}
		m.sync(t, x)
		br := fmt.Sprintf("br%d", i)
		if _, err := sb.Vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=netdev",
			"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
			t.Fatal(err)
		}
		flowtest.InstallAndCompare(t, sb, br, append(verdictFrame(), allFlows(t, x, m)...))
		var wrong []string
		for _, src := range slices.Sorted(maps.Keys(pods)) {
			for _, dst := range slices.Sorted(maps.Keys(pods)) {
				if src == dst {
					continue // a pod reaches its own address without br0
				}
				s, d := pods[src], pods[dst]
				for _, pr := range probes {
					want := cl.Verdict(networkpolicy.Conn{
						Src:      networkpolicy.Endpoint{Pod: &networkpolicy.Pod{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Ports: s.Ports}, Addr: s.IPs[0]},
						Dst:      networkpolicy.Endpoint{Pod: &networkpolicy.Pod{Namespace: d.Namespace, Name: d.Name, Labels: d.Labels, Ports: d.Ports}, Addr: d.IPs[0]},
						Protocol: pr.proto, Port: pr.port})
					l4 := "tcp"
					if pr.proto == v1.ProtocolUDP {
						l4 = "udp"
					}
					flow := fmt.Sprintf("in_port=%d,%s,nw_src=%s,nw_dst=%s,%s_src=40000,%s_dst=%d", s.OFPort, l4, s.IPs[0], d.IPs[0], l4, l4, pr.port)
					if got := traceAllows(t, sb, br, flow); got != want {
						wrong = append(wrong, fmt.Sprintf("%s -> %s %s/%d: flows allow %v, the truth table %v", src, dst, l4, pr.port, got, want))
					}
				}
			}
		}
		if len(wrong) > 0 {
			t.Errorf("set %d:\n  %s\n%s", i, strings.Join(desc, "\n  "), strings.Join(wrong, "\n"))
		}
	}
}

// verdictFrame surrounds the two tables: everything from table 0 to 45,
// 50 to 65, and 70 marks reg9=1 (every pod is local, so 45 commits
// nothing and 65 sees the connection state).
func verdictFrame() []openflow.Flow {
	mark := []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
		openflow.SetField{Field: openflow.Reg(9, 1, 0xffffffff)}}}}
	f := func(t plan.TableID, ins []openflow.Instruction) openflow.Flow {
		return openflow.Flow{Table: uint8(t), Match: openflow.NewMatch(), Instructions: ins}
	}
	return []openflow.Flow{
		f(plan.PodClassifier, []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodEgressPolicy)}}),
		f(plan.PodEgressFirewall, []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodIngressPolicy)}}),
		f(plan.PodLocalDelivery, mark),
	}
}

// traceAllows traces the first packet of a new connection and reports
// whether it reached table 70.
func traceAllows(t *testing.T, sb *ovs.Sandbox, br, flow string) bool {
	t.Helper()
	out, err := sb.Appctl("ofproto/trace", br, flowtest.NewConnTrace(flow))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Final flow:") {
			return strings.Contains(l, "reg9=0x1")
		}
	}
	t.Fatalf("trace of %s: no final flow:\n%s", flow, out)
	return false
}
