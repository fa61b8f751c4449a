package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/agent/features/idlingfeature"
	"nodeflow/datapath/idlingflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/lib/openflow"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// The bounded flood TestUnidleFlood sends: floodRate UDP datagrams a
// second for floodFor, from floodSockets source ports of one pod, to the
// idled Service's ClusterIP. Every datagram is a new connection to an idled
// port.
const (
	floodRate    = 5000
	floodFor     = 4 * time.Second
	floodSockets = 32
)

// TestUnidleFlood floods an idled Service from a pod, with the testbed's
// own addresses only, and checks that the flood is bounded where the issue
// says: the meter in front of the packet-ins sheds it in the datapath (the
// agent receives at most the meter's rate and burst), the agent holds at
// most a port's bound and its heap does not grow with the flood, it asks
// for pods once, and its other work keeps going: a Service created during
// the flood is programmed about as fast as one created before it. Then
// the Service wakes up and the held datagrams are re-injected.
func TestUnidleFlood(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-unidle-flood")
	clients := deployPods(t, e, ns, "client", 2)
	deployPods(t, e, ns, "sleepy", 1)
	deployPods(t, e, ns, "web", 1)
	svc := createService(t, e, ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "sleepy"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "sleepy"},
			Ports: []v1.ServicePort{{Name: "echo", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: v1.ProtocolUDP}}},
	})
	cip := netip.MustParseAddr(svc.Spec.ClusterIPs[0])
	client := clients[0]
	m, _ := e.state.Member(client.node)
	probe := unidleClient{name: "pod, UDP", netns: client.netns, dst: cip, port: 53, udp: true}
	eventually(t, 30*time.Second, "answered before idling", func(ctx context.Context) error {
		_, _, err := firstAttempt(ctx, probe, 2*time.Second)
		return err
	})
	runNodeflow(t, e, "", "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "sleepy")
	waitCaught(t, e, []*testbed.Member{m}, cip)

	poll := newFlowPoller(t, m.OVSRundir)
	before := serviceSyncLatency(t, e, poll, ns, "fresh-before")
	t.Logf("a Service created before the flood: in %s's br0 %s after its create", m.Name, before.Round(time.Millisecond))

	preHeap := liveHeap(t, m)
	pre := agentSample(t, m)
	dropsBefore := meterBandPackets(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent, failed int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sent, failed = flood(ctx, t, client.netns, net.JoinHostPort(cip.String(), "53"))
	}()
	// While it floods: a Service created, and the agent's held packets
	// read.
	eventually(t, floodFor, "the flood caught by the agent", func(context.Context) error {
		if v := agentSample(t, m).packetIns - pre.packetIns; v < float64(unidleRates().Source)/2 {
			return fmt.Errorf("%v packet-ins so far", v)
		}
		return nil
	})
	during := serviceSyncLatency(t, e, poll, ns, "fresh-during")
	maxHeld := agentSample(t, m).held
	wg.Wait()
	post := agentSample(t, m)
	postHeap := liveHeap(t, m)
	dropped := meterBandPackets(t, m) - dropsBefore
	t.Logf("flood: %d datagrams sent (%d send errors) in %s; the meter dropped %d; the agent got %v packet-ins, holds %v (%v bytes), dropped %v as port-full",
		sent, failed, floodFor, dropped, post.packetIns-pre.packetIns, post.held, post.heldBytes, post.portFull-pre.portFull)
	t.Logf("a Service created during the flood: in br0 %s after its create (before the flood: %s)", during.Round(time.Millisecond), before.Round(time.Millisecond))
	t.Logf("agent live heap (after a GC) %.1f MiB before the flood, %.1f MiB after; resident %.1f MiB, %.1f MiB",
		preHeap/(1<<20), postHeap/(1<<20), pre.rss/(1<<20), post.rss/(1<<20))

	// The meter shed the flood: the agent saw at most the pod's rate over
	// the flood and its burst (with a second's slack), the datapath
	// dropped the rest.
	rate := float64(unidleRates().Source)
	if limit := rate*(floodFor.Seconds()+1) + 2*rate; post.packetIns-pre.packetIns > limit {
		t.Errorf("the agent received %v packet-ins during the flood, over the meter's %v", post.packetIns-pre.packetIns, limit)
	}
	if dropped < int64(sent)/2 {
		t.Errorf("the meter dropped %d of %d datagrams, want most of them", dropped, sent)
	}
	// The agent held at most the port's bound, and dropped the rest.
	if h := max(maxHeld, post.held); h > idlingfeature.DefaultPortPackets {
		t.Errorf("%v packets held, over the port's bound %d", h, idlingfeature.DefaultPortPackets)
	}
	if post.held < idlingfeature.DefaultPortPackets || post.portFull == pre.portFull {
		t.Errorf("%v held and %v dropped as port-full: the flood should have filled the port", post.held, post.portFull-pre.portFull)
	}
	// Its live heap did not grow with the flood beyond the buffers'
	// bound.
	if grew := postHeap - preHeap; grew > float64(idlingfeature.DefaultTotalBytes) {
		t.Errorf("the agent's heap grew by %.1f MiB during the flood", grew/(1<<20))
	}
	// Its other work kept going.
	if during > time.Second+3*before {
		t.Errorf("a Service created during the flood took %s to reach br0, %s before it", during, before)
	}
	// One NeedPods for the port, not one per packet.
	evs, err := e.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=NeedPods,involvedObject.name=sleepy"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs.Items {
		n += int(max(ev.Count, 1))
	}
	if n != 1 {
		t.Errorf("%d NeedPods events for a flooded port, want 1", n)
	}

	// Wake it up: the held datagrams are re-injected, and a new client is
	// answered.
	scale(t, e, ns, "sleepy", 1)
	eventually(t, 60*time.Second, "the held datagrams released", func(context.Context) error {
		s := agentSample(t, m)
		if s.held != 0 || s.released-post.released < post.held {
			return fmt.Errorf("%v held, %v released", s.held, s.released-post.released)
		}
		return nil
	})
	if _, _, err := firstAttempt(context.Background(), probe, 5*time.Second); err != nil {
		// Seen once in a full e2e run on two loaded cores, not alone: the
		// first datagram of a new client right after the wake-up went
		// unanswered. Open; what the agent counted is logged to chase it,
		// and the client must be answered on a later attempt.
		text, _ := agentMetrics(m)
		var lines []string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "nodeflow_unidle_dropped_packets_total") || strings.HasPrefix(l, "nodeflow_unidle_late_packets_total") {
				lines = append(lines, l)
			}
		}
		t.Logf("after the flood and the wake-up, a new client's first datagram went unanswered (%v); the agent's counters:\n%s", err, strings.Join(lines, "\n"))
		eventually(t, 15*time.Second, "a new client answered after the wake-up", func(ctx context.Context) error {
			_, _, err := firstAttempt(ctx, probe, 2*time.Second)
			return err
		})
	}
}

// flood sends floodRate UDP datagrams a second for floodFor from
// floodSockets sockets in netns to addr, paced per millisecond, and returns
// how many it sent and how many sends failed.
func flood(ctx context.Context, t *testing.T, netns, addr string) (sent, failed int) {
	var conns []net.Conn
	for range floodSockets {
		c, err := nsutil.Dial(ctx, netns, "udp", addr, time.Second)
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		defer c.Close()
		conns = append(conns, c)
	}
	payload := []byte("flood")
	perTick := floodRate / 1000
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(floodFor)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return sent, failed
		case <-tick.C:
		}
		for range perTick {
			if _, err := conns[sent%len(conns)].Write(payload); err != nil {
				failed++
			}
			sent++
		}
	}
	return sent, failed
}

// agentFigures are the agent's unidle counters and memory at one moment.
type agentFigures struct {
	packetIns, held, heldBytes, released, portFull, rss float64
}

func agentSample(t *testing.T, m *testbed.Member) agentFigures {
	t.Helper()
	text, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	return agentFigures{
		packetIns: seriesValue(text, "nodeflow_unidle_packet_ins_total"),
		held:      seriesValue(text, "nodeflow_unidle_held_packets"),
		heldBytes: seriesValue(text, "nodeflow_unidle_held_bytes"),
		released:  seriesValue(text, "nodeflow_unidle_released_packets_total"),
		portFull:  max(seriesValue(text, `nodeflow_unidle_dropped_packets_total{cause="port-full"}`), 0),
		rss:       seriesValue(text, "process_resident_memory_bytes"),
	}
}

var meterStatsRE = regexp.MustCompile(`(?m)^meter:(\d+) .*\n0: packet_count:(\d+)`)

// meterBandPackets returns how many packets the unidle meters' bands
// have dropped on m's br0 (ovs-ofctl meter-stats): the pods' own meters
// and the node-wide ceiling.
func meterBandPackets(t *testing.T, m *testbed.Member) int64 {
	t.Helper()
	out := ofctl(t, m, "meter-stats", "br0")
	var n int64
	found := false
	for _, s := range meterStatsRE.FindAllStringSubmatch(out, -1) {
		id, _ := strconv.ParseUint(s[1], 10, 32)
		c, _, ok := plan.SplitSourceMeter(uint32(id))
		if uint32(id) != idlingflows.Meter().ID && (!ok || c != plan.PacketInUnidle) {
			continue
		}
		found = true
		v, _ := strconv.ParseInt(s[2], 10, 64)
		n += v
	}
	if !found {
		t.Fatalf("no unidle meter in br0's meter stats:\n%s", out)
	}
	return n
}

// unidleRates returns the unidle meters' rates.
func unidleRates() puntflows.Rates {
	r, _ := puntflows.RatesOf(plan.PacketInUnidle)
	return r
}

// waitVIP polls until table 30 has a flow to vip and returns when it saw
// it.
func (p *flowPoller) waitVIP(ctx context.Context, vip netip.Addr) (time.Time, error) {
	for {
		m := openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(vip))
		stats, err := p.flows(ctx, plan.PodServiceLB, 0, &m)
		if err != nil {
			return time.Time{}, err
		}
		if len(stats) > 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no flow for %s in table %d: %w", vip, plan.PodServiceLB, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// serviceSyncLatency creates a ClusterIP Service of the web pods and
// returns the time from its create to its first flow in the polled br0.
func serviceSyncLatency(t *testing.T, e *env, p *flowPoller, ns, name string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	svc, err := e.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at, err := p.waitVIP(ctx, netip.MustParseAddr(svc.Spec.ClusterIPs[0]))
	if err != nil {
		t.Fatalf("Service %s: %v", name, err)
	}
	return at.Sub(start)
}

// liveHeap returns the agent's live heap: it has the agent collect its
// garbage (the heap profile's gc=1 does) and reads the heap's allocated
// bytes right after.
func liveHeap(t *testing.T, m *testbed.Member) float64 {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nsutil.Dial(ctx, m.Netns, network, addr, time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + agentHealthAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	text, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	return seriesValue(text, "go_memstats_heap_alloc_bytes")
}
