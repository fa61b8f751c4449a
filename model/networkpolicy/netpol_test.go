package networkpolicy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The matrix of the upstream Netpol tests: pods a, b and c in namespaces
// x, y and z (labels pod=<name>, ns=<namespace>), all serving on port 80
// (named "serve-80") and 81 (TCP and UDP).
var namespaces = map[string]map[string]string{"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"}}

func matrixPods() map[string]*Pod {
	out := map[string]*Pod{}
	for _, ns := range []string{"x", "y", "z"} {
		for _, name := range []string{"a", "b", "c"} {
			out[ns+"/"+name] = &Pod{Namespace: ns, Name: name, Labels: map[string]string{"pod": name, "ns": ns},
				Ports: []v1.ContainerPort{
					{Name: "serve-80", ContainerPort: 80}, {Name: "serve-81-tcp", ContainerPort: 81},
					{Name: "serve-81-udp", ContainerPort: 81, Protocol: v1.ProtocolUDP},
				}}
		}
	}
	return out
}

func podAddr(ns, name string) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(ns[0] - 'x' + 1), byte(name[0] - 'a' + 1)})
}

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func policy(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func tcp(port intstr.IntOrString) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(v1.ProtocolTCP), Port: &port}
}

// reach renders who reaches whom on protocol/port as a matrix, rows the
// sources (x/a, x/b, ..., z/c), one character per destination: "." for
// allowed, "X" for denied.
func reach(t *testing.T, nps []*networkingv1.NetworkPolicy, proto v1.Protocol, port int32) string {
	t.Helper()
	cl := &Cluster{Namespaces: namespaces}
	for _, np := range nps {
		p, err := Compile(np)
		if err != nil {
			t.Fatal(err)
		}
		cl.Policies = append(cl.Policies, p)
	}
	pods := matrixPods()
	order := []string{"x/a", "x/b", "x/c", "y/a", "y/b", "y/c", "z/a", "z/b", "z/c"}
	var b strings.Builder
	for _, s := range order {
		src := pods[s]
		for _, d := range order {
			dst := pods[d]
			c := Conn{Src: Endpoint{Pod: src, Addr: podAddr(src.Namespace, src.Name)}, Dst: Endpoint{Pod: dst, Addr: podAddr(dst.Namespace, dst.Name)}, Protocol: proto, Port: port}
			if cl.Verdict(c) {
				b.WriteByte('.')
			} else {
				b.WriteByte('X')
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestMatrix(t *testing.T) {
	p80, named := intstr.FromInt32(80), intstr.FromString("serve-80")
	for _, tc := range []struct {
		name  string
		nps   []*networkingv1.NetworkPolicy
		proto v1.Protocol
		port  int32
		want  string
	}{
		{"no policy: all allowed", nil, v1.ProtocolTCP, 80, strings.Repeat(".........\n", 9)},
		{"deny all ingress to x/a", []*networkingv1.NetworkPolicy{policy("x", "deny", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a")})},
			v1.ProtocolTCP, 80, strings.Repeat("X........\n", 9)},
		{"x/a admits its own namespace", []*networkingv1.NetworkPolicy{policy("x", "same-ns", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel()}}}},
		})}, v1.ProtocolTCP, 80, strings.Repeat(".........\n", 3) + strings.Repeat("X........\n", 6)},
		{"pod and namespace selector together: b pods of namespace y", []*networkingv1.NetworkPolicy{policy("x", "and", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b"), NamespaceSelector: sel("ns", "y")}}}},
		})}, v1.ProtocolTCP, 80, strings.Repeat("X........\n", 4) + ".........\n" + strings.Repeat("X........\n", 4)},
		{"the two as separate peers: b pods of x, or any pod of y", []*networkingv1.NetworkPolicy{policy("x", "or", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: sel("pod", "b")}, {NamespaceSelector: sel("ns", "y")}}}},
		})}, v1.ProtocolTCP, 80, "X........\n.........\nX........\n" + strings.Repeat(".........\n", 3) + strings.Repeat("X........\n", 3)},
		{"named port: allowed on 80", []*networkingv1.NetworkPolicy{policy("x", "named", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcp(named)}}},
		})}, v1.ProtocolTCP, 80, strings.Repeat(".........\n", 9)},
		{"named port: not 81", []*networkingv1.NetworkPolicy{policy("x", "named", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcp(named)}}},
		})}, v1.ProtocolTCP, 81, strings.Repeat("X........\n", 9)},
		{"port 80 TCP does not allow UDP 80", []*networkingv1.NetworkPolicy{policy("x", "tcp80", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcp(p80)}}},
		})}, v1.ProtocolUDP, 80, strings.Repeat("X........\n", 9)},
		{"egress rules without policyTypes isolate both ways: x/a reaches namespace z only, and nobody reaches it", []*networkingv1.NetworkPolicy{policy("x", "egress", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "z")}}}},
		})}, v1.ProtocolTCP, 80, "XXXXXX...\n" + strings.Repeat("X........\n", 8)},
		{"policyTypes Egress alone: x/a reaches namespace z only", []*networkingv1.NetworkPolicy{policy("x", "egress", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "z")}}}},
		})}, v1.ProtocolTCP, 80, "XXXXXX...\n" + strings.Repeat(".........\n", 8)},
		{"union: two policies on x/a, each admitting one source", []*networkingv1.NetworkPolicy{
			policy("x", "from-b", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}}}}),
			policy("x", "from-c", networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "c")}}}}}),
		}, v1.ProtocolTCP, 80, "X........\n.........\n.........\n" + strings.Repeat("X........\n", 6)},
		{"ipBlock with except: namespace y but y/b", []*networkingv1.NetworkPolicy{policy("x", "block", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
				CIDR: "10.244.2.0/24", Except: []string{"10.244.2.2/32"}}}}}},
		})}, v1.ProtocolTCP, 80, strings.Repeat("X........\n", 3) + ".........\nX........\n.........\n" + strings.Repeat("X........\n", 3)},
		{"endPort range 80-90", []*networkingv1.NetworkPolicy{policy("x", "range", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "a"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(v1.ProtocolTCP),
				Port: &intstr.IntOrString{IntVal: 79}, EndPort: ptr.To(int32(90))}}}},
		})}, v1.ProtocolTCP, 81, strings.Repeat(".........\n", 9)},
		{"an Egress-only policy leaves ingress open", []*networkingv1.NetworkPolicy{policy("x", "egress-only", networkingv1.NetworkPolicySpec{
			PodSelector: *sel("pod", "b"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		})}, v1.ProtocolTCP, 80, ".........\nXXXXXXXXX\n" + strings.Repeat(".........\n", 7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reach(t, tc.nps, tc.proto, tc.port); got != tc.want {
				t.Errorf("reachability (rows: sources x/a..z/c; columns: destinations):\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestHostAndHostNetwork(t *testing.T) {
	deny, err := Compile(policy("x", "deny-all", networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}))
	if err != nil {
		t.Fatal(err)
	}
	cl := &Cluster{Namespaces: namespaces, Policies: []*Policy{deny}}
	pod := matrixPods()["x/a"]
	hostnet := &Pod{Namespace: "x", Name: "h", HostNetwork: true}
	node := netip.MustParseAddr("172.18.0.3")
	for _, tc := range []struct {
		name string
		c    Conn
		want bool
	}{
		{"the node's host reaches an isolated pod", Conn{Src: Endpoint{Host: true, Addr: node}, Dst: Endpoint{Pod: pod}, Protocol: v1.ProtocolTCP, Port: 80}, true},
		{"another address does not", Conn{Src: Endpoint{Addr: netip.MustParseAddr("192.0.2.1")}, Dst: Endpoint{Pod: pod}, Protocol: v1.ProtocolTCP, Port: 80}, false},
		{"the isolated pod cannot leave", Conn{Src: Endpoint{Pod: pod}, Dst: Endpoint{Addr: netip.MustParseAddr("192.0.2.1")}, Protocol: v1.ProtocolTCP, Port: 80}, false},
		{"a host-network pod is not selected", Conn{Src: Endpoint{Pod: hostnet, Addr: node}, Dst: Endpoint{Addr: netip.MustParseAddr("192.0.2.1")}, Protocol: v1.ProtocolTCP, Port: 80}, true},
	} {
		if got := cl.Verdict(tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCompileNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		spec  networkingv1.NetworkPolicySpec
		field string
	}{
		{networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Sideways"}}, "spec.policyTypes[0]"},
		{networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}}}}}}, "spec.ingress[0].from[0].ipBlock.cidr"},
		{networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{}}}}}, "spec.egress[0].to[0]"},
		{networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &intstr.IntOrString{IntVal: 90}, EndPort: ptr.To(int32(80))}}}}}, "spec.ingress[0].ports[0].endPort"},
		{networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(v1.Protocol("ICMP"))}}}}}, "spec.ingress[0].ports[0].protocol"},
		{networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}, "spec.podSelector"},
	} {
		_, err := Compile(policy("x", "bad", tc.spec))
		var pe *Error
		if !errors.As(err, &pe) || pe.Field != tc.field || !strings.Contains(err.Error(), "NetworkPolicy x/bad: "+tc.field) {
			t.Errorf("error %v, want one naming %s", err, tc.field)
		}
	}
}

// FuzzCompile: whatever the API object holds, Compile returns a policy or
// an error, and a policy's verdicts do not panic.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{}}}`,
		`{"spec":{"podSelector":{"matchLabels":{"pod":"a"}},"ingress":[{"from":[{"podSelector":{},"namespaceSelector":{"matchLabels":{"ns":"y"}}},{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.1.0.0/16"]}}],"ports":[{"port":"serve-80"},{"protocol":"UDP","port":53,"endPort":60}]}],"policyTypes":["Ingress","Egress"]}}`,
		`{"spec":{"egress":[{"to":[{"ipBlock":{"cidr":"::/0"}}],"ports":[{"port":0}]}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var np networkingv1.NetworkPolicy
		if json.Unmarshal(data, &np) != nil {
			return
		}
		np.Namespace = "x"
		p, err := Compile(&np)
		if err != nil {
			return
		}
		cl := &Cluster{Namespaces: namespaces, Policies: []*Policy{p}}
		pods := matrixPods()
		for _, proto := range []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP} {
			cl.Verdict(Conn{Src: Endpoint{Pod: pods["y/b"], Addr: podAddr("y", "b")}, Dst: Endpoint{Pod: pods["x/a"], Addr: podAddr("x", "a")}, Protocol: proto, Port: 80})
			cl.Verdict(Conn{Src: Endpoint{Pod: pods["x/a"], Addr: podAddr("x", "a")}, Dst: Endpoint{Addr: netip.MustParseAddr("2001:db8::1")}, Protocol: proto, Port: 53})
		}
	})
}
