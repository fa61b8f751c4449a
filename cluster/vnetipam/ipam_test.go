package vnetipam

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/model/vnet"
)

const (
	vniA = vnet.MinVNI + 1
	vniB = vnet.MinVNI + 2
)

func TestAssigns(t *testing.T) {
	cl := newCluster(t, "n1", "n2")
	cl.watchInvariant()
	cl.start("c1")
	cl.subnet("ns", "blue", vniA, "10.0.0.0/29")
	cl.subnet("ns", "v6", vniB, "fd00::/120")
	seen := map[netip.Addr]bool{}
	for i := range 6 {
		cl.attach("ns", fmt.Sprintf("a%d", i), "n1", "blue", vniA)
	}
	cl.attach("ns", "six", "n2", "v6", vniB)
	for i := range 6 {
		ip := cl.addressed("ns", fmt.Sprintf("a%d", i))
		if !netip.MustParsePrefix("10.0.0.0/29").Contains(ip) || ip.String() == "10.0.0.0" || ip.String() == "10.0.0.7" || seen[ip] {
			t.Errorf("a%d: %s (seen %v)", i, ip, seen)
		}
		seen[ip] = true
	}
	if ip := cl.addressed("ns", "six"); ip.String() != "fd00::1" {
		t.Errorf("six: %s, want fd00::1", ip)
	}
	if err := cl.invariant(); err != nil {
		t.Fatal(err)
	}
	// Every lock: named for its address, held by its attachment as its
	// controller, without blocking the owner's deletion.
	for _, l := range cl.locks() {
		ref, ok := l.Holder()
		if !ok || ref.BlockOwnerDeletion == nil || *ref.BlockOwnerDeletion || ref.Name != l.Spec.Attachment {
			t.Errorf("lock %s: holder %+v %v, spec %+v", l.Name, ref, ok, l.Spec)
		}
	}
	if n := len(cl.locks()); n != 7 {
		t.Errorf("%d locks, want 7", n)
	}
}

// Two controllers run at once against one API, over many attachments on
// two VNIs whose Subnets have exactly enough addresses, with one status
// write in five failing (a crash between the lock and the status write)
// and attachments deleted and created while they work: every attachment
// gets an address, at no moment is an address in two statuses or in a
// status without its lock, and in the end each attachment holds one lock.
func TestTwoControllersNeverDoubleAssign(t *testing.T) {
	cl := newCluster(t, "n1", "n2")
	cl.watchInvariant()
	var failed, raced atomic.Int64
	cl.api.SetBeforeWrite(func(verb, resource, sub string, u *unstructured.Unstructured) error {
		switch {
		case resource == vnet.ResourceNetworkAttachments && sub == "status" && rand.N(5) == 0:
			failed.Add(1)
			return apierrors.NewInternalError(errors.New("injected: the controller crashed before this write"))
		case resource == vnet.ResourceIPLocks && verb == "create" && raced.Load() < 5:
			// Whether the two controllers pick one address at once
			// depends on the scheduler: make the race certain a few
			// times, as another controller's create of the same lock
			// for another attachment that lands first.
			if other := rivalLocked(t, cl.api, u); other != nil {
				raced.Add(1)
				cl.api.SeedLocked(vnet.ResourceIPLocks, other)
				return apierrors.NewAlreadyExists(gr(resource), u.GetName())
			}
		}
		return nil
	})
	cl.subnet("ns", "a", vniA, "10.1.0.0/25") // 126 addresses
	cl.subnet("ns", "b", vniB, "10.1.0.0/26") // 62, on another VNI: the same addresses again
	c1, c2 := cl.start("c1"), cl.start("c2")
	name := func(subnet string, i int) string { return fmt.Sprintf("%s-%d", subnet, i) }
	var wg sync.WaitGroup
	for _, s := range []struct {
		subnet string
		vni    uint32
		n      int
	}{{"a", vniA, 126}, {"b", vniB, 62}} {
		wg.Go(func() {
			for i := range s.n {
				cl.attach("ns", name(s.subnet, i), []string{"n1", "n2"}[i%2], s.subnet, s.vni)
			}
		})
	}
	wg.Wait()
	// Churn: 20 of a's go, 20 others come.
	for i := range 20 {
		if err := cl.dyn.Resource(vnet.NetworkAttachmentGVR).Namespace("ns").Delete(context.Background(), name("a", i*5), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		cl.attach("ns", name("a-new", i), "n1", "a", vniA)
	}
	for _, n := range cl.api.List(vnet.ResourceNetworkAttachments) {
		cl.addressed("ns", n.GetName())
	}
	if err := cl.invariant(); err != nil {
		t.Fatal(err)
	}
	// Extra locks (of status writes that failed or lost a race) and the
	// deleted attachments' locks are freed.
	cl.eventually("one lock per attachment", func() error {
		if n := len(cl.locks()); n != 126+62 {
			return fmt.Errorf("%d locks", n)
		}
		return nil
	})
	// One more in a full Subnet: reported, not assigned.
	cl.api.SetBeforeWrite(nil)
	cl.attach("ns", "a-extra", "n1", "a", vniA)
	cl.ipamErrors("ns", "a-extra", "has no free address")
	conflicts := testutil.ToFloat64(c1.c.m.lockConflicts) + testutil.ToFloat64(c2.c.m.lockConflicts)
	t.Logf("lock creates %d (conflicts %v), status writes %d (%d failed)", cl.api.Count("create iplocks"), conflicts,
		cl.api.Count("update networkattachments/status"), failed.Load())
	t.Logf("races made certain: %d", raced.Load())
	if conflicts < float64(raced.Load()) || raced.Load() == 0 || failed.Load() == 0 {
		t.Errorf("the test did not exercise what it should: %v lock conflicts (%d races made certain), %d failed writes", conflicts, raced.Load(), failed.Load())
	}
}

// A controller killed in the middle of assigning (its context cancelled
// as its 30th status write fails, other writes in flight), and another
// started: every attachment gets an address, never one in two statuses,
// and the killed controller's locks without a status are adopted.
func TestControllerKilledMidAssignment(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.watchInvariant()
	cl.subnet("ns", "a", vniA, "10.2.0.0/24")
	var writes atomic.Int64
	killed := make(chan struct{})
	r := cl.start("c1")
	cl.api.SetBeforeWrite(func(verb, resource, sub string, _ *unstructured.Unstructured) error {
		if resource == vnet.ResourceNetworkAttachments && sub == "status" && writes.Add(1) == 30 {
			r.cancel()
			close(killed)
			return apierrors.NewServiceUnavailable("injected: killed before this write")
		}
		return nil
	})
	for i := range 150 {
		cl.attach("ns", fmt.Sprintf("a-%d", i), "n1", "a", vniA)
	}
	<-killed
	r.stop()
	assigned := 0
	for _, u := range cl.api.List(vnet.ResourceNetworkAttachments) {
		if ip, _, _ := unstructured.NestedString(u.Object, "status", "ip"); ip != "" {
			assigned++
		}
	}
	if assigned >= 150 {
		t.Fatalf("c1 assigned all %d before it was killed", assigned)
	}
	cl.start("c2")
	for i := range 150 {
		cl.addressed("ns", fmt.Sprintf("a-%d", i))
	}
	cl.eventually("one lock per attachment", func() error {
		if n := len(cl.locks()); n != 150 {
			return fmt.Errorf("%d locks", n)
		}
		return nil
	})
	t.Logf("c1 assigned %d of 150 before it was killed", assigned)
}

// A crash between the lock's create and the status write leaves a lock
// held by an attachment without an address: the controller adopts it.
func TestCrashBetweenLockAndStatus(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.watchInvariant()
	cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	a := cl.attach("ns", "a", "n1", "blue", vniA)
	att := attObj("ns", "a", "n1", "blue", vniA)
	att.UID = a.GetUID()
	cl.api.Seed(vnet.ResourceIPLocks, mustU(t, vnet.NewIPLock(att, vniA, netip.MustParseAddr("10.0.0.77"))))
	// And one attachment whose name had a lock under an earlier UID: that
	// attachment is gone (deleted and created again while no controller
	// ran), so its lock is freed and the new one gets an address anew.
	b := cl.attach("ns", "b", "n1", "blue", vniA)
	old := attObj("ns", "b", "n1", "blue", vniA)
	old.UID = "uid-of-an-earlier-b"
	cl.api.Seed(vnet.ResourceIPLocks, mustU(t, vnet.NewIPLock(old, vniA, netip.MustParseAddr("10.0.0.88"))))

	cl.start("c1")
	if ip := cl.addressed("ns", "a"); ip.String() != "10.0.0.77" {
		t.Errorf("a got %s, want its lock's 10.0.0.77", ip)
	}
	cl.addressed("ns", "b")
	cl.eventually("b's old lock freed", func() error {
		h := cl.lockHolders()
		if got := h["ns/"+vnet.LockName(vniA, netip.MustParseAddr("10.0.0.88"))]; got == "b@uid-of-an-earlier-b" {
			return fmt.Errorf("still held by the earlier b")
		}
		for name, holder := range h {
			if strings.HasPrefix(holder, "b@") && holder != "b@"+string(b.GetUID()) {
				return fmt.Errorf("%s held by %s", name, holder)
			}
		}
		return nil
	})
	if n := len(cl.locks()); n != 2 {
		t.Errorf("%d locks, want 2: %v", n, cl.lockHolders())
	}
}

// An address in a status without a lock (deleted by hand, or a lock the
// controller has not seen) is locked again, not replaced; one whose lock
// another attachment holds is replaced, and the other keeps it.
func TestStatusAddressLock(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	withStatus := func(name, ip string) *vnet.NetworkAttachment {
		a := attObj("ns", name, "n1", "blue", vniA)
		a.Status.IP = ip
		a.Status.MAC = vnet.MACOf(vniA, netip.MustParseAddr(ip)).String()
		u := cl.api.Seed(vnet.ResourceNetworkAttachments, mustU(t, a))
		a.UID = u.GetUID()
		return a
	}
	withStatus("relock", "10.0.0.9")
	holder := withStatus("holder", "10.0.0.10")
	cl.api.Seed(vnet.ResourceIPLocks, mustU(t, vnet.NewIPLock(holder, vniA, netip.MustParseAddr("10.0.0.10"))))
	withStatus("usurper", "10.0.0.10")

	r := cl.start("c1")
	cl.eventually("relock's lock taken again", func() error {
		if h := cl.lockHolders()["ns/v8388609-10-0-0-9"]; !strings.HasPrefix(h, "relock@") {
			return fmt.Errorf("lock holder %q", h)
		}
		return nil
	})
	if ip := cl.addressed("ns", "relock"); ip.String() != "10.0.0.9" {
		t.Errorf("relock: %s, want 10.0.0.9 kept", ip)
	}
	cl.eventually("usurper moved", func() error {
		if ip := cl.attachment("ns", "usurper").Status.IP; ip == "10.0.0.10" || ip == "" {
			return fmt.Errorf("usurper at %q", ip)
		}
		return nil
	})
	if ip := cl.addressed("ns", "holder"); ip.String() != "10.0.0.10" {
		t.Errorf("holder: %s, want 10.0.0.10 kept", ip)
	}
	cl.eventually("invariant", cl.invariant)
	if ev := cl.ev.find("Warning", ReasonAddressConflict, "ns/usurper", "status.ip: 10.0.0.10 on VNI 8388609 is locked by attachment holder"); len(ev) == 0 {
		t.Errorf("no AddressConflict event: %v", cl.ev.all())
	}
	if got := testutil.ToFloat64(r.c.m.lockConflicts); got < 1 {
		t.Errorf("lock conflicts %v", got)
	}
}

// Bad input: each problem is written into the attachment's
// status.errors.ipam and a Warning event naming the object and the field,
// and nothing else is disturbed.
func TestBadInput(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.subnet("ns", "blue", vniA, "10.0.0.0/30") // 2 addresses
	cl.subnet("ns", "overlap", vniA, "10.0.0.0/24")
	cl.subnet("ns", "other-vni", vniB, "10.0.0.0/24")
	cl.subnet("other", "elsewhere", vniA, "10.9.0.0/24") // VNI A belongs to ns
	cl.api.Seed(vnet.ResourceSubnets, mustU(t, subnetObj("ns", "invalid", vniB, "10.1.0.1/24")))
	r := cl.start("c1")
	cl.attach("ns", "ok1", "n1", "blue", vniA)
	cl.attach("ns", "ok2", "n1", "blue", vniA)
	okIPs := []netip.Addr{cl.addressed("ns", "ok1"), cl.addressed("ns", "ok2")}

	for _, tc := range []struct {
		name, node, subnet string
		vni                uint32
		ns                 string
		reason, want       string
	}{
		{"missing-subnet", "n1", "nope", vniA, "ns", ReasonSubnetNotFound, `spec.subnet: Subnet "nope" not found in namespace ns`},
		{"full", "n1", "blue", vniA, "ns", ReasonSubnetFull, "spec.subnet: Subnet blue (10.0.0.0/30) has no free address on VNI 8388609"},
		{"no-node", "n9", "other-vni", vniB, "ns", ReasonNodeNotFound, `spec.node: Node "n9" not found`},
		{"vni-mismatch", "n1", "other-vni", vniA, "ns", ReasonVNIMismatch, "spec.vni: 8388609 is not the VNI 8388610 of Subnet other-vni"},
		{"on-overlap", "n1", "overlap", vniA, "ns", ReasonSubnetConflict, "spec.subnet: Subnet overlap: spec.cidr: 10.0.0.0/24 overlaps 10.0.0.0/30 of the older Subnet blue on VNI 8388609"},
		{"other-namespace", "n1", "elsewhere", vniA, "other", ReasonSubnetConflict, "spec.subnet: Subnet elsewhere: spec.vni: VNI 8388609 belongs to namespace ns"},
		{"invalid-subnet", "n1", "invalid", vniB, "ns", ReasonSubnetInvalid, "spec.subnet: Subnet invalid: spec.cidr: \"10.1.0.1/24\" has host bits set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl.t = t
			defer func() { cl.t = t }()
			cl.attach(tc.ns, tc.name, tc.node, tc.subnet, tc.vni)
			errs := cl.ipamErrors(tc.ns, tc.name, tc.want)
			if len(errs) != 1 {
				t.Errorf("errors.ipam %q, want one", errs)
			}
			if a := cl.attachment(tc.ns, tc.name); a.Status.IP != "" {
				t.Errorf("assigned %s despite the problem", a.Status.IP)
			}
			cl.eventually("event", func() error {
				if ev := cl.ev.find("Warning "+tc.reason+" NetworkAttachment "+tc.ns+"/"+tc.name+": NetworkAttachment "+tc.ns+"/"+tc.name+": ", tc.want); len(ev) != 1 {
					return fmt.Errorf("%d events", len(ev))
				}
				return nil
			})
		})
	}
	cl.t = t
	// The Subnets in conflict say so, and the older ones do not.
	if errs := cl.subnetStatus("ns", "overlap"); len(errs) != 1 || !strings.Contains(errs[0], "overlaps 10.0.0.0/30 of the older Subnet blue") {
		t.Errorf("Subnet overlap: errors %q", errs)
	}
	cl.eventually("Subnet statuses", func() error {
		if errs := cl.subnetStatus("other", "elsewhere"); len(errs) != 1 || !strings.Contains(errs[0], "spec.vni: VNI 8388609 belongs to namespace ns") {
			return fmt.Errorf("Subnet elsewhere: errors %q", errs)
		}
		if errs := cl.subnetStatus("ns", "invalid"); len(errs) != 1 || !strings.HasPrefix(errs[0], "spec.cidr:") {
			return fmt.Errorf("Subnet invalid: errors %q", errs)
		}
		for _, s := range []string{"blue", "other-vni"} {
			if errs := cl.subnetStatus("ns", s); len(errs) != 0 {
				return fmt.Errorf("Subnet %s: errors %q", s, errs)
			}
		}
		return nil
	})
	if ev := cl.ev.find("Warning", ReasonSubnetConflict, "Subnet ns/overlap: Subnet ns/overlap: spec.cidr:"); len(ev) != 1 {
		t.Errorf("Subnet events %q", ev)
	}
	// Nothing else disturbed.
	for i, n := range []string{"ok1", "ok2"} {
		if ip := cl.addressed("ns", n); ip != okIPs[i] {
			t.Errorf("%s moved from %s to %s", n, okIPs[i], ip)
		}
	}
	if err := cl.invariant(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(r.c.m.failures.WithLabelValues(ReasonSubnetConflict)); got != 2 {
		t.Errorf("SubnetConflict failures %v, want 2", got)
	}

	// Fixing the input clears the problem: the Node appears, the missing
	// Subnet is created, room is made in the full one.
	if _, err := cl.kube.CoreV1().Nodes().Create(context.Background(), node("n9"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.addressed("ns", "no-node")
	cl.subnet("ns", "nope", vniA, "10.0.1.0/24")
	cl.addressed("ns", "missing-subnet")
	if err := cl.dyn.Resource(vnet.NetworkAttachmentGVR).Namespace("ns").Delete(context.Background(), "ok1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ip := cl.addressed("ns", "full"); ip != okIPs[0] {
		t.Errorf("full got %s, want ok1's freed %s", ip, okIPs[0])
	}
	cl.eventually("invariant", cl.invariant)
}

// Deleting an attachment frees its lock, without the garbage collector.
func TestDeletionFreesLock(t *testing.T) {
	cl := newCluster(t, "n1")
	r := cl.start("c1")
	cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	cl.attach("ns", "a", "n1", "blue", vniA)
	ip := cl.addressed("ns", "a")
	if err := cl.dyn.Resource(vnet.NetworkAttachmentGVR).Namespace("ns").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.eventually("lock freed", func() error {
		if l := cl.api.Get(vnet.ResourceIPLocks, "ns", vnet.LockName(vniA, ip)); l != nil {
			return fmt.Errorf("lock %s still there", l.GetName())
		}
		return nil
	})
	if got := testutil.ToFloat64(r.c.m.freed.WithLabelValues(freedGone)); got != 1 {
		t.Errorf("freed %v", got)
	}
	// With a garbage collector that gets there first, nothing goes wrong.
	cl.attach("ns", "b", "n1", "blue", vniA)
	ip = cl.addressed("ns", "b")
	cl.api.Remove(vnet.ResourceNetworkAttachments, "ns", "b")
	cl.api.CollectGarbage()
	if l := cl.api.Get(vnet.ResourceIPLocks, "ns", vnet.LockName(vniA, ip)); l != nil {
		t.Fatalf("the garbage collector left %s", l.GetName())
	}
	cl.attach("ns", "c", "n1", "blue", vniA)
	cl.addressed("ns", "c")
	if n := len(cl.locks()); n != 1 {
		t.Errorf("%d locks, want c's alone", n)
	}
}

// An attachment deleted and created again under the same name while no
// controller was looking: its old lock (the old UID's) is freed and the
// new attachment gets an address of its own. And a Subnet deleted and
// created again with another CIDR: its attachment moves into the new CIDR.
func TestRecreatedWhileNotLooking(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.watchInvariant()
	cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	cl.subnet("ns", "green", vniB, "10.5.0.0/24")
	old := cl.attach("ns", "a", "n1", "blue", vniA)
	cl.attach("ns", "g", "n1", "green", vniB)
	r := cl.start("c1")
	oldIP := cl.addressed("ns", "a")
	gIP := cl.addressed("ns", "g")
	r.stop()

	cl.api.Remove(vnet.ResourceNetworkAttachments, "ns", "a")
	cl.attach("ns", "a", "n1", "blue", vniA)
	cl.api.Remove(vnet.ResourceSubnets, "ns", "green")
	cl.subnet("ns", "green", vniB, "10.6.0.0/24")

	cl.start("c2")
	cl.eventually("the old a's lock freed", func() error {
		for name, h := range cl.lockHolders() {
			if strings.HasSuffix(h, "@"+string(old.GetUID())) {
				return fmt.Errorf("%s still held by the old a", name)
			}
		}
		return nil
	})
	cl.addressed("ns", "a")
	cl.eventually("g moved into 10.6.0.0/24", func() error {
		ip, err := netip.ParseAddr(cl.attachment("ns", "g").Status.IP)
		if err != nil || !netip.MustParsePrefix("10.6.0.0/24").Contains(ip) {
			return fmt.Errorf("g at %v", ip)
		}
		if cl.api.Get(vnet.ResourceIPLocks, "ns", vnet.LockName(vniB, gIP)) != nil {
			return fmt.Errorf("g's old lock %s still there", gIP)
		}
		return nil
	})
	if ev := cl.ev.find("Warning", ReasonAddressOutsideSubnet, "ns/g", gIP.String()); len(ev) == 0 {
		t.Errorf("no AddressOutsideSubnet event: %v", cl.ev.all())
	}
	if n := len(cl.locks()); n != 2 {
		t.Errorf("%d locks, want 2: %v (old a had %s)", n, cl.lockHolders(), oldIP)
	}
}

// An attachment without spec.vni gets its Subnet's, then an address.
func TestVNIDefaulted(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.start("c1")
	cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	cl.attach("ns", "a", "n1", "blue", 0)
	cl.addressed("ns", "a")
	if a := cl.attachment("ns", "a"); a.Spec.VNI != vniA {
		t.Errorf("spec.vni %d, want %d", a.Spec.VNI, vniA)
	}
}

// The metrics, and what an assignment costs the API server with one
// controller: one lock create and one status write, nothing read.
func TestMetricsAndRequests(t *testing.T) {
	const n = 100
	cl := newCluster(t, "n1")
	r := cl.start("c1")
	cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	for i := range n {
		cl.attach("ns", fmt.Sprintf("a%d", i), "n1", "blue", vniA)
	}
	for i := range n {
		cl.addressed("ns", fmt.Sprintf("a%d", i))
	}
	if got := testutil.ToFloat64(r.c.m.assignments); got != n {
		t.Errorf("assignments %v, want %d", got, n)
	}
	requests := map[string]int{}
	for _, a := range cl.ctrlDyn.Actions() {
		if v := a.GetVerb(); v != "list" && v != "watch" {
			requests[v+" "+a.GetResource().Resource+"/"+a.GetSubresource()]++
		}
	}
	if want := fmt.Sprint(map[string]int{"create iplocks/": n, "update networkattachments/status": n}); fmt.Sprint(requests) != want {
		t.Errorf("requests %v, want %s", requests, want)
	}
	if got := testutil.CollectAndCount(r.reg, "nodeflow_ipam_assignment_seconds"); got != 1 {
		t.Errorf("latency histogram series %d", got)
	}
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "nodeflow_ipam_assignment_seconds" {
			if got := mf.GetMetric()[0].GetHistogram().GetSampleCount(); got != n {
				t.Errorf("latency samples %d, want %d", got, n)
			}
		}
	}
	if got := testutil.ToFloat64(r.c.m.leader); got != 1 {
		t.Errorf("leader %v", got)
	}
}

// The seed's record of actions in flight, step by step, on a controller
// whose caches the test fills by hand: it does not redo an assignment
// while its cache lags, trusts its own lock while the lock cache lags,
// and asks the API server once the attachment has changed since.
func TestInFlightRecord(t *testing.T) {
	cl := newCluster(t, "n1")
	c, err := New(Options{Dynamic: cl.ctrlDyn, Kube: cl.kube, Recorder: cl.ev, Resync: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.nodes.GetIndexer().Add(node("n1")); err != nil {
		t.Fatal(err)
	}
	s := cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	a := cl.attach("ns", "a", "n1", "blue", vniA)
	if err := c.subnets.GetIndexer().Add(s); err != nil {
		t.Fatal(err)
	}
	if err := c.attachments.GetIndexer().Add(a); err != nil {
		t.Fatal(err)
	}
	k := key{kind: attachmentKind, namespace: "ns", name: "a"}
	requests := cl.api.Requests
	step := func(what string, want map[string]int) {
		t.Helper()
		before := requests()
		if err := c.syncAttachment(ctx, k); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		after := requests()
		got := map[string]int{}
		for w, n := range after {
			if d := n - before[w]; d > 0 {
				got[w] = d
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: requests %v, want %v", what, got, want)
		}
	}
	// 1. The assignment: a lock, then the status.
	step("assign", map[string]int{"create iplocks": 1, "update networkattachments/status": 1})
	if c.state.flightCount() != 1 {
		t.Fatal("no record in flight")
	}
	// 2. The cache still has the attachment as it was seen: nothing to do.
	step("cache lags", map[string]int{})
	// 3. The cache has the status, not the lock: the record vouches for it.
	if err := c.attachments.GetIndexer().Update(cl.api.Get(vnet.ResourceNetworkAttachments, "ns", "a")); err != nil {
		t.Fatal(err)
	}
	step("lock cache lags", map[string]int{})
	// 4. An agent writes the status (hostIP): the record no longer holds,
	// and the lock, still not in the cache, is read from the API server.
	cur := cl.api.Get(vnet.ResourceNetworkAttachments, "ns", "a")
	cur.Object["status"].(map[string]any)["hostIP"] = "192.0.2.1"
	updated, err := cl.dyn.Resource(vnet.NetworkAttachmentGVR).Namespace("ns").UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.attachments.GetIndexer().Update(updated); err != nil {
		t.Fatal(err)
	}
	step("agent wrote", map[string]int{"get iplocks": 1})
	if c.state.flightCount() != 0 {
		t.Error("the stale record was kept")
	}
	// 5. Once the lock is in the cache, nothing is asked.
	ip := netip.MustParseAddr(updated.Object["status"].(map[string]any)["ip"].(string))
	if err := c.locks.GetIndexer().Add(cl.api.Get(vnet.ResourceIPLocks, "ns", vnet.LockName(vniA, ip))); err != nil {
		t.Fatal(err)
	}
	step("caches current", map[string]int{})
}

func TestConflicts(t *testing.T) {
	mk := func(ns, name, uid, cidr string, sec int64) validSubnet {
		s := subnetObj(ns, name, vniA, cidr)
		s.UID = types.UID(uid)
		s.CreationTimestamp = metav1.Unix(sec, 0)
		return validSubnet{s, netip.MustParsePrefix(cidr)}
	}
	all := []validSubnet{
		mk("ns", "c", "3", "10.0.0.0/24", 3),
		mk("ns", "a", "1", "10.0.0.0/16", 1),
		mk("ns", "b", "2", "10.1.0.0/24", 2),
		mk("other", "d", "4", "10.2.0.0/24", 1), // as old as a: ns < other
		mk("ns", "e", "5", "10.0.1.0/24", 3),    // overlaps a
		mk("ns", "f", "6", "10.3.0.0/24", 3),
	}
	want := map[string]string{
		"a": "",
		"b": "",
		"c": "spec.cidr: 10.0.0.0/24 overlaps 10.0.0.0/16 of the older Subnet a on VNI 8388609",
		"d": "spec.vni: VNI 8388609 belongs to namespace ns, where its oldest Subnet a is: a VNI's Subnets must all be in one namespace",
		"e": "spec.cidr: 10.0.1.0/24 overlaps 10.0.0.0/16 of the older Subnet a on VNI 8388609",
		"f": "",
	}
	for _, s := range all {
		got := strings.Join(problemStrings(conflicts(s.s, s.p, all)), "; ")
		if got != want[s.s.Name] {
			t.Errorf("%s: %q, want %q", s.s.Name, got, want[s.s.Name])
		}
	}
}

// An address in a status that another attachment holds, in a Subnet with
// no other address free: the address is removed from the status, which
// says why.
func TestConflictingAddressWithoutReplacement(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.subnet("ns", "tiny", vniA, "10.0.0.0/31") // 10.0.0.0 and 10.0.0.1
	a := cl.attach("ns", "a", "n1", "tiny", vniA)
	b := cl.attach("ns", "b", "n1", "tiny", vniA)
	for _, h := range []struct {
		u  *unstructured.Unstructured
		ip string
	}{{a, "10.0.0.0"}, {b, "10.0.0.1"}} {
		att := attObj("ns", h.u.GetName(), "n1", "tiny", vniA)
		att.UID = h.u.GetUID()
		cl.api.Seed(vnet.ResourceIPLocks, mustU(t, vnet.NewIPLock(att, vniA, netip.MustParseAddr(h.ip))))
	}
	usurper := attObj("ns", "usurper", "n1", "tiny", vniA)
	usurper.Status.IP, usurper.Status.MAC = "10.0.0.1", vnet.MACOf(vniA, netip.MustParseAddr("10.0.0.1")).String()
	cl.api.Seed(vnet.ResourceNetworkAttachments, mustU(t, usurper))
	cl.start("c1")
	cl.ipamErrors("ns", "usurper", "has no free address")
	if st := cl.attachment("ns", "usurper").Status; st.IP != "" || st.MAC != "" {
		t.Errorf("usurper keeps %s %s", st.IP, st.MAC)
	}
	cl.eventually("invariant", cl.invariant)
}
