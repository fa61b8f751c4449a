package hostportfeature

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/datapath/hostportflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/featuretest"
)

// TestFeatureServesAndWarns runs the feature on a test host: a pod's TCP
// hostPort gets flows on both bridges, its SCTP mapping that translates
// ports gets a Warning event naming it and no flows, and deleting the pod
// removes its flows.
func TestFeatureServesAndWarns(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.PodSpec{NodeName: "node1", Containers: []v1.Container{{Name: "c", Ports: []v1.ContainerPort{
			{ContainerPort: 80, HostPort: 8080},
			{ContainerPort: 7001, HostPort: 7000, Protocol: v1.ProtocolSCTP},
		}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIPs: []v1.PodIP{{IP: "10.244.1.5"}}},
	}
	h := featuretest.New(featuretest.DefaultNode(), pod)
	f := New(Options{ReservedPorts: []uint16{KubeletPort}})
	h.Restrict(f.Owns())
	ctx := h.Synced(t, f)
	owner := hostportflows.Owner("ns", "web")
	br0, _ := h.Stores[plan.Pod].Get(owner)
	breth0, _ := h.Stores[plan.Gateway].Get(owner)
	if len(br0.Flows) != 1 || !strings.Contains(br0.Flows[0].String(), "ct_tp_dst=8080") || len(breth0.Flows) != 2 {
		t.Fatalf("br0 %v, breth0 %v: want the TCP hostPort's DNAT and its ingress pair", br0.Flows, breth0.Flows)
	}
	select {
	case ev := <-h.Events.Events:
		if !strings.Contains(ev, "Warning HostPortNotServed") || !strings.Contains(ev, "SCTP 10.244.1.5") && !strings.Contains(ev, "SCTP *:7000") {
			t.Errorf("event %q, want a warning naming the SCTP mapping", ev)
		}
	default:
		t.Error("no event for the SCTP mapping that cannot be served")
	}

	if err := h.Client.CoreV1().Pods("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.loop.SyncNow(ctx) // what the informer saw
		if st, ok := h.Stores[plan.Pod].Get(owner); !ok || len(st.Flows) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted pod's hostPort flows are still wanted")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}
