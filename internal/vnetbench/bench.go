// Package vnetbench is the virtual networks' throughput driver, after the
// seed's attachment throughput driver: it creates Subnets and N
// NetworkAttachments spread over nodes and VNIs, as fast as a number of
// concurrent writers can, and measures how soon each is assigned its
// address (the IPAM controller) and made on its node (the connection
// agent), and how many API server requests that took per attachment.
//
// It is the library behind `nodeflow vnet-bench`; the testbed's
// benchmark runs it too, and adds the agents' own figures.
package vnetbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodeflow/model/vnet"
)

// Options says what to create.
type Options struct {
	// Dynamic creates and watches the objects; Kube lists Nodes, creates
	// the namespace and the fake Nodes, and reads the API server's
	// metrics. Both required.
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
	// Namespace is created for the run (and deleted after it unless Keep).
	Namespace string
	// Attachments is N; VNIs how many virtual networks they are spread
	// over (round robin), from FirstVNI on, each VNI's over three nodes
	// (nodeOf); every VNI has one Subnet of SubnetCIDR (the same block on
	// every VNI: VNIs isolate).
	Attachments int
	VNIs        int
	FirstVNI    uint32
	SubnetCIDR  string
	// Nodes are the nodes the attachments are spread over;
	// empty means every Node of the cluster. FakeNodes adds that many
	// Node objects with no kubelet and no agent (named vnet-bench-<i>),
	// whose attachments are only assigned: they load the IPAM controller
	// and the API server, and show that an agent does not hold them.
	Nodes     []string
	FakeNodes int
	// NoAgents does not wait for the connection agents: every attachment
	// is only assigned.
	NoAgents bool
	// Concurrency is the number of writers creating attachments.
	Concurrency int
	// Timeout bounds the wait for every attachment to be ready.
	Timeout time.Duration
	// Keep leaves the namespace and fake Nodes in place.
	Keep bool
	// Ready, when set, is called once every attachment is ready, before
	// anything is deleted (to read the agents' own figures, say).
	Ready func()
	Log   logrus.FieldLogger
}

// Result is what a run measured.
type Result struct {
	Attachments int
	VNIs        int
	// Nodes and FakeNodes the attachments were spread over; OnAgents is
	// how many of them are on nodes with an agent (the real ones).
	Nodes, FakeNodes, OnAgents int
	// Created is the time from the first create to the last; CreateRate
	// the creates per second.
	Created    time.Duration
	CreateRate float64
	// Assigned is the time from the first create until every attachment
	// had its address; AssignRate the attachments assigned per second
	// over that time.
	Assigned   time.Duration
	AssignRate float64
	// AssignLatency and HostLatency are the p50 and p99 of the time from
	// an attachment's create call to its address in the status, and to
	// its node's connection agent reporting the interface made (hostIP
	// and ifcName; attachments on real nodes only).
	AssignLatency, HostLatency [2]time.Duration
	// HostReady counts the attachments whose interface was reported.
	HostReady int
	// Requests is the API server's requests (apiserver_request_total)
	// during the run, in all and per resource of this API group; -1 when
	// the metrics could not be read.
	Requests         float64
	RequestsByObject map[string]float64
	// APIServerCPU is the CPU time the API server process used during the
	// run (its process_cpu_seconds_total); 0 when not read.
	APIServerCPU time.Duration
}

// PerAttachment is the API server's requests per attachment.
func (r Result) PerAttachment() float64 {
	if r.Attachments == 0 || r.Requests < 0 {
		return math.NaN()
	}
	return r.Requests / float64(r.Attachments)
}

// Print writes the result as a short report.
func (r Result) Print(w io.Writer) {
	fmt.Fprintf(w, "attachments:        %d over %d VNIs, %d nodes (%d with an agent, %d fake)\n", r.Attachments, r.VNIs, r.Nodes+r.FakeNodes, r.Nodes, r.FakeNodes)
	fmt.Fprintf(w, "created:            %s (%.0f/s)\n", r.Created.Round(time.Millisecond), r.CreateRate)
	fmt.Fprintf(w, "all assigned:       %s after the first create (%.0f/s)\n", r.Assigned.Round(time.Millisecond), r.AssignRate)
	fmt.Fprintf(w, "create to address:  p50 %s, p99 %s\n", r.AssignLatency[0].Round(time.Microsecond*100), r.AssignLatency[1].Round(time.Microsecond*100))
	if r.OnAgents > 0 {
		fmt.Fprintf(w, "create to interface made (%d of %d on agents): p50 %s, p99 %s\n", r.HostReady, r.OnAgents,
			r.HostLatency[0].Round(time.Microsecond*100), r.HostLatency[1].Round(time.Microsecond*100))
	}
	if r.Requests >= 0 {
		fmt.Fprintf(w, "API server requests: %.0f (%.2f per attachment)", r.Requests, r.PerAttachment())
		var keys []string
		for k := range r.RequestsByObject {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "; %s %.0f", k, r.RequestsByObject[k])
		}
		fmt.Fprintln(w)
	}
	if r.APIServerCPU > 0 {
		fmt.Fprintf(w, "API server CPU:     %s (%s per attachment)\n", r.APIServerCPU.Round(time.Millisecond),
			(r.APIServerCPU / time.Duration(r.Attachments)).Round(time.Microsecond))
	}
}

// Run creates the objects, waits until every attachment is assigned (and,
// on nodes with an agent, made), and reports.
func Run(ctx context.Context, o Options) (Result, error) {
	o, prefix, err := o.checked()
	if err != nil {
		return Result{}, err
	}
	nodes, real, err := listNodes(ctx, o)
	if err != nil {
		return Result{}, err
	}
	if err := setUp(ctx, o, nodes[real:], prefix); err != nil {
		return Result{}, err
	}
	if !o.Keep {
		defer tearDown(o, nodes[real:])
	}

	res := Result{Attachments: o.Attachments, VNIs: o.VNIs, Nodes: real, FakeNodes: o.FakeNodes, Requests: -1}
	before, berr := apiRequests(ctx, o.Kube)

	t := newTracker(o.Attachments, o.VNIs)
	waitReal := real
	if o.NoAgents {
		waitReal = 0
	}
	for i := range o.Attachments {
		if nodeOf(i, o.VNIs, len(nodes)) < waitReal {
			res.OnAgents++
		}
	}
	changed, stopInformer, err := watchAttachments(ctx, o, t, waitReal, nodes)
	if err != nil {
		return res, err
	}
	defer stopInformer()
	createErr := make(chan error, 1)
	go func() { createErr <- createAll(ctx, o, nodes, t) }()
	if err := waitAll(ctx, o, t, res.OnAgents, changed, createErr); err != nil {
		return res, err
	}
	if o.Ready != nil {
		o.Ready()
	}
	res.measure(o, t)
	if after, aerr := apiRequests(ctx, o.Kube); berr == nil && aerr == nil {
		res.countRequests(before, after)
	}
	return res, nil
}

// checked returns o with its defaults filled in, and its subnet CIDR, or
// an error naming the option that is wrong.
func (o Options) checked() (Options, netip.Prefix, error) {
	if o.Dynamic == nil || o.Kube == nil {
		return o, netip.Prefix{}, errors.New("vnet-bench: Dynamic and Kube are required")
	}
	if o.Attachments <= 0 || o.VNIs <= 0 || o.Concurrency <= 0 {
		return o, netip.Prefix{}, fmt.Errorf("vnet-bench: attachments (%d), VNIs (%d) and concurrency (%d) must be positive", o.Attachments, o.VNIs, o.Concurrency)
	}
	if o.FirstVNI == 0 {
		o.FirstVNI = vnet.MinVNI + 0x1000
	}
	if last := o.FirstVNI + uint32(o.VNIs) - 1; !vnet.ValidVNI(o.FirstVNI) || !vnet.ValidVNI(last) {
		return o, netip.Prefix{}, fmt.Errorf("vnet-bench: VNIs %d..%d: %w", o.FirstVNI, last, vnet.ErrVNIRange)
	}
	prefix, err := netip.ParsePrefix(o.SubnetCIDR)
	if err != nil {
		return o, netip.Prefix{}, fmt.Errorf("vnet-bench: subnet CIDR %q: %w", o.SubnetCIDR, err)
	}
	perVNI := (o.Attachments + o.VNIs - 1) / o.VNIs
	if bits := prefix.Addr().BitLen() - prefix.Bits(); bits < 31 && 1<<bits-2 < perVNI {
		return o, netip.Prefix{}, fmt.Errorf("vnet-bench: subnet CIDR %s holds fewer than the %d attachments of each VNI", prefix, perVNI)
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Minute
	}
	if o.Log == nil {
		o.Log = logrus.StandardLogger()
	}
	return o, prefix, nil
}

// listNodes returns the nodes to spread the attachments over: the real
// ones (o.Nodes, or every Node of the cluster), then o.FakeNodes fake
// ones; real is how many are real.
func listNodes(ctx context.Context, o Options) (nodes []string, real int, err error) {
	nodes = o.Nodes
	if len(nodes) == 0 {
		l, err := o.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, 0, fmt.Errorf("vnet-bench: list nodes: %w", err)
		}
		for _, n := range l.Items {
			nodes = append(nodes, n.Name)
		}
	}
	real = len(nodes)
	for i := range o.FakeNodes {
		nodes = append(nodes, fmt.Sprintf("vnet-bench-%d", i))
	}
	if len(nodes) == 0 {
		return nil, 0, errors.New("vnet-bench: no nodes")
	}
	return nodes, real, nil
}

// watchAttachments starts an informer on the attachments that passes
// each to t and signals changed; stop stops it. An informer, not a bare
// watch: the API server ends a watch that falls behind, and the informer
// lists and watches again.
func watchAttachments(ctx context.Context, o Options, t *tracker, waitReal int, nodes []string) (changed <-chan struct{}, stop func(), err error) {
	ch := make(chan struct{}, 1)
	observe := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			t.observe(u, waitReal, nodes)
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(o.Dynamic, vnet.NetworkAttachmentGVR, o.Namespace, 0, cache.Indexers{}, nil).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return nil, nil, fmt.Errorf("vnet-bench: watch attachments: %w", err)
	}
	ictx, stopInformer := context.WithCancel(ctx)
	go inf.RunWithContext(ictx)
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		stopInformer()
		return nil, nil, errors.New("vnet-bench: the attachments' informer did not sync")
	}
	return ch, stopInformer, nil
}

// waitAll waits until t has every attachment assigned and the onAgents
// on agents' nodes made, until creating them fails (createErr), or until
// o.Timeout.
func waitAll(ctx context.Context, o Options, t *tracker, onAgents int, changed <-chan struct{}, createErr chan error) error {
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	for !t.done(onAgents) {
		select {
		case err := <-createErr:
			if err != nil {
				return err
			}
			createErr = nil
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("vnet-bench: after %s: %d of %d assigned, %d of %d made on their nodes", o.Timeout, t.assignedN, o.Attachments, t.hostN, onAgents)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// measure fills in the times, rates and latencies t recorded.
func (r *Result) measure(o Options, t *tracker) {
	r.Created = t.lastCreate.Sub(t.first)
	r.CreateRate = float64(o.Attachments) / r.Created.Seconds()
	r.Assigned = t.lastAssign.Sub(t.first)
	r.AssignRate = float64(o.Attachments) / r.Assigned.Seconds()
	r.AssignLatency = quantiles(t.assignLat)
	r.HostLatency = quantiles(t.hostLat)
	r.HostReady = t.hostN
}

// countRequests fills in the API server's requests and CPU between before
// and after.
func (r *Result) countRequests(before, after requestCounts) {
	r.Requests = after.total - before.total
	r.APIServerCPU = time.Duration((after.cpu - before.cpu) * float64(time.Second))
	r.RequestsByObject = map[string]float64{}
	for k, v := range after.byResource {
		if d := v - before.byResource[k]; d > 0 {
			r.RequestsByObject[k] = d
		}
	}
}

// setUp creates the namespace, the fake Nodes and one Subnet per VNI.
func setUp(ctx context.Context, o Options, fake []string, prefix netip.Prefix) error {
	_, err := o.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("vnet-bench: create namespace %s: %w", o.Namespace, err)
	}
	for _, n := range fake {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"nodeflow.io/vnet-bench": "fake"}}}
		if _, err := o.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("vnet-bench: create fake node %s: %w", n, err)
		}
	}
	for i := range o.VNIs {
		vni := o.FirstVNI + uint32(i)
		s := &vnet.Subnet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("net-%d", vni)},
			Spec: vnet.SubnetSpec{VNI: vni, CIDR: prefix.Masked().String()}}
		u, err := vnet.ToUnstructured(s)
		if err != nil {
			return err
		}
		if _, err := o.Dynamic.Resource(vnet.SubnetGVR).Namespace(o.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("vnet-bench: create Subnet %s: %w", s.Name, err)
		}
	}
	return nil
}

// tearDown deletes the namespace (its attachments, locks and Subnets with
// it) and the fake Nodes.
func tearDown(o Options, fake []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := o.Kube.CoreV1().Namespaces().Delete(ctx, o.Namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		o.Log.WithError(err).WithField("namespace", o.Namespace).Warn("vnet-bench: cannot delete the namespace")
	}
	for _, n := range fake {
		if err := o.Kube.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			o.Log.WithError(err).WithField("node", n).Warn("vnet-bench: cannot delete a fake node")
		}
	}
}

// createAll creates the attachments with o.Concurrency writers, recording
// when each create was sent.
func createAll(ctx context.Context, o Options, nodes []string, t *tracker) error {
	jobs := make(chan int)
	errs := make(chan error, o.Concurrency)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				vni := o.FirstVNI + uint32(i%o.VNIs)
				a := &vnet.NetworkAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachmentName(i)},
					Spec: vnet.NetworkAttachmentSpec{Node: nodes[nodeOf(i, o.VNIs, len(nodes))], Subnet: fmt.Sprintf("net-%d", vni), VNI: vni}}
				u, err := vnet.ToUnstructured(a)
				if err == nil {
					t.created(i, time.Now())
					_, err = o.Dynamic.Resource(vnet.NetworkAttachmentGVR).Namespace(o.Namespace).Create(ctx, u, metav1.CreateOptions{})
				}
				if err != nil {
					errs <- fmt.Errorf("vnet-bench: create attachment %s: %w", a.Name, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range o.Attachments {
		select {
		case jobs <- i:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// vniSpread are the nodes, counted from a VNI's own, that its
// attachments are put on in turn: each VNI spans three nodes (when there
// are more), so that a node is relevant to some VNIs and not to others.
var vniSpread = [...]int{0, 1, 3}

// nodeOf is the index of attachment i's node: attachment i is on VNI
// i mod vnis, the k-th of that VNI (k = i / vnis) on the VNI's own node
// (its index mod nodes) plus vniSpread[k mod 3].
func nodeOf(i, vnis, nodes int) int {
	v, k := i%vnis, i/vnis
	return (v + vniSpread[k%len(vniSpread)]) % nodes
}

// attachmentName is the name of attachment i.
func attachmentName(i int) string { return fmt.Sprintf("att-%06d", i) }

// tracker records the times of one run's attachments.
type tracker struct {
	mu                 sync.Mutex
	sent               []time.Time // when each create was sent
	first, lastCreate  time.Time
	assigned, host     []bool
	assignLat, hostLat []time.Duration
	assignedN, hostN   int
	lastAssign         time.Time
	vnis               int
}

func newTracker(n, vnis int) *tracker {
	return &tracker{sent: make([]time.Time, n), assigned: make([]bool, n), host: make([]bool, n), vnis: vnis}
}

func (t *tracker) created(i int, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent[i] = at
	if t.first.IsZero() || at.Before(t.first) {
		t.first = at
	}
	if at.After(t.lastCreate) {
		t.lastCreate = at
	}
}

// observe records what an event of attachment u shows.
func (t *tracker) observe(u *unstructured.Unstructured, real int, nodes []string) {
	i, err := strconv.Atoi(strings.TrimPrefix(u.GetName(), "att-"))
	if err != nil || i < 0 || i >= len(t.sent) {
		return
	}
	a, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u)
	if err != nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.Status.IP != "" && !t.assigned[i] {
		t.assigned[i] = true
		t.assignedN++
		t.assignLat = append(t.assignLat, now.Sub(t.sent[i]))
		t.lastAssign = now
	}
	if nodeOf(i, t.vnis, len(nodes)) < real && a.Status.HostIP != "" && a.Status.IfcName != "" && len(a.Status.Errors.Host) == 0 && !t.host[i] {
		t.host[i] = true
		t.hostN++
		t.hostLat = append(t.hostLat, now.Sub(t.sent[i]))
	}
}

// done reports whether every attachment is assigned and every one on an
// agent's node made.
func (t *tracker) done(onAgents int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.assignedN == len(t.sent) && t.hostN == onAgents
}

// quantiles returns the p50 and p99 of d.
func quantiles(d []time.Duration) [2]time.Duration {
	if len(d) == 0 {
		return [2]time.Duration{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)] }
	return [2]time.Duration{at(0.50), at(0.99)}
}

// requestCounts are the API server's request counters.
type requestCounts struct {
	total      float64
	byResource map[string]float64 // this API group's resources
	cpu        float64            // process_cpu_seconds_total
}

// apiRequests reads apiserver_request_total from the API server's
// /metrics, summed over every label but this group's resources.
func apiRequests(ctx context.Context, kube kubernetes.Interface) (requestCounts, error) {
	rc := requestCounts{byResource: map[string]float64{}}
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return rc, fmt.Errorf("vnet-bench: read the API server's metrics: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			rc.cpu, _ = strconv.ParseFloat(v, 64)
			continue
		}
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		rc.total += v
		labels := line[len("apiserver_request_total{"):sp]
		if strings.Contains(labels, `group="`+vnet.Group+`"`) {
			res := labelValue(labels, "resource")
			if sub := labelValue(labels, "subresource"); sub != "" {
				res += "/" + sub
			}
			rc.byResource[res+" "+strings.ToLower(labelValue(labels, "verb"))] += v
		}
	}
	return rc, sc.Err()
}

// labelValue returns label name's value in a Prometheus label set.
func labelValue(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 || (i > 0 && labels[i-1] != ',') {
		return ""
	}
	rest := labels[i+len(name)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}
