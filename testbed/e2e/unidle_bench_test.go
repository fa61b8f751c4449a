package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/model/idling"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// The unidling benchmark's sizes: cold starts of one Service in a row, and
// Services woken at once.
const (
	coldStarts    = 20
	crowdServices = 100
)

// synTimer is a client's first SYN retransmission timer: the time a client
// loses when its first SYN is dropped (ovn-kubernetes's unidling), and the
// issue's bound for the whole cold start.
const synTimer = time.Second

var unidleBench scenario

// BenchmarkUnidle measures unidling on the testbed, with `nodeflow
// unidler` running and both agents as the testbed runs them:
//
//   - coldStarts times in a row, a one-replica Deployment behind a
//     ClusterIP idled with `nodeflow idle`, then one TCP connect from a
//     pod on node1: the time from the connect to the SYN-ACK, split into
//     the cluster's part (NeedPods, scale-up, the pod Ready, the
//     EndpointSlice ready, as a watch in this process sees it) and
//     nodeflow's part (from that EndpointSlice update to the SYN-ACK: the
//     agent's informer, flows, barrier, re-injection, and the pod's
//     answer);
//   - crowdServices Services of one two-replica Deployment idled together
//     and woken by one connection each, all at once, from pods on both
//     nodes.
//
// The reference is the client's 1 s SYN timer: the time a client loses
// when its first packet is dropped instead of held. It runs once whatever
// b.N says, and reports milliseconds.
func BenchmarkUnidle(b *testing.B) { unidleBench.report(b, runUnidleBench) }

func runUnidleBench(b *testing.B, e *env) map[string]float64 {
	res := map[string]float64{}
	n1, ok1 := e.state.Member("node1")
	n2, ok2 := e.state.Member("node2")
	if !ok1 || !ok2 {
		b.Fatal("the topology lacks node1 or node2")
	}
	nodes := []*testbed.Member{n1, n2}
	startUnidler(b, e, "unidler-bench")

	// Cold starts of one Service.
	ns := createNamespace(b, e, "e2e-unidle-bench")
	clients := deployPods(b, e, ns, "client", 2)
	client := clients[0]
	for _, c := range clients {
		if c.node == "node1" {
			client = c
		}
	}
	deployPods(b, e, ns, "sleepy", 1)
	svc := createService(b, e, ns, tcpService("sleepy", "sleepy"))
	cip := netip.MustParseAddr(svc.Spec.ClusterIPs[0])
	waitReadyEndpoints(b, e, ns, "sleepy", 1)
	w := watchReady(b, e, ns)
	var total, cluster, agent []time.Duration
	retransmitted := 0
	for i := range coldStarts {
		runNodeflowQuiet(b, e, "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "sleepy")
		waitCaught(b, e, nodes, cip)
		w.reset(b, "sleepy")
		r := connectOnce(context.Background(), client.netns, cip)
		if r.err != nil {
			b.Fatalf("cold start %d: %v", i, r.err)
		}
		ready, ok := w.readyAt("sleepy")
		if !ok {
			b.Fatalf("cold start %d: answered, yet no ready EndpointSlice seen", i)
		}
		total = append(total, r.synAck.Sub(r.start))
		cluster = append(cluster, ready.Sub(r.start))
		agent = append(agent, r.synAck.Sub(ready))
		retransmitted += r.retrans
		b.Logf("cold start %d: SYN-ACK %s after the connect; EndpointSlice ready at %s, nodeflow's part %s; SYN retransmits %d",
			i, total[i].Round(time.Millisecond), cluster[i].Round(time.Millisecond), agent[i].Round(time.Millisecond), r.retrans)
		waitIdleAnnotationsGone(b, e, ns, "sleepy")
	}
	for _, m := range nodes {
		b.Logf("%s after the cold starts: %s", m.Name, unidleMetrics(b, m))
	}
	report(res, "cold-total", total)
	report(res, "cold-cluster", cluster)
	report(res, "cold-nodeflow", agent)
	res["cold-total-p99-ratio-to-syn-timer"] = percentile(total, 99).Seconds() / synTimer.Seconds()
	res["cold-syn-retransmits"] = float64(retransmitted)

	// crowdServices Services woken at once.
	crowdNS := createNamespace(b, e, "e2e-unidle-bench-crowd")
	deployPods(b, e, crowdNS, "crowd", 2)
	var vips []netip.Addr
	var names []string
	for i := range crowdServices {
		name := fmt.Sprintf("s%03d", i)
		s := createService(b, e, crowdNS, tcpService(name, "crowd"))
		vips = append(vips, netip.MustParseAddr(s.Spec.ClusterIPs[0]))
		names = append(names, name)
	}
	for _, name := range names {
		waitReadyEndpoints(b, e, crowdNS, name, 2)
	}
	cw := watchReady(b, e, crowdNS)
	runNodeflowQuiet(b, e, "idle", "--kubeconfig", e.state.Kubeconfig, "-n", crowdNS, "--all")
	for _, vip := range vips {
		waitCaught(b, e, nodes, vip)
	}
	for _, name := range names {
		cw.reset(b, name)
	}
	results := make([]connectResult, len(vips))
	var wg sync.WaitGroup
	start := time.Now()
	for i, vip := range vips {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = connectOnce(context.Background(), clients[i%len(clients)].netns, vip)
		}()
	}
	wg.Wait()
	var crowdTotal, crowdAgent []time.Duration
	retransmitted = 0
	for i, r := range results {
		if r.err != nil {
			b.Errorf("Service %s: %v", names[i], r.err)
			continue
		}
		crowdTotal = append(crowdTotal, r.synAck.Sub(r.start))
		if ready, ok := cw.readyAt(names[i]); ok {
			crowdAgent = append(crowdAgent, r.synAck.Sub(ready))
		}
		retransmitted += r.retrans
	}
	b.Logf("%d Services woken at once: all answered %s after the first connect; SYN retransmits %d", len(vips), time.Since(start).Round(time.Millisecond), retransmitted)
	for _, m := range nodes {
		b.Logf("%s after the crowd: %s", m.Name, unidleMetrics(b, m))
	}
	report(res, "crowd-total", crowdTotal)
	report(res, "crowd-nodeflow", crowdAgent)
	res["crowd-syn-retransmits"] = float64(retransmitted)
	res["crowd-answered"] = float64(len(crowdTotal))
	return res
}

// tcpService is a ClusterIP Service of the pods labelled app, port 80 to
// the web workload's 8080.
func tcpService(name, app string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": app},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	}
}

// connectResult is one timed TCP connect.
type connectResult struct {
	start, synAck time.Time
	retrans       int
	err           error
}

// connectOnce connects from netns to vip:80 and returns when the connect
// was made and answered (the SYN-ACK arrived), and how many times the SYN
// was sent again.
func connectOnce(ctx context.Context, netns string, vip netip.Addr) connectResult {
	var r connectResult
	r.start = time.Now()
	conn, err := nsutil.Dial(ctx, netns, "tcp", net.JoinHostPort(vip.String(), "80"), 30*time.Second)
	r.synAck = time.Now()
	if err != nil {
		r.err = err
		return r
	}
	defer conn.Close()
	r.retrans, r.err = synRetransmits(conn)
	return r
}

// report puts p50 and p99 of ds, in milliseconds, into res.
func report(res map[string]float64, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	res[name+"-p50-ms"] = float64(percentile(ds, 50).Microseconds()) / 1000
	res[name+"-p99-ms"] = float64(percentile(ds, 99).Microseconds()) / 1000
}

// runNodeflowQuiet runs the built nodeflow like runNodeflow, without
// logging its output.
func runNodeflowQuiet(b testing.TB, e *env, args ...string) {
	b.Helper()
	if _, err := runNodeflowErr(e, "", args...); err != nil {
		b.Fatal(err)
	}
}

// waitIdleAnnotationsGone waits until the unidler has woken a Service up:
// its idling annotations removed.
func waitIdleAnnotationsGone(b testing.TB, e *env, ns, name string) {
	b.Helper()
	eventually(b, 60*time.Second, name+" woken up", func(ctx context.Context) error {
		s, err := e.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Annotations[idling.IdledAtAnnotation] != "" || s.Annotations[idling.UnidleTargetsAnnotation] != "" {
			return fmt.Errorf("annotations %v", s.Annotations)
		}
		return nil
	})
}

// readyWatch records, per Service of a namespace, when an EndpointSlice
// with a ready endpoint was first seen after the Service's reset.
type readyWatch struct {
	slices discoverylisters.EndpointSliceNamespaceLister

	mu    sync.Mutex
	armed map[string]bool
	at    map[string]time.Time
}

func watchReady(b testing.TB, e *env, ns string) *readyWatch {
	b.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(ns))
	inf := f.Discovery().V1().EndpointSlices()
	w := &readyWatch{slices: inf.Lister().EndpointSlices(ns), armed: map[string]bool{}, at: map[string]time.Time{}}
	seen := func(obj any) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || !sliceReady(es) {
			return
		}
		now := time.Now()
		svc := es.Labels[discoveryv1.LabelServiceName]
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.armed[svc] {
			w.armed[svc] = false
			w.at[svc] = now
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	f.Start(stop)
	f.WaitForCacheSync(stop)
	return w
}

// reset waits until this watch sees no ready endpoint of svc, then arms it
// to record the next one.
func (w *readyWatch) reset(b testing.TB, svc string) {
	b.Helper()
	eventually(b, 30*time.Second, svc+" without ready endpoints in the watch", func(context.Context) error {
		list, err := w.slices.List(labels.Everything())
		if err != nil {
			return err
		}
		for _, es := range list {
			if es.Labels[discoveryv1.LabelServiceName] == svc && sliceReady(es) {
				return fmt.Errorf("slice %s has a ready endpoint", es.Name)
			}
		}
		return nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed[svc] = true
	delete(w.at, svc)
}

// readyAt returns when svc's ready EndpointSlice was seen after its reset.
func (w *readyWatch) readyAt(svc string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.at[svc]
	return t, ok
}

// sliceReady says whether an IPv4 EndpointSlice has a ready endpoint.
func sliceReady(es *discoveryv1.EndpointSlice) bool {
	if es.AddressType != discoveryv1.AddressTypeIPv4 {
		return false
	}
	for _, ep := range es.Endpoints {
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			return true
		}
	}
	return false
}
