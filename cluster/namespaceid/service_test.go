package namespaceid

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

const wait = 20 * time.Second

// allAssigned waits until every namespace named has exactly one live lock
// and every agent's Table agrees with it; it returns the ids.
func allAssigned(t *testing.T, c *cluster, names []string, agents ...*agent) map[string]uint32 {
	t.Helper()
	ids := map[string]uint32{}
	ok, why := waitFor(wait, func() (bool, string) {
		live := c.liveLocks()
		for _, ns := range names {
			got := live[types.UID("uid-"+ns)]
			if len(got) != 1 {
				return false, fmt.Sprintf("namespace %s has live locks %v", ns, got)
			}
			ids[ns] = got[0]
			for _, a := range agents {
				if id, ok := a.svc.Table().Lookup(ns); !ok || id != got[0] {
					return false, fmt.Sprintf("agent %s: Lookup(%s) = %d, %v; the lock is %d", a.name, ns, id, ok, got[0])
				}
			}
		}
		return true, ""
	})
	if !ok {
		t.Fatal(why)
	}
	return ids
}

func names(objs []runtime.Object) []string {
	var out []string
	for _, o := range objs {
		if ns, ok := o.(interface{ GetName() string }); ok {
			out = append(out, ns.GetName())
		}
	}
	return out
}

// TestAllocatorsRace runs two allocators at once, without an election, over
// namespaces that share their home id: the lock objects alone keep the ids
// unique, and every namespace ends with exactly one id.
func TestAllocatorsRace(t *testing.T) {
	objs := namespaces(300, append(slices.Clone(sameHome), home42)...)
	objs = append(objs, node("n1", nil), node("n2", nil))
	c := newCluster(t, objs...)
	all := names(objs[:len(objs)-2])

	// Start both before either can finish, so that they race.
	a1 := c.start("n1")
	a2 := c.start("n2")
	ids := allAssigned(t, c, all, a1, a2)

	seen := map[uint32]string{}
	for ns, id := range ids {
		if other, dup := seen[id]; dup {
			t.Fatalf("namespaces %s and %s share id %d", ns, other, id)
		}
		seen[id] = ns
		if !ValidID(id) {
			t.Errorf("namespace %s: id %#x out of range", ns, id)
		}
	}
	// The four names with one home take the four ids from it on.
	var got []uint32
	for _, ns := range sameHome {
		got = append(got, ids[ns])
	}
	slices.Sort(got)
	if want := []uint32{6189508, 6189509, 6189510, 6189511}; !slices.Equal(got, want) {
		t.Errorf("namespaces of one home got %v, want %v", got, want)
	}
	// Extra locks from the race, if any, are released and gone.
	ok, why := waitFor(wait, func() (bool, string) {
		n := len(c.api.list())
		return n == len(all), fmt.Sprintf("%d locks for %d namespaces", n, len(all))
	})
	if !ok {
		t.Fatal(why)
	}
	creates, _, _ := c.api.mutations()
	t.Logf("%d namespaces, %d creates", len(all), creates)
}

// TestRestartKeepsIDs starts a new agent over the locks of an old one: it
// writes nothing and answers the same ids.
func TestRestartKeepsIDs(t *testing.T) {
	objs := namespaces(200)
	c := newCluster(t, append(objs, node("n1", nil))...)
	all := names(objs)
	a := c.start("n1")
	before := allAssigned(t, c, all, a)
	a.settled(t)
	a.stop()

	creates, updates, deletes := c.api.mutations()
	patches := c.nodePatches()
	rvs := map[string]string{}
	for _, u := range c.api.list() {
		rvs[u.GetName()] = u.GetResourceVersion()
	}

	b := c.start("n1")
	after := allAssigned(t, c, all, b)
	b.settled(t)
	if b.svc.alloc.nsSyncs.Load() < int64(len(all)) {
		t.Fatalf("the new allocator synced %d namespaces, want %d", b.svc.alloc.nsSyncs.Load(), len(all))
	}
	for ns, id := range before {
		if after[ns] != id {
			t.Errorf("namespace %s: id %d before the restart, %d after", ns, id, after[ns])
		}
	}
	c2, u2, d2 := c.api.mutations()
	if c2 != creates || u2 != updates || d2 != deletes {
		t.Errorf("the restarted agent wrote locks: creates %d->%d, updates %d->%d, deletes %d->%d", creates, c2, updates, u2, deletes, d2)
	}
	for _, u := range c.api.list() {
		if rvs[u.GetName()] != u.GetResourceVersion() {
			t.Errorf("lock %s changed: resourceVersion %s -> %s", u.GetName(), rvs[u.GetName()], u.GetResourceVersion())
		}
	}
	if p := c.nodePatches(); p != patches {
		t.Errorf("the restarted agent patched its Node %d times", p-patches)
	}
}

// TestQuarantine follows a deleted namespace's id: it stays taken until
// every node running nodeflow has dropped it; a node whose agent is down
// holds it; a deleted Node does not; a node that never ran nodeflow never
// counts.
func TestQuarantine(t *testing.T) {
	c := newCluster(t, namespace("web", "uid-web"), namespace("tmp", "uid-tmp"),
		node("n1", nil), node("n2", nil), node("n3", nil))
	n1 := c.start("n1")
	n2 := c.start("n2")
	ids := allAssigned(t, c, []string{"web", "tmp"}, n1, n2)
	web := ids["web"]
	if c.watermark("n3") != "" {
		t.Fatalf("n3 runs no agent but has a watermark %q", c.watermark("n3"))
	}
	n1.setInUse(web)

	before := n1.changeCount("web")
	c.deleteNamespace("web")
	lock, ok := c.lock(web)
	if !ok || !lock.Terminating || !lock.Finalizer {
		t.Fatalf("after the namespace's deletion, lock %d: %+v (exists %v)", web, lock, ok)
	}
	// Both tables drop the id and say so; it is in quarantine.
	ok, why := waitFor(wait, func() (bool, string) {
		for _, a := range []*agent{n1, n2} {
			if id, ok := a.svc.Table().Lookup("web"); ok {
				return false, fmt.Sprintf("%s still gives web id %d", a.name, id)
			}
			if q := a.svc.Table().Terminating(); !slices.Equal(q, []uint32{web}) {
				return false, fmt.Sprintf("%s: terminating %v", a.name, q)
			}
		}
		return n1.changeCount("web") > before, "no change notified for web"
	})
	if !ok {
		t.Fatal(why)
	}

	// n2 has no flows with the id: its watermark passes the lock; n1's
	// does not, and the lock stays.
	passed := func(node string, rv string) func() (bool, string) {
		return func() (bool, string) {
			w := c.watermark(node)
			cmp, err := compareRV(w, rv)
			return err == nil && cmp >= 0, fmt.Sprintf("%s's watermark %q is below %s", node, w, rv)
		}
	}
	if ok, why := waitFor(wait, passed("n2", lock.ResourceVersion)); !ok {
		t.Fatal(why)
	}
	n1.settled(t)
	n2.settled(t)
	if ok, _ := passed("n1", lock.ResourceVersion)(); ok {
		t.Fatalf("n1's watermark %s passed lock %d that its flows use", c.watermark("n1"), web)
	}
	if l, ok := c.lock(web); !ok || !l.Finalizer {
		t.Fatalf("lock %d let go while n1 uses its id: %+v (exists %v)", web, l, ok)
	}

	// Re-created with the same name: a new UID, a new id, never the one in
	// quarantine.
	if _, err := c.kube.CoreV1().Namespaces().Create(context.Background(), namespace("web", "uid-web-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ok, why = waitFor(wait, func() (bool, string) {
		for _, a := range []*agent{n1, n2} {
			id, ok := a.svc.Table().Lookup("web")
			if !ok || id == web {
				return false, fmt.Sprintf("%s: Lookup(web) = %d, %v", a.name, id, ok)
			}
		}
		return true, ""
	})
	if !ok {
		t.Fatal(why)
	}
	if live := c.liveLocks()["uid-web-2"]; len(live) != 1 || live[0] == web {
		t.Fatalf("re-created web holds %v; the quarantined id is %d", live, web)
	}

	// n1 drops its flows: the id is free again.
	n1.setInUse()
	ok, why = waitFor(wait, func() (bool, string) {
		_, exists := c.lock(web)
		return !exists, fmt.Sprintf("lock %d still there; watermarks n1 %s n2 %s", web, c.watermark("n1"), c.watermark("n2"))
	})
	if !ok {
		t.Fatal(why)
	}

	// An agent that is down holds its ids; its Node's deletion frees them.
	tmp := ids["tmp"]
	n1.setInUse(tmp)
	n1.stop()
	c.deleteNamespace("tmp")
	tmpLock, _ := c.lock(tmp)
	if ok, why := waitFor(wait, passed("n2", tmpLock.ResourceVersion)); !ok {
		t.Fatal(why)
	}
	n2.settled(t)
	if _, ok := c.lock(tmp); !ok {
		t.Fatalf("lock %d let go while n1's agent, which used it, is down", tmp)
	}
	if err := c.kube.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ok, why = waitFor(wait, func() (bool, string) {
		_, exists := c.lock(tmp)
		return !exists, fmt.Sprintf("lock %d still there after node n1 was deleted", tmp)
	})
	if !ok {
		t.Fatal(why)
	}
}

// TestWatermarkStopsAtOldestInUse: a node's watermark stops below the
// oldest released id it still uses, which also holds back the ids released
// after it; it moves only when something was released.
func TestWatermarkStopsAtOldestInUse(t *testing.T) {
	c := newCluster(t, namespace("a", "uid-a"), namespace("b", "uid-b"), node("n1", nil))
	n1 := c.start("n1")
	ids := allAssigned(t, c, []string{"a", "b"}, n1)
	if w := c.watermark("n1"); w != "0" {
		t.Fatalf("a new node's watermark is %q, want 0", w)
	}
	n1.setInUse(ids["a"])
	c.deleteNamespace("a")
	c.deleteNamespace("b")
	la, _ := c.lock(ids["a"])
	lb, _ := c.lock(ids["b"])
	if cmp, _ := compareRV(la.ResourceVersion, lb.ResourceVersion); cmp >= 0 {
		t.Fatalf("lock a (rv %s) should be older than lock b (rv %s)", la.ResourceVersion, lb.ResourceVersion)
	}
	n1.checked(t, 3)
	n1.settled(t)
	if w := c.watermark("n1"); w != "0" {
		t.Errorf("watermark %s moved although the oldest released id is in use", w)
	}
	if _, ok := c.lock(ids["b"]); !ok {
		t.Errorf("lock b let go past lock a, which is still in use")
	}
	n1.setInUse()
	ok, why := waitFor(wait, func() (bool, string) {
		return len(c.api.list()) == 0, fmt.Sprintf("%d locks left, watermark %s", len(c.api.list()), c.watermark("n1"))
	})
	if !ok {
		t.Fatal(why)
	}

	// Nothing terminating: checks write nothing.
	patches := c.nodePatches()
	n1.checked(t, 3)
	if p := c.nodePatches(); p != patches {
		t.Errorf("%d Node patches with nothing to release", p-patches)
	}
}

// TestMalformedLocks: locks that are not well-formed are reported, give no
// namespace an id, keep their id taken, and crash nothing.
func TestMalformedLocks(t *testing.T) {
	c := newCluster(t, namespace(home42, "uid-"+home42), namespace("web", "uid-web"), node("n1", nil))
	spec := func(ns string) map[string]any { return map[string]any{"namespace": ns, "namespaceUID": "uid-" + ns} }
	c.api.seed(lockObject("abc", spec("web")))
	c.api.seed(lockObject("42", nil))
	c.api.seed(lockObject("43", map[string]any{"namespace": int64(7), "namespaceUID": "uid-web"}))
	c.api.seed(lockObject("9000000", spec("web")))
	gone := lockObject("xyz", spec("web"))
	now := metav1.Now()
	gone.SetDeletionTimestamp(&now)
	gone.SetFinalizers([]string{Finalizer})
	c.api.seed(gone)

	a := c.start("n1")
	ids := allAssigned(t, c, []string{home42, "web"}, a)
	if ids[home42] != 44 {
		t.Errorf("%s (home 42, 42 and 43 taken by malformed locks) got %d, want 44", home42, ids[home42])
	}
	if !ValidID(ids["web"]) {
		t.Errorf("web got %d", ids["web"])
	}
	ok, why := waitFor(wait, func() (bool, string) {
		return c.api.get("xyz") == nil, "terminating malformed lock xyz still there"
	})
	if !ok {
		t.Fatal(why)
	}
	a.settled(t)
	for _, name := range []string{"abc", "42", "43", "9000000"} {
		if c.api.get(name) == nil {
			t.Errorf("malformed lock %s was deleted; it is left for an operator", name)
		}
	}
	bad := a.svc.Table().Malformed()
	if len(bad) != 4 {
		t.Fatalf("Malformed() = %q, want 4 entries", bad)
	}
	for i, want := range []string{`"42": spec: missing`, `"43": spec.namespace`, `"9000000": metadata.name`, `"abc": metadata.name`} {
		if !strings.Contains(bad[i], want) {
			t.Errorf("Malformed()[%d] = %q, want it to mention %q", i, bad[i], want)
		}
	}
}

// TestRecreatedNamespace: a namespace deleted and re-created under the same
// name, faster than the garbage collector: the new UID gets its own lock
// at once, and the allocator itself releases the orphan.
func TestRecreatedNamespace(t *testing.T) {
	c := newCluster(t, namespace("web", "uid-web"), node("n1", nil))
	a := c.start("n1")
	old := allAssigned(t, c, []string{"web"}, a)["web"]
	before := a.changeCount("web")
	ctx := context.Background()
	if err := c.kube.CoreV1().Namespaces().Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, namespace("web", "uid-web-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ok, why := waitFor(wait, func() (bool, string) {
		live := c.liveLocks()
		id, found := a.svc.Table().Lookup("web")
		return len(live["uid-web-2"]) == 1 && found && id == live["uid-web-2"][0] && id != old,
			fmt.Sprintf("locks %v, Lookup(web) = %d, %v", live, id, found)
	})
	if !ok {
		t.Fatal(why)
	}
	if a.changeCount("web") <= before {
		t.Error("no change notified for web")
	}
	// No garbage collector here: the allocator deletes the orphan after
	// OrphanGrace; no flows use it, so it goes.
	ok, why = waitFor(wait, func() (bool, string) {
		_, exists := c.lock(old)
		return !exists, fmt.Sprintf("orphan lock %d still there", old)
	})
	if !ok {
		t.Fatal(why)
	}
}

// TestDuplicateLocks: a namespace holding two locks uses the lowest
// everywhere; the other is released.
func TestDuplicateLocks(t *testing.T) {
	c := newCluster(t, namespace("dup", "uid-dup"), node("n1", nil))
	spec := map[string]any{"namespace": "dup", "namespaceUID": "uid-dup"}
	for _, name := range []string{"9", "5"} {
		u := lockObject(name, spec)
		u.SetFinalizers([]string{Finalizer})
		c.api.seed(u)
	}
	a := c.start("n1")
	if id, ok := a.svc.Table().Lookup("dup"); !ok || id != 5 {
		t.Fatalf("Lookup(dup) = %d, %v; want 5", id, ok)
	}
	ok, why := waitFor(wait, func() (bool, string) {
		_, has9 := c.lock(9)
		_, has5 := c.lock(5)
		return !has9 && has5, fmt.Sprintf("lock 5 %v, lock 9 %v", has5, has9)
	})
	if !ok {
		t.Fatal(why)
	}
	if id, ok := a.svc.Table().Lookup("dup"); !ok || id != 5 {
		t.Fatalf("Lookup(dup) = %d, %v; want 5", id, ok)
	}
}

// TestLeaderElection: with the election on, one allocator is active; when
// it stops, the other takes over.
func TestLeaderElection(t *testing.T) {
	c := newCluster(t, namespace("a", "uid-a"), node("n1", nil), node("n2", nil))
	e := func(id string) agentOpt {
		return withElection(Election{Identity: id, LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond})
	}
	n1 := c.start("n1", e("n1"))
	n2 := c.start("n2", e("n2"))
	allAssigned(t, c, []string{"a"}, n1, n2)
	var leader, other *agent
	ok, why := waitFor(wait, func() (bool, string) {
		l1, l2 := n1.svc.IsLeader(), n2.svc.IsLeader()
		switch {
		case l1 && !l2:
			leader, other = n1, n2
		case l2 && !l1:
			leader, other = n2, n1
		default:
			return false, fmt.Sprintf("leaders: n1 %v, n2 %v", l1, l2)
		}
		return true, ""
	})
	if !ok {
		t.Fatal(why)
	}
	lease, err := c.kube.CoordinationV1().Leases(DefaultLeaseNamespace).Get(context.Background(), DefaultLeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != leader.name {
		t.Fatalf("lease %s/%s: %v %+v", DefaultLeaseNamespace, DefaultLeaseName, err, lease)
	}
	leader.stop()
	if _, err := c.kube.CoreV1().Namespaces().Create(context.Background(), namespace("b", "uid-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	allAssigned(t, c, []string{"a", "b"}, other)
	if !other.svc.IsLeader() {
		t.Error("the remaining agent allocated without being the leader")
	}
}

// TestInUseUnknown: while the agent does not know which ids its flows use
// (InUse returns nil), its watermark stays.
func TestInUseUnknown(t *testing.T) {
	c := newCluster(t, namespace("a", "uid-a"), node("n1", nil))
	n1 := c.start("n1")
	n1.unknown()
	id := allAssigned(t, c, []string{"a"}, n1)["a"]
	c.deleteNamespace("a")
	n1.checked(t, 3)
	n1.settled(t)
	if w := c.watermark("n1"); w != "0" {
		t.Errorf("watermark %s moved while InUse was unknown", w)
	}
	if _, ok := c.lock(id); !ok {
		t.Fatal("lock let go while InUse was unknown")
	}
	n1.setInUse()
	ok, why := waitFor(wait, func() (bool, string) {
		_, exists := c.lock(id)
		return !exists, fmt.Sprintf("lock %d still there; watermark %s", id, c.watermark("n1"))
	})
	if !ok {
		t.Fatal(why)
	}
}

// TestManyNamespaces: 5,000 namespaces at once under two racing
// allocators; every one gets its own id.
func TestManyNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 namespaces: not in -short")
	}
	objs := namespaces(5000)
	c := newCluster(t, append(objs, node("n1", nil), node("n2", nil))...)
	start := time.Now()
	n1 := c.start("n1")
	n2 := c.start("n2")
	ids := allAssigned(t, c, names(objs), n1, n2)
	took := time.Since(start)
	seen := map[uint32]bool{}
	for ns, id := range ids {
		if seen[id] {
			t.Fatalf("id %d given twice (%s)", id, ns)
		}
		seen[id] = true
	}
	creates, _, deletes := c.api.mutations()
	t.Logf("5000 namespaces: all ids in %s; %d creates, %d releases of duplicates", took.Round(time.Millisecond), creates, deletes)
}
