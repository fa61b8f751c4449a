package namespaceid

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"nodeflow/internal/testutil/logtest"
)

// cluster is a fake API (Namespaces and Nodes in client-go's fake
// clientset, locks in lockAPI) that test agents share.
type cluster struct {
	t    *testing.T
	kube *kubefake.Clientset
	api  *lockAPI
	dyn  *dynamicfake.FakeDynamicClient
}

func newCluster(t *testing.T, objs ...runtime.Object) *cluster {
	t.Helper()
	api, dyn := newLockAPI()
	return &cluster{t: t, kube: kubefake.NewSimpleClientset(objs...), api: api, dyn: dyn}
}

func namespace(name, uid string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
}

func node(name string, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

// namespaces returns n namespaces ns-0 ... with uids uid-ns-0 ...
func namespaces(n int, extra ...string) []runtime.Object {
	var out []runtime.Object
	for i := range n {
		name := fmt.Sprintf("ns-%d", i)
		out = append(out, namespace(name, "uid-"+name))
	}
	for _, name := range extra {
		out = append(out, namespace(name, "uid-"+name))
	}
	return out
}

// agent is one node's Service, running.
type agent struct {
	name    string
	svc     *Service
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	inUse   map[uint32]bool // nil: the agent does not know yet
	changes map[string]int
}

type agentOpt func(*Config)

func withElection(e Election) agentOpt { return func(c *Config) { c.Election = e } }

var testTiming = Timing{Recheck: 20 * time.Millisecond, MinInterval: 5 * time.Millisecond, OrphanGrace: 50 * time.Millisecond, ClaimTTL: time.Minute}

func (c *cluster) start(name string, opts ...agentOpt) *agent {
	c.t.Helper()
	a := &agent{name: name, inUse: map[uint32]bool{}, changes: map[string]int{}, done: make(chan struct{})}
	log := logtest.New(c.t)
	cfg := Config{
		NodeName: name,
		InUse:    a.used,
		Dynamic:  c.dyn,
		Kube:     c.kube,
		Log:      log.WithField("node", name),
		Election: Election{Disabled: true},
		Timing:   testTiming,
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		c.t.Fatalf("nsid.New: %v", err)
	}
	a.svc = svc
	svc.Table().OnChange(func(ns string) {
		a.mu.Lock()
		a.changes[ns]++
		a.mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() {
		defer close(a.done)
		if err := svc.Run(ctx); err != nil {
			c.t.Errorf("agent %s: Run: %v", name, err)
		}
	}()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if err := svc.WaitReady(rctx); err != nil {
		c.t.Fatalf("agent %s: %v", name, err)
	}
	c.t.Cleanup(a.stop)
	return a
}

func (a *agent) stop() {
	a.cancel()
	<-a.done
}

func (a *agent) used() map[uint32]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inUse == nil {
		return nil
	}
	out := map[uint32]bool{}
	for id := range a.inUse {
		out[id] = true
	}
	return out
}

func (a *agent) setInUse(ids ...uint32) {
	a.mu.Lock()
	a.inUse = map[uint32]bool{}
	for _, id := range ids {
		a.inUse[id] = true
	}
	a.mu.Unlock()
	a.svc.Notify()
}

// unknown makes InUse say that the agent does not know its flows yet.
func (a *agent) unknown() {
	a.mu.Lock()
	a.inUse = nil
	a.mu.Unlock()
	a.svc.Notify()
}

// checked waits for n more watermark checks, each asked for by Notify.
func (a *agent) checked(t *testing.T, n int) {
	t.Helper()
	for range n {
		before := a.svc.rel.checks.Load()
		a.svc.Notify()
		if ok, _ := waitFor(wait, func() (bool, string) { return a.svc.rel.checks.Load() > before, "" }); !ok {
			t.Fatalf("agent %s: no watermark check after Notify", a.name)
		}
	}
}

func (a *agent) changeCount(ns string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changes[ns]
}

// settled waits until the agent's allocator has nothing to do, twice in a
// row with no sync in between.
func (a *agent) settled(t *testing.T) {
	t.Helper()
	var last int64 = -1
	ok, _ := waitFor(10*time.Second, func() (bool, string) {
		al := a.svc.alloc
		n := al.nsSyncs.Load() + al.lockSyncs.Load()
		if !al.idle() {
			last = -1
			return false, ""
		}
		if n == last {
			return true, ""
		}
		last = n
		return false, ""
	})
	if !ok {
		t.Fatalf("agent %s: allocator never idle", a.name)
	}
}

// liveLocks returns, per namespace UID, the ids of its live well-formed
// locks in the API.
func (c *cluster) liveLocks() map[types.UID][]uint32 {
	out := map[types.UID][]uint32{}
	for _, u := range c.api.list() {
		l, err := ParseLock(u)
		if err == nil && !l.Terminating {
			out[l.NamespaceUID] = append(out[l.NamespaceUID], l.ID)
		}
	}
	for _, ids := range out {
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	}
	return out
}

// lock returns the parsed lock of id from the API; ok is false if none.
func (c *cluster) lock(id uint32) (Lock, bool) {
	u := c.api.get(FormatID(id))
	if u == nil {
		return Lock{}, false
	}
	l, _ := ParseLock(u)
	return l, true
}

func (c *cluster) watermark(nodeName string) string {
	n, err := c.kube.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return n.Annotations[ReleasedAnnotation]
}

// deleteNamespace deletes a namespace and lets the garbage collector act.
func (c *cluster) deleteNamespace(name string) {
	c.t.Helper()
	ns, err := c.kube.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.api.collectGarbage(ns.UID)
}

// nodePatches counts the patches of Node objects so far.
func (c *cluster) nodePatches() int {
	n := 0
	for _, a := range c.kube.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}
