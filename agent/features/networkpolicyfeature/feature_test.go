package networkpolicyfeature

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/featuretest"
)

func apiPod(ns, name, node, ip string, lbl map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Spec:   v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIPs: []v1.PodIP{{IP: ip}}}}
}

// TestFeature runs the feature on a test host: an ingress policy on a
// local pod gives its isolation and its clauses, a pod relabelled into
// the peers gets a source clause, and a policy the model refuses keeps the
// last good version, with an event.
func TestFeature(t *testing.T) {
	node := featuretest.DefaultNode()
	web := apiPod("shop", "web", node.Name, "10.244.0.5", map[string]string{"app": "web"})
	client := apiPod("shop", "client", "node2", "10.244.1.7", map[string]string{"app": "other"})
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("http"))}},
			}},
		}}
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	h := featuretest.New(node, web, client, np, ns)
	f := New(Options{})
	h.Restrict(f.Owns())
	ctx := h.Synced(t, f)
	flows := func(owner string) string {
		st, _ := h.Stores[plan.Pod].Get(owner)
		var lines []string
		for _, fl := range st.Flows {
			lines = append(lines, fl.String())
		}
		return strings.Join(lines, "\n")
	}
	podFlows := flows(networkpolicyflows.PodOwner("shop", "web"))
	for _, want := range []string{"priority=100,ip,nw_dst=10.244.0.5 actions=drop", "nw_dst=10.244.0.5,tp_dst=8080 actions=conjunction("} {
		if !strings.Contains(podFlows, want) {
			t.Errorf("pod web's flows lack %q:\n%s", want, podFlows)
		}
	}
	if got := flows(networkpolicyflows.PolicyOwner("shop", "web")); !strings.Contains(got, "conj_id=") {
		t.Errorf("policy flows:\n%s", got)
	}
	if got := flows("netpol/src/10.244.1.7/32"); got != "" {
		t.Errorf("the client is not a peer yet, but has flows:\n%s", got)
	}

	// The client is relabelled into the peers.
	client.Labels = map[string]string{"app": "client"}
	if _, err := h.Client.CoreV1().Pods("shop").Update(ctx, client, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !featuretest.WaitFor(10*time.Second, func() bool {
		f.loop.SyncNow(ctx)
		return strings.Contains(flows("netpol/src/10.244.1.7/32"), "nw_src=10.244.1.7 actions=conjunction(")
	}) {
		t.Fatalf("the relabelled client got no source clause; owners %v; pod %+v", h.Stores[plan.Pod].Owners("netpol/"), f.idx.pods["shop/client"].pod)
	}

	// A policy the model refuses (an endPort below its port; the API
	// server would refuse it too) keeps the last good version.
	bad := np.DeepCopy()
	bad.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(90)), EndPort: ptr.To(int32(80))}}
	if _, err := h.Client.NetworkingV1().NetworkPolicies("shop").Update(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ev string
	if !featuretest.WaitFor(10*time.Second, func() bool {
		f.loop.SyncNow(ctx)
		select {
		case ev = <-h.Events.Events:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("no event for the refused policy")
	}
	if !strings.Contains(ev, "Warning NetworkPolicyRefused") || !strings.Contains(ev, "spec.ingress[0].ports[0].endPort") {
		t.Errorf("event %q, want a warning naming the field", ev)
	}
	if got := flows(networkpolicyflows.PodOwner("shop", "web")); got != podFlows {
		t.Errorf("the refused version changed the pod's flows:\n%s\nwas\n%s", got, podFlows)
	}
}
