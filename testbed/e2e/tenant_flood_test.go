package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// The reject flood: tenant A's pod sends synFloodRate SYNs a second, each
// from a new source port, to its own Service without endpoints, while
// tenant B's pod on the same node opens refusedConns connections to
// another Service without endpoints, one every 100 ms.
const (
	synFloodRate = 5000
	refusedConns = 20
	// refusedPromptly is the longest a refusal may take: a SYN the agent
	// never answered is sent again after 1 s.
	refusedPromptly = time.Second
)

// floodRig is the two tenants' objects on node1: each a Service without
// endpoints and a pod, created with the tenant's own token.
type floodRig struct {
	e          *env
	node       *testbed.Member
	a, b       *tenant
	podA, podB netPod
	vipA, vipB netip.Addr
}

// newFloodRig creates tenants nsA and nsB, their Services and pods on
// node1, and waits until B's connections are refused.
func newFloodRig(t testing.TB, e *env, nsA, nsB string) *floodRig {
	t.Helper()
	m := member(t, e, "node1")
	r := &floodRig{e: e, node: m, a: newTenant(t, e, nsA), b: newTenant(t, e, nsB)}
	t.Cleanup(func() {
		for _, ns := range []string{nsA, nsB} {
			_ = e.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
	})
	r.vipA = r.a.endpointlessService(t, "nowhere")
	r.vipB = r.b.endpointlessService(t, "closed")
	r.podA = r.a.podOn(t, e, "flooder", m.Name)
	r.podB = r.b.podOn(t, e, "client", m.Name)
	eventually(t, 60*time.Second, "tenant B's connection refused", func(ctx context.Context) error {
		_, err := r.refusal(ctx, 2*time.Second)
		return err
	})
	return r
}

// endpointlessService creates, as the tenant, a TCP Service on port 80
// whose selector matches no pod, and returns its IPv4 ClusterIP.
func (tn *tenant) endpointlessService(t testing.TB, name string) netip.Addr {
	t.Helper()
	svc, err := tn.client.CoreV1().Services(tn.ns).Create(context.Background(), &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "nobody-" + name},
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("tenant %s: create Service %s: %v", tn.ns, name, err)
	}
	for _, c := range svc.Spec.ClusterIPs {
		if a := netip.MustParseAddr(c); a.Is4() {
			return a
		}
	}
	t.Fatalf("Service %s/%s has no IPv4 ClusterIP: %v", tn.ns, name, svc.Spec.ClusterIPs)
	return netip.Addr{}
}

// podOn creates, as the tenant, a pod of the testbed's web image on node
// and waits until it runs with its port on br0.
func (tn *tenant) podOn(t testing.TB, e *env, name, node string) netPod {
	t.Helper()
	if _, err := tn.client.CoreV1().Pods(tn.ns).Create(context.Background(), &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: v1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []v1.Container{{Name: "web", Image: "testbed/web"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant %s: create pod %s: %v", tn.ns, name, err)
	}
	return runningPods(t, e, tn.ns, name, 1)[0]
}

// refusal connects once from B's pod to B's Service and returns how long
// the refusal took; an error when the connection was not refused within
// timeout.
func (r *floodRig) refusal(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	addr := net.JoinHostPort(r.vipB.String(), "80")
	start := time.Now()
	c, err := nsutil.Dial(ctx, r.podB.netns, "tcp", addr, timeout)
	took := time.Since(start)
	if err == nil {
		c.Close()
		return took, fmt.Errorf("%s: connected, want refused", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return took, fmt.Errorf("%s: not refused after %s: %w", addr, took.Round(time.Millisecond), err)
	}
	return took, nil
}

// flood runs A's SYN flood until ctx ends, and returns how many SYNs it
// sent.
func (r *floodRig) flood(ctx context.Context) (int, error) {
	return synFlood(ctx, r.podA.netns, r.podA.ip(false), r.vipA, 80, synFloodRate)
}

// synFlood sends rate TCP SYNs a second from src, each from the next
// source port, to dst:port, until ctx ends, through a raw socket opened in
// netns (a pod's own network stack, as a program in the pod would), and
// returns how many it sent.
func synFlood(ctx context.Context, netns string, src, dst netip.Addr, port uint16, rate int) (int, error) {
	var fd int
	if err := nsutil.Do(netns, func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		return err
	}); err != nil {
		return 0, fmt.Errorf("raw socket in %s: %w", netns, err)
	}
	defer syscall.Close(fd)
	to := &syscall.SockaddrInet4{Addr: dst.As4()}
	seg := make([]byte, 40)
	sent, sport := 0, uint16(1024)
	perTick := max(rate/1000, 1)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return sent, nil
		case <-tick.C:
		}
		for range perTick {
			synSegment(seg, src, dst, sport, port)
			if err := syscall.Sendto(fd, seg, 0, to); err != nil && !errors.Is(err, syscall.ENOBUFS) {
				return sent, fmt.Errorf("send: %w", err)
			}
			sent++
			if sport++; sport == 0 {
				sport = 1024
			}
		}
	}
}

// synSegment writes into b (40 bytes) an IPv4 packet of a TCP SYN from
// src:sport to dst:dport, with both checksums.
//
//	IPv4: 0 version/IHL | 1 TOS | 2 total length (2) | 4 id (2) | 6 flags/frag (2)
//	      8 TTL | 9 protocol | 10 checksum (2) | 12 src (4) | 16 dst (4)
//	TCP:  20 src port (2) | 22 dst port (2) | 24 seq (4) | 28 ack (4)
//	      32 data offset | 33 flags | 34 window (2) | 36 checksum (2) | 38 urgent (2)
func synSegment(b []byte, src, dst netip.Addr, sport, dport uint16) {
	clear(b)
	b[0], b[8], b[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(b[2:], 40)
	binary.BigEndian.PutUint16(b[6:], 0x4000) // don't fragment
	s, d := src.As4(), dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[10:], checksum(b[:20], 0))
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint32(b[24:], uint32(sport)<<16|0x5eed)
	b[32], b[33] = 5<<4, 0x02 // 20 bytes, SYN
	binary.BigEndian.PutUint16(b[34:], 64240)
	// The pseudo-header: addresses, protocol, TCP length.
	var pseudo uint32
	for i := 12; i < 20; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	pseudo += 6 + 20
	binary.BigEndian.PutUint16(b[36:], checksum(b[20:40], pseudo))
}

// checksum is the Internet checksum of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// refusalsDuringFlood floods from A's pod and, once the flood is being
// shed, makes n connections from B's pod one after the other, each
// starting at least spacing after the one before; it returns their refusal
// times (timeout for one not refused) and why some were not refused within
// refusedPromptly, with the flood's size.
func (r *floodRig) refusalsDuringFlood(t testing.TB, n int, timeout, spacing time.Duration) (times []time.Duration, late []error, sent int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var floodErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sent, floodErr = r.flood(ctx)
	}()
	// The flood is on once A's meter sheds it.
	before := rejectDrops(t, r.node)
	eventually(t, 10*time.Second, "the flood shed by the meters", func(context.Context) error {
		if d := rejectDrops(t, r.node); d < before+synFloodRate/10 {
			return fmt.Errorf("%d dropped so far", d-before)
		}
		return nil
	})
	next := time.Now()
	for i := range n {
		time.Sleep(time.Until(next)) // the connections' pace, not a wait for a condition
		next = time.Now().Add(spacing)
		took, err := r.refusal(context.Background(), timeout)
		if err != nil {
			took = timeout
		}
		if err == nil && took >= refusedPromptly {
			err = fmt.Errorf("refused after %s", took.Round(time.Millisecond))
		}
		if err != nil {
			late = append(late, fmt.Errorf("connection %d: %w", i, err))
		}
		times = append(times, took)
	}
	cancel()
	wg.Wait()
	if floodErr != nil {
		t.Fatal(floodErr)
	}
	return times, late, sent
}

// rejectDrops returns what every reject meter of m's br0 has dropped
// (ovs-ofctl meter-stats): the sources' and the ceiling.
func rejectDrops(t testing.TB, m *testbed.Member) int64 {
	t.Helper()
	out := ofctl(t, m, "meter-stats", "br0")
	var n int64
	for _, s := range meterStatsRE.FindAllStringSubmatch(out, -1) {
		var id uint32
		var v int64
		fmt.Sscan(s[1], &id)
		fmt.Sscan(s[2], &v)
		if c, _, ok := plan.SplitSourceMeter(id); (ok && c == plan.PacketInReject) || id == plan.MeterReject {
			n += v
		}
	}
	return n
}

// TestTenantRejectFlood: tenant A floods SYNs at its own Service without
// endpoints from a pod, while tenant B's pod on the same node connects to
// another Service without endpoints: every one of B's connections is
// refused promptly (a RST, never a SYN timeout), A's flood is shed by its
// own meter, and the agent counts what that meter dropped under A's pod,
// none under B's.
func TestTenantRejectFlood(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	r := newFloodRig(t, e, "e2e-flood-a", "e2e-flood-b")
	times, late, sent := r.refusalsDuringFlood(t, refusedConns, 5*time.Second, 100*time.Millisecond)
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	t.Logf("during a flood of %d SYNs from %s/%s: %d connections from %s/%s refused in p50 %s, max %s",
		sent, r.a.ns, r.podA.name, len(times), r.b.ns, r.podB.name,
		sorted[len(sorted)/2].Round(time.Microsecond), sorted[len(sorted)-1].Round(time.Microsecond))
	for _, err := range late {
		t.Errorf("tenant B, while tenant A floods: %v", err)
	}

	// The agent counts A's drops under A's pod, none under B's.
	seriesA := fmt.Sprintf(`nodeflow_packet_in_meter_drops_total{category="reject",source="%s/%s"}`, r.a.ns, r.podA.name)
	seriesB := fmt.Sprintf(`nodeflow_packet_in_meter_drops_total{category="reject",source="%s/%s"}`, r.b.ns, r.podB.name)
	eventually(t, 30*time.Second, "the agent counts the flooder's drops", func(context.Context) error {
		text, err := agentMetrics(r.node)
		if err != nil {
			return err
		}
		if v := seriesValue(text, seriesA); v < float64(sent)/2 {
			return fmt.Errorf("%s = %v of %d sent", seriesA, v, sent)
		}
		return nil
	})
	text, err := agentMetrics(r.node)
	if err != nil {
		t.Fatal(err)
	}
	if v := seriesValue(text, seriesB); v > 0 {
		t.Errorf("%s = %v: the victim's own meter dropped packets", seriesB, v)
	}
	t.Logf("%s %v; the agent's reject queue dropped %v; the ceiling %v", seriesA, seriesValue(text, seriesA),
		seriesValue(text, `nodeflow_packet_ins_dropped_total{category="reject",reason="queue_full"}`),
		seriesValue(text, `nodeflow_packet_in_meter_drops_total{category="reject",source="ceiling"}`))
}
