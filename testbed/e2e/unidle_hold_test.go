package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/model/idling"
	"nodeflow/testbed"
)

// unidleHoldTime is the hold time of the agent TestUnidleHoldTimeout runs.
const unidleHoldTime = 2 * time.Second

// TestUnidleHoldTimeout idles a Service that nobody wakes (no unidler
// runs), on a node whose agent holds packets for unidleHoldTime, and
// connects to it from a pod (TCP and UDP) and from the node's host (TCP,
// through breth0): each held first packet is answered, once the hold time
// has passed, as a service without endpoints answers (a reset, an ICMP
// port unreachable), and counted.
func TestUnidleHoldTimeout(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-unidle-hold")
	clients := deployPods(t, e, ns, "client", 2)
	deployPods(t, e, ns, "sleepy", 1)
	svc := createService(t, e, ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "sleepy"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "sleepy"},
			Ports: []v1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP},
				{Name: "echo", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: v1.ProtocolUDP},
			}},
	})
	cip := netip.MustParseAddr(svc.Spec.ClusterIPs[0])
	client := clients[0]
	m, _ := e.state.Member(client.node)
	all := []unidleClient{
		{name: "pod, TCP", netns: client.netns, dst: cip, port: 80},
		{name: "pod, UDP", netns: client.netns, dst: cip, port: 53, udp: true},
		{name: "host, TCP", netns: m.Netns, dst: cip, port: 80},
	}
	for _, c := range all {
		eventually(t, 30*time.Second, c.name+" answered before idling", func(ctx context.Context) error {
			_, _, err := firstAttempt(ctx, c, 2*time.Second)
			return err
		})
	}

	// The client's node runs an agent with a short hold time; the
	// testbed's own agent comes back when the test ends.
	replaceAgent(t, e, m, fmt.Sprintf("NODEFLOW_UNIDLE_HOLD_TIME=%s", unidleHoldTime))
	t.Cleanup(func() { replaceAgent(t, e, m) })
	eventually(t, 60*time.Second, "the replaced agent ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	runNodeflow(t, e, "", "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "sleepy")
	waitCaught(t, e, []*testbed.Member{m}, cip)

	expired := metricValue(t, m, "nodeflow_unidle_expired_packets_total")
	ctx := context.Background()
	results := make([]unidleResult, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			pod, _, err := firstAttempt(ctx, c, 30*time.Second)
			results[i] = unidleResult{took: time.Since(s), pod: pod, err: err}
		}()
	}
	wg.Wait()
	for i, c := range all {
		r := results[i]
		switch {
		case !errors.Is(r.err, syscall.ECONNREFUSED):
			t.Errorf("%s: %q, %v after %s; want connection refused after the hold time", c.name, r.pod, r.err, r.took.Round(time.Millisecond))
		case r.took < unidleHoldTime:
			t.Errorf("%s: refused after %s, before the hold time %s", c.name, r.took.Round(time.Millisecond), unidleHoldTime)
		default:
			t.Logf("%s: refused after %s (hold time %s)", c.name, r.took.Round(time.Millisecond), unidleHoldTime)
		}
	}
	eventually(t, 10*time.Second, "the expired packets counted", func(context.Context) error {
		if v := metricValue(t, m, "nodeflow_unidle_expired_packets_total") - expired; v < float64(len(all)) {
			return fmt.Errorf("%v held packets expired, want at least %d", v, len(all))
		}
		return nil
	})
	// Nobody woke the Service: it is still idled.
	if a := serviceAnnotations(t, e, ns, "sleepy"); a[idling.IdledAtAnnotation] == "" {
		t.Errorf("the Service lost its idled-at annotation: %v", a)
	}
}
