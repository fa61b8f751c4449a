package networkpolicyfeature

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/model/networkpolicy"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// The benchmark cluster: 1,000 namespaces of 10 pods (10,000 pods, one in
// every 50 on this node: 200 local pods, as on one node of 50), and
// perNS policies in each (5: 5,000 policies). Policy j of a namespace
// selects app=j (its two pods) and admits, on TCP 8080 and a named port,
// app=j+1 of its own namespace, 10.0.0.0/8 less 10.1.0.0/16, and the pods
// labelled role=scraper of every namespace labelled team=ops; the first
// policy of the first 100 namespaces also admits role=monitor pods of the
// team=ops namespaces (the 100 policies a monitor pod's label moves it in
// and out of). Policies 0 and 1 also limit the egress of their pods to
// their namespace and to UDP 53 anywhere. Every tenth namespace is
// team=ops; one of its pods is role=scraper.
const (
	benchNamespaces = 1000
	benchPodsPerNS  = 10
	benchPolicies   = 5
	benchLocalEvery = 50
)

func benchPodAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(128 + i>>16), byte(i >> 8), byte(i)})
}

func benchPod(ns, i int) *Pod {
	n := ns*benchPodsPerNS + i
	p := &Pod{Namespace: fmt.Sprintf("ns%04d", ns), Name: fmt.Sprintf("p%d", i),
		Labels: map[string]string{"app": fmt.Sprint(i / 2)}, IPs: []netip.Addr{benchPodAddr(n)},
		Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}}}
	if ns%10 == 0 && i == 9 {
		p.Labels["role"] = "scraper"
	}
	if n%benchLocalEvery == 0 {
		p.Local, p.OFPort = true, uint32(10+n/benchLocalEvery)
	}
	return p
}

func benchPolicy(ns, j int) *networkingv1.NetworkPolicy {
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint(j)}},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint((j + 1) % benchPolicies)}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(8080))}, {Port: ptr.To(intstr.FromString("metrics"))}}},
			{From: []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ops"}},
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "scraper"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}}},
		},
	}
	if j == 0 && ns < 100 {
		spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ops"}},
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "monitor"}}}}})
	}
	if j < 2 {
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		spec.Egress = []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}},
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(v1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))}}},
		}
	}
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%04d", ns), Name: fmt.Sprintf("np%d", j)}, Spec: spec}
}

// benchIndex builds the benchmark cluster's index and every owner's flows
// in a store, as the feature's Sync does.
func benchIndex(tb testing.TB, perNS int) (*Index, *reconcile.Store, int) {
	x := NewIndex(networkpolicyflows.Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}})
	for ns := range benchNamespaces {
		lbl := map[string]string{}
		if ns%10 == 0 {
			lbl["team"] = "ops"
		}
		x.SetNamespace(fmt.Sprintf("ns%04d", ns), lbl)
	}
	for ns := range benchNamespaces {
		for j := range perNS {
			np := benchPolicy(ns, j)
			p, err := networkpolicy.Compile(np)
			if err != nil {
				tb.Fatal(err)
			}
			x.SetPolicy(np.Namespace+"/"+np.Name, p)
		}
	}
	for ns := range benchNamespaces {
		for i := range benchPodsPerNS {
			p := benchPod(ns, i)
			x.SetPod(p.key(), p)
		}
	}
	s := reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod})
	flows := 0
	for _, o := range x.TakeDirty() {
		fs, err := x.Flows(o)
		if err != nil {
			tb.Fatal(err)
		}
		flows += len(fs)
		if err := s.Set(o, reconcile.State{Flows: fs}); err != nil {
			tb.Fatal(err)
		}
	}
	return x, s, flows
}

// BenchmarkColdStart builds the index and the desired flows of the whole
// benchmark cluster from nothing (the agent's Sync, without the API): the
// flows it wants, and the Go heap it holds afterwards.
func BenchmarkColdStart(b *testing.B) {
	var flows int
	var heap uint64
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		x, s, n := benchIndex(b, benchPolicies)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		flows, heap = n, after.HeapAlloc-before.HeapAlloc
		runtime.KeepAlive(x)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(flows), "flows")
	b.ReportMetric(float64(heap)/(1<<20), "MiB-heap")
}

// BenchmarkLabelChange moves one pod in and out of the peers of 100
// policies (its namespace is team=ops: it gains and loses role=monitor),
// with 1,000 and with 5,000 policies in place, and measures the agent's
// share from the change to the reconciler store's diff: the index, the
// flows of the owners it marks, and the store's Set. It reports the p99
// of the changes.
func BenchmarkLabelChange(b *testing.B) {
	for _, perNS := range []int{1, benchPolicies} {
		b.Run(fmt.Sprintf("policies=%d", perNS*benchNamespaces), func(b *testing.B) {
			x, s, _ := benchIndex(b, perNS)
			p := benchPod(990, 3) // ns0990 is team=ops
			on := *p
			on.Labels = map[string]string{"app": p.Labels["app"], "role": "monitor"}
			var took []time.Duration
			owners := 0
			for i := 0; b.Loop(); i++ {
				cur := p
				if i%2 == 0 {
					cur = &on
				}
				t0 := time.Now()
				x.SetPod(cur.key(), cur)
				dirty := x.TakeDirty()
				for _, o := range dirty {
					fs, err := x.Flows(o)
					if err != nil {
						b.Fatal(err)
					}
					if err := s.Set(o, reconcile.State{Flows: fs}); err != nil {
						b.Fatal(err)
					}
				}
				took = append(took, time.Since(t0))
				owners = len(dirty)
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "ms-p99")
			b.ReportMetric(float64(owners), "owners/change")
		})
	}
}

// BenchmarkInstall installs the cold start's flows into an empty switch
// over nodeflow's connection (one bundle, as the agent's start-up) and, in
// the same run, with `ovs-ofctl --bundle add-flows` from a file, and
// reports both and their ratio (below 1: nodeflow is faster).
func BenchmarkInstall(b *testing.B) {
	_, s, flows := benchIndex(b, benchPolicies)
	sb := ovstest.New(b, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		b.Fatal(err)
	}
	addr := "unix:" + sb.MgmtSock("br0")
	file := flowtest.FlowFile(b, s, 1)
	var ours, theirs time.Duration
	for b.Loop() {
		if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		installOnce(b, addr, s)
		ours += time.Since(t0)
		if n := flowtest.CountFlows(b, sb, "br0"); n != flows+1 { // and the version note
			b.Fatalf("%d flows installed, want %d", n, flows+1)
		}
		if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "--bundle", "add-flows", "br0", file); err != nil {
			b.Fatal(err)
		}
		theirs += time.Since(t1)
		if n := flowtest.CountFlows(b, sb, "br0"); n != flows {
			b.Fatalf("ovs-ofctl installed %d flows, want %d", n, flows)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(flows), "flows")
	b.ReportMetric(ours.Seconds()*1000/n, "ms/nodeflow")
	b.ReportMetric(theirs.Seconds()*1000/n, "ms/ovs-ofctl-bundle")
	b.ReportMetric(ours.Seconds()/theirs.Seconds(), "ratio-vs-ovs-ofctl")
}

// installOnce runs a reconciler for s against addr until its first sync
// (one bundle of everything), then stops it.
func installOnce(b *testing.B, addr string, s *reconcile.Store) {
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	r := reconcile.New(s, reconcile.Options{Bridge: "br0", Logger: log, AuditInterval: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := ofconn.Dial(ctx, addr, r.ConnOptions(ofconn.Options{Logger: log}))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Synced():
	case err := <-done:
		b.Fatalf("reconciler: %v", err)
	case <-time.After(60 * time.Second):
		b.Fatal("no first sync within 60 s")
	}
	cancel()
	<-done
}
