package servicefeature

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"nodeflow/host/nat"
	"nodeflow/host/nsrun"
	"nodeflow/internal/testutil/featuretest"
)

// fakeNAT records what the service proxy asks of the applier.
type fakeNAT struct {
	calls []string
	held  nat.Ruleset
	fail  error
}

func (f *fakeNAT) Replace(rs nat.Ruleset) error { return f.record("replace", rs) }

func (f *fakeNAT) Apply(rs nat.Ruleset) error { return f.record("apply", rs) }

// record notes the call and holds rs unless the fake fails.
func (f *fakeNAT) record(call string, rs nat.Ruleset) error {
	f.calls = append(f.calls, call)
	if f.fail != nil {
		return f.fail
	}
	f.held = rs
	return nil
}

func natRule(daddr string, proto uint8, port uint16, to string, toPort uint16) nat.Rule {
	return nat.Rule{Key: nat.Key{Daddr: netip.MustParseAddr(daddr), Proto: proto, Port: port},
		To: netip.AddrPortFrom(netip.MustParseAddr(to), toPort)}
}

func TestServiceProxyHostNATRules(t *testing.T) {
	dual := webService("10.96.0.10")
	dual.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:10:96::a"}
	dual.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
	dual.Spec.Ports = append(dual.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP})
	dual.Spec.ExternalIPs = []string{"172.30.0.200", "fd00:172:30::200"}

	lb := webService("10.96.0.20")
	lb.Name = "lb"
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Spec.Ports = []v1.ServicePort{{Name: "s", Port: 9999, NodePort: 31999, Protocol: v1.ProtocolSCTP}}
	lb.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "172.30.0.201"}, {IP: "fd00:172:30::201"}}

	plain := webService("10.96.0.30")
	plain.Name = "plain"
	plain.Spec.Type = v1.ServiceTypeClusterIP
	plain.Spec.Ports[0].NodePort = 0

	tests := []struct {
		name    string
		nodeIPs []string
		svcs    []*v1.Service
		want    nat.Ruleset
	}{
		{name: "clusterip only: nothing", nodeIPs: []string{"172.30.0.11/24"}, svcs: []*v1.Service{plain}},
		{
			name:    "dual-stack service on a dual-stack node",
			nodeIPs: []string{"172.30.0.11/24", "fd00:172:30::11/64"},
			svcs:    []*v1.Service{dual},
			want: nat.Ruleset{
				V4: []nat.Rule{
					natRule("172.30.0.11", nat.ProtoTCP, 30080, "10.96.0.10", 80),
					natRule("172.30.0.11", nat.ProtoUDP, 30053, "10.96.0.10", 53),
					natRule("172.30.0.200", nat.ProtoTCP, 80, "10.96.0.10", 80),
					natRule("172.30.0.200", nat.ProtoUDP, 53, "10.96.0.10", 53),
				},
				V6: []nat.Rule{
					natRule("fd00:172:30::11", nat.ProtoTCP, 30080, "fd00:10:96::a", 80),
					natRule("fd00:172:30::11", nat.ProtoUDP, 30053, "fd00:10:96::a", 53),
					natRule("fd00:172:30::200", nat.ProtoTCP, 80, "fd00:10:96::a", 80),
					natRule("fd00:172:30::200", nat.ProtoUDP, 53, "fd00:10:96::a", 53),
				},
			},
		},
		{
			// The IPv6 ingress IP has no ClusterIP of its family: the proxy
			// drops it, and the node's IPv6 address gets no node port.
			name:    "single-stack load balancer, sctp",
			nodeIPs: []string{"172.30.0.11/24", "fd00:172:30::11/64"},
			svcs:    []*v1.Service{lb, plain},
			want: nat.Ruleset{V4: []nat.Rule{
				natRule("172.30.0.11", nat.ProtoSCTP, 31999, "10.96.0.20", 9999),
				natRule("172.30.0.201", nat.ProtoSCTP, 9999, "10.96.0.20", 9999),
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testServiceProxy(t)
			n := featuretest.DefaultNode()
			n.IPs = nil
			for _, s := range tt.nodeIPs {
				n.IPs = append(n.IPs, netip.MustParsePrefix(s))
			}
			testHost(p).SetNode(n)
			for _, s := range tt.svcs {
				p.svcs.Record(nil, s)
			}
			if err := p.sync(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			if got := p.hostNATRules(); !got.Equal(tt.want) {
				t.Errorf("rules:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// TestServiceProxyHostNATApplies checks when the proxy programs the rules:
// a replace at the first sync, element updates on changes, nothing when
// nothing changed, and a failure that is counted, never fails the sync, and
// is retried with a replace.
func TestServiceProxyHostNATApplies(t *testing.T) {
	p := testServiceProxy(t)
	f := &fakeNAT{}
	p.hostNAT.applier = f
	ctx := context.Background()
	svc := webService("10.96.0.10")
	p.svcs.Record(nil, svc)
	if err := p.sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	want := nat.Ruleset{V4: []nat.Rule{natRule("172.30.0.11", nat.ProtoTCP, 30080, "10.96.0.10", 80)}}
	if !slices.Equal(f.calls, []string{"replace"}) || !f.held.Equal(want) {
		t.Fatalf("first sync: calls %v, held %v; want one replace with %v", f.calls, f.held, want)
	}
	if v := testutil.ToFloat64(p.hostNAT.rules); v != 1 {
		t.Errorf("nodeflow_host_nat_rules %v, want 1", v)
	}

	// Endpoints change: the rules do not, nothing is sent.
	p.eps.Record(nil, webSlice("10.244.2.5"))
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 1 {
		t.Fatalf("calls %v after an endpoint change, want none more", f.calls)
	}

	// An external IP appears: an update.
	next := svc.DeepCopy()
	next.Spec.ExternalIPs = []string{"172.30.0.200"}
	p.svcs.Record(svc, next)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.calls, []string{"replace", "apply"}) || f.held.Len() != 2 {
		t.Fatalf("calls %v, held %v; want an apply of two rules", f.calls, f.held)
	}

	// The kernel refuses: counted, the sync succeeds, the next one replaces.
	f.fail = errors.New("netlink: operation not permitted")
	last := next.DeepCopy()
	last.Spec.Ports[0].NodePort = 30081
	p.svcs.Record(next, last)
	if err := p.sync(ctx, false); err != nil {
		t.Fatalf("sync failed with the host NAT: %v", err)
	}
	if v := testutil.ToFloat64(p.hostNAT.errs); v != 1 {
		t.Errorf("nodeflow_host_nat_errors_total %v, want 1", v)
	}
	if names := p.servicePorts(); len(names) != 1 {
		t.Errorf("service ports %v: the flows must not depend on the host NAT", names)
	}
	f.fail = nil
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := f.calls[len(f.calls)-1]; got != "replace" || !f.held.Equal(p.hostNATRules()) ||
		f.held.V4[0].Port != 30081 {
		t.Errorf("after a failure: calls %v, held %v; want a replace with node port 30081", f.calls, f.held)
	}

	// The service goes: the rules go too.
	p.svcs.Record(last, nil)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if f.held.Len() != 0 {
		t.Errorf("after the service left: held %v, want nothing", f.held)
	}
}

// TestServiceProxyHostNATFollowsBuiltPorts: a service that wants another's
// external IP and port gets br0's flows for the rest (its own node port)
// and the host DNAT for that rest; the contested address stays the first
// service's in both, so the host reaches what br0 load-balances.
func TestServiceProxyHostNATFollowsBuiltPorts(t *testing.T) {
	p := testServiceProxy(t)
	f := &fakeNAT{}
	p.hostNAT.applier = f
	a := webService("10.96.0.10")
	a.Spec.ExternalIPs = []string{"172.30.0.200"}
	b := a.DeepCopy()
	b.Name, b.Spec.ClusterIP, b.Spec.ClusterIPs = "zeta", "10.96.0.99", []string{"10.96.0.99"}
	b.Spec.Ports[0].NodePort = 30099
	p.svcs.Record(nil, a)
	p.svcs.Record(nil, b)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	want := nat.Ruleset{V4: []nat.Rule{
		natRule("172.30.0.11", nat.ProtoTCP, 30080, "10.96.0.10", 80),
		natRule("172.30.0.11", nat.ProtoTCP, 30099, "10.96.0.99", 80),
		natRule("172.30.0.200", nat.ProtoTCP, 80, "10.96.0.10", 80),
	}}
	if !f.held.Equal(want) {
		t.Errorf("held %v, want %v", f.held, want)
	}

	// The other way round: zeta holds the address first, and web, which
	// comes first by name, comes second in time. The host follows br0.
	p.svcs.Record(a, nil)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	p.svcs.Record(nil, a)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	want = nat.Ruleset{V4: []nat.Rule{
		natRule("172.30.0.11", nat.ProtoTCP, 30080, "10.96.0.10", 80),
		natRule("172.30.0.11", nat.ProtoTCP, 30099, "10.96.0.99", 80),
		natRule("172.30.0.200", nat.ProtoTCP, 80, "10.96.0.99", 80),
	}}
	if !f.held.Equal(want) {
		t.Errorf("zeta first: held %v, want %v", f.held, want)
	}
}

// TestRemoveHostNAT: an agent started with the service proxy off removes
// the tables an earlier agent left, in its own network namespace.
func TestRemoveHostNAT(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
			t.Fatal("needs root for a network namespace")
		}
		t.Skip("needs root for a network namespace")
	}
	name := fmt.Sprintf("nf-ctl-hostnat-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	defer func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del: %v: %s", err, out)
		}
	}()
	path := "/run/netns/" + name
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ap := nat.NewApplier(nat.Options{NetNS: int(f.Fd())})
	left := nat.Ruleset{V4: []nat.Rule{natRule("172.30.0.11", nat.ProtoTCP, 30080, "10.96.0.10", 80)}}
	if err := ap.Replace(left); err != nil {
		if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
			t.Fatal(err)
		}
		t.Skipf("no nf_tables: %v", err)
	}
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	if err := nsrun.Do(path, func() error { RemoveHostNAT(log); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, found, err := ap.Read(); err != nil || found {
		t.Fatalf("after removeHostNAT: tables found %v (%v), want none", found, err)
	}
}
