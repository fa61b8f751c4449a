package vnetipam

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"nodeflow/internal/testutil/fakeapi"
	"nodeflow/internal/testutil/logtest"
	"nodeflow/model/vnet"
)

// wait bounds every wait on a condition.
const wait = 20 * time.Second

// cluster is a fake API (the vnet resources in fakeAPI, Nodes and Events
// in client-go's fake clientset) that test controllers share. The test
// acts as the user through dyn; the controllers use ctrlDyn, whose
// requests are checked against the controller's RBAC when the test ends.
type cluster struct {
	t       *testing.T
	api     *fakeapi.API
	dyn     *dynamicfake.FakeDynamicClient
	ctrlDyn *dynamicfake.FakeDynamicClient
	kube    *kubefake.Clientset
	ev      *eventLog
}

func newCluster(t *testing.T, nodes ...string) *cluster {
	t.Helper()
	f := newFakeAPI()
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, node(n))
	}
	cl := &cluster{t: t, api: f, dyn: f.Client(), ctrlDyn: f.Client(), kube: kubefake.NewClientset(objs...), ev: &eventLog{}}
	t.Cleanup(func() { checkRBAC(t, cl.ctrlDyn.Actions(), cl.kube.Actions()) })
	return cl
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-node-" + name)}}
}

// running is a Controller running against the cluster.
type running struct {
	c      *Controller
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

func (cl *cluster) start(name string) *running {
	cl.t.Helper()
	log := logtest.New(cl.t)
	reg := prometheus.NewRegistry()
	c, err := New(Options{Dynamic: cl.ctrlDyn, Kube: cl.kube, Recorder: cl.ev, Registerer: reg,
		Log: log.WithField("controller", name), Workers: 4, Resync: time.Second})
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := c.Run(ctx); err != nil {
			cl.t.Errorf("controller %s: %v", name, err)
		}
	}()
	cl.t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

// eventLog records events as "Type Reason Kind ns/name: message".
type eventLog struct {
	mu   sync.Mutex
	list []string
}

func (e *eventLog) Event(obj runtime.Object, eventtype, reason, message string) {
	r, ok := obj.(*corev1.ObjectReference)
	if !ok {
		panic(fmt.Sprintf("event on a %T, not an ObjectReference", obj))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, fmt.Sprintf("%s %s %s %s/%s: %s", eventtype, reason, r.Kind, r.Namespace, r.Name, message))
}

func (e *eventLog) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	e.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

func (e *eventLog) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	e.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

// find returns the events that contain every part.
func (e *eventLog) find(parts ...string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
next:
	for _, ev := range e.list {
		for _, p := range parts {
			if !strings.Contains(ev, p) {
				continue next
			}
		}
		out = append(out, ev)
	}
	return out
}

func (e *eventLog) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

// eventually polls cond until it returns nil, failing the test with its
// last error after wait.
func (cl *cluster) eventually(what string, cond func() error) {
	cl.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			cl.t.Fatalf("%s: not after %s: %v\nevents:\n%s", what, wait, err, strings.Join(cl.ev.all(), "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustU[T vnet.Object](t *testing.T, obj T) *unstructured.Unstructured {
	t.Helper()
	u, err := vnet.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func subnetObj(ns, name string, vni uint32, cidr string) *vnet.Subnet {
	s := &vnet.Subnet{Spec: vnet.SubnetSpec{VNI: vni, CIDR: cidr}}
	s.Namespace, s.Name = ns, name
	return s
}

func attObj(ns, name, node, subnet string, vni uint32) *vnet.NetworkAttachment {
	a := &vnet.NetworkAttachment{Spec: vnet.NetworkAttachmentSpec{Node: node, Subnet: subnet, VNI: vni}}
	a.Namespace, a.Name = ns, name
	return a
}

// create creates obj through the dynamic client, as a client would.
func create[T vnet.Object](cl *cluster, gvr schema.GroupVersionResource, obj T) *unstructured.Unstructured {
	cl.t.Helper()
	u := mustU(cl.t, obj)
	out, err := cl.dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		cl.t.Fatal(err)
	}
	return out
}

func (cl *cluster) subnet(ns, name string, vni uint32, cidr string) *unstructured.Unstructured {
	cl.t.Helper()
	return create(cl, vnet.SubnetGVR, subnetObj(ns, name, vni, cidr))
}

func (cl *cluster) attach(ns, name, node, subnet string, vni uint32) *unstructured.Unstructured {
	cl.t.Helper()
	return create(cl, vnet.NetworkAttachmentGVR, attObj(ns, name, node, subnet, vni))
}

// attachment reads an attachment from the fake API; nil when gone.
func (cl *cluster) attachment(ns, name string) *vnet.NetworkAttachment {
	cl.t.Helper()
	u := cl.api.Get(vnet.ResourceNetworkAttachments, ns, name)
	if u == nil {
		return nil
	}
	a, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u)
	if err != nil {
		cl.t.Fatal(err)
	}
	return a
}

func (cl *cluster) subnetStatus(ns, name string) []string {
	cl.t.Helper()
	u := cl.api.Get(vnet.ResourceSubnets, ns, name)
	if u == nil {
		return nil
	}
	s, err := vnet.FromUnstructured[*vnet.Subnet](u)
	if err != nil {
		cl.t.Fatal(err)
	}
	return s.Status.Errors
}

// locks returns the locks in the fake API.
func (cl *cluster) locks() []*vnet.IPLock {
	cl.t.Helper()
	var out []*vnet.IPLock
	for _, u := range cl.api.List(vnet.ResourceIPLocks) {
		l, err := vnet.FromUnstructured[*vnet.IPLock](u)
		if err != nil {
			cl.t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// addressed waits until the attachment has an address without errors,
// and returns it.
func (cl *cluster) addressed(ns, name string) netip.Addr {
	cl.t.Helper()
	var ip netip.Addr
	cl.eventually(ns+"/"+name+" addressed", func() error {
		a := cl.attachment(ns, name)
		if a == nil {
			return fmt.Errorf("gone")
		}
		var err error
		if ip, err = netip.ParseAddr(a.Status.IP); err != nil || len(a.Status.Errors.IPAM) > 0 {
			return fmt.Errorf("status %+v", a.Status)
		}
		return nil
	})
	return ip
}

// ipamErrors waits until the attachment's status.errors.ipam has an entry
// containing want.
func (cl *cluster) ipamErrors(ns, name, want string) []string {
	cl.t.Helper()
	var errs []string
	cl.eventually(ns+"/"+name+" reports "+want, func() error {
		a := cl.attachment(ns, name)
		if a == nil {
			return fmt.Errorf("gone")
		}
		errs = a.Status.Errors.IPAM
		for _, e := range errs {
			if strings.Contains(e, want) {
				return nil
			}
		}
		return fmt.Errorf("status %+v", a.Status)
	})
	return errs
}

// invariant checks what the controller promises, in the fake API as it
// is: no address on a VNI is in two attachments' status, every address in
// a status has its lock, held by that attachment (name and UID), and MACs
// are MACOf.
func (cl *cluster) invariant() error {
	snap := cl.api.Snapshot(vnet.ResourceIPLocks, vnet.ResourceNetworkAttachments)
	locks := map[string]*vnet.IPLock{}
	for _, u := range snap[0] {
		l, err := vnet.FromUnstructured[*vnet.IPLock](u)
		if err != nil {
			return err
		}
		locks[l.Namespace+"/"+l.Name] = l
	}
	owner := map[vniIP]string{}
	for _, u := range snap[1] {
		a, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u)
		if err != nil {
			return err
		}
		if a.Status.IP == "" {
			continue
		}
		ip, err := netip.ParseAddr(a.Status.IP)
		if err != nil {
			return fmt.Errorf("%s/%s: status.ip %q", a.Namespace, a.Name, a.Status.IP)
		}
		k := vniIP{a.Spec.VNI, ip}
		if prev, ok := owner[k]; ok {
			return fmt.Errorf("%s on VNI %d is in the status of %s and %s/%s", ip, a.Spec.VNI, prev, a.Namespace, a.Name)
		}
		owner[k] = a.Namespace + "/" + a.Name
		l := locks[a.Namespace+"/"+vnet.LockName(a.Spec.VNI, ip)]
		if l == nil {
			return fmt.Errorf("%s/%s has %s on VNI %d without its lock", a.Namespace, a.Name, ip, a.Spec.VNI)
		}
		if ref, ok := l.Holder(); !ok || ref.Name != a.Name || ref.UID != a.UID {
			return fmt.Errorf("%s/%s has %s, whose lock is held by %+v", a.Namespace, a.Name, ip, ref)
		}
		if want := vnet.MACOf(a.Spec.VNI, ip).String(); a.Status.MAC != want {
			return fmt.Errorf("%s/%s: MAC %s, want %s", a.Namespace, a.Name, a.Status.MAC, want)
		}
	}
	return nil
}

// watchInvariant checks the invariant continuously until the test ends,
// and fails the test at the first violation.
func (cl *cluster) watchInvariant() {
	stop := make(chan struct{})
	done := make(chan struct{})
	var first error
	go func() {
		defer close(done)
		for {
			if err := cl.invariant(); err != nil && first == nil {
				first = err
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	cl.t.Cleanup(func() {
		close(stop)
		<-done
		if first != nil {
			cl.t.Errorf("invariant broken: %v", first)
		}
	})
}

// lockHolders returns, per lock name, the holder's name and UID.
func (cl *cluster) lockHolders() map[string]string {
	out := map[string]string{}
	for _, l := range cl.locks() {
		ref, _ := l.Holder()
		out[l.Namespace+"/"+l.Name] = ref.Name + "@" + string(ref.UID)
	}
	return out
}
