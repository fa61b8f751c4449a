package vnetfeature

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/vnetflows"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/model/vnet"
)

const (
	vniX uint32 = 0x800001
	vniY uint32 = 0x800002
	vniZ uint32 = 0x800003
)

func subnet(ns, name string, vni uint32, cidr string) *vnet.Subnet {
	return &vnet.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: vnet.SubnetSpec{VNI: vni, CIDR: cidr}}
}

// att is an attachment; ip "" has no address yet, hostIP "" was not made
// by its node's agent yet.
func att(ns, name, node, subnet string, vni uint32, ip, hostIP string) *vnet.NetworkAttachment {
	a := &vnet.NetworkAttachment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: vnet.NetworkAttachmentSpec{Node: node, Subnet: subnet, VNI: vni}}
	if ip != "" {
		a.Status.IP = ip
		a.Status.MAC = vnet.MACOf(vni, netip.MustParseAddr(ip)).String()
	}
	a.Status.HostIP = hostIP
	return a
}

// rig runs the feature on a featuretest.Host (node1, 172.30.0.11) against
// the fake API, with a recording host side.
type rig struct {
	t         *testing.T
	api       *fakeAPI
	h         *featuretest.Host
	host      *fakeHost
	f         *Agent
	notServed atomic.Bool
	ctx       context.Context
}

func newRig(t *testing.T, existing map[string]string, objs ...runtime.Object) *rig {
	r := &rig{t: t, api: newFakeAPI(t), h: featuretest.New(featuretest.DefaultNode()), host: newFakeHost(existing)}
	for _, o := range objs {
		r.api.create(o)
	}
	fd := r.h.Client.Discovery().(*fakediscovery.FakeDiscovery)
	fd.Resources = []*metav1.APIResourceList{{GroupVersion: vnet.APIVersion, APIResources: []metav1.APIResource{
		{Name: vnet.ResourceNetworkAttachments}, {Name: vnet.ResourceSubnets}, {Name: vnet.ResourceIPLocks}}}}
	fd.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		if r.notServed.Load() {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: vnet.Group}, "")
		}
		return false, nil, nil
	})
	r.f = New(Options{Dynamic: r.api.client, RetryInterval: 20 * time.Millisecond, CheckInterval: time.Hour,
		DiscoveryInterval: 5 * time.Millisecond, DiscoveryMaxInterval: 20 * time.Millisecond, SyncTimeout: 10 * time.Second})
	r.f.host = r.host
	r.h.Restrict(r.f.Owns())
	if err := r.f.Init(r.h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.ctx = ctx
	return r
}

func (r *rig) sync() {
	r.t.Helper()
	if err := r.f.Sync(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) run() {
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(r.ctx)
	go func() { r.f.Run(ctx); close(done) }()
	r.t.Cleanup(func() { cancel(); <-done })
}

// flows returns the flows of owner on br0, as strings.
func (r *rig) flows(owner string) []string {
	st, ok := r.h.Stores[plan.Pod].Get(owner)
	if !ok {
		return nil
	}
	var out []string
	for _, f := range st.Flows {
		out = append(out, f.String())
	}
	return out
}

// gauge reads one of the feature's gauges.
func (r *rig) informers(resource string) int {
	return int(testutil.ToFloat64(r.f.m.informers.WithLabelValues(resource)))
}

func (r *rig) cached(resource, selector string) int {
	return int(testutil.ToFloat64(r.f.m.cached.WithLabelValues(resource, selector)))
}

// expect checks the informers and caches: nAtt attachment informers, nSub
// Subnet ones, and how many objects each selector holds.
func (r *rig) expect(nAtt, nSub, node, vniAtts, vniSubs int) error {
	got := []int{r.informers(vnet.ResourceNetworkAttachments), r.informers(vnet.ResourceSubnets),
		r.cached(vnet.ResourceNetworkAttachments, "node"), r.cached(vnet.ResourceNetworkAttachments, "vni"), r.cached(vnet.ResourceSubnets, "vni")}
	want := []int{nAtt, nSub, node, vniAtts, vniSubs}
	if !slices.Equal(got, want) {
		return fmt.Errorf("informers (attachments, subnets) and cached (node, vni attachments, vni subnets) %v, want %v", got, want)
	}
	return nil
}

func ifname(uid string) string { return InterfaceName(types.UID(uid)) }

func (r *rig) lastStatus(key string) map[string]any {
	as := r.api.appliedTo(key)
	if len(as) == 0 {
		return nil
	}
	return as[len(as)-1].status
}

// TestInformersFollowTheRelevantVNIs: the node's agent watches its own
// attachments, and the attachments and Subnets of their VNIs only, with
// one informer each, started when the first attachment of the node on a
// VNI appears and stopped (its watch closed, its cache dropped) when the
// last goes. The caches never hold another VNI's objects.
func TestInformersFollowTheRelevantVNIs(t *testing.T) {
	r := newRig(t, nil,
		subnet("ta", "blue", vniX, "10.10.0.0/24"), subnet("tb", "red", vniY, "10.10.0.0/24"), subnet("tc", "green", vniZ, "10.30.0.0/24"),
		att("ta", "a1", "node1", "blue", vniX, "10.10.0.1", ""),             // uid-4
		att("ta", "a2", "node2", "blue", vniX, "10.10.0.2", "172.30.0.12"),  // uid-5
		att("ta", "a3", "node3", "blue", vniX, "10.10.0.3", "172.30.0.13"),  // uid-6
		att("tb", "b1", "node2", "red", vniY, "10.10.0.1", "172.30.0.12"),   // uid-7
		att("tc", "c1", "node3", "green", vniZ, "10.30.0.1", "172.30.0.13"), // uid-8
		att("ta", "a4", "node2", "blue", vniX, "10.10.0.4", ""),             // not made by its agent yet
	)
	r.sync()

	// One informer on this node's attachments, two for VNI X.
	if err := r.expect(2, 1, 1, 4, 1); err != nil {
		t.Fatal(err)
	}
	if r.api.openWatches(vnet.ResourceNetworkAttachments, fieldVNI, fmt.Sprint(vniY)) != 0 || r.api.openWatches(vnet.ResourceSubnets, fieldVNI, fmt.Sprint(vniZ)) != 0 {
		t.Error("watches on VNIs this node has no attachment on")
	}
	a1 := ifname("uid-4")
	if ns, ok := r.host.interfaces()[a1]; !ok || ns != "vnet-ta.a1" {
		t.Errorf("interfaces %v, want %s in vnet-ta.a1", r.host.interfaces(), a1)
	}
	if fs := r.flows(vnetflows.LocalOwner("ta", "a1")); len(fs) != 6 {
		t.Errorf("a1's flows: %v", fs)
	}
	// The VNI's remote mappings: a2 and a3 (a4 has no host yet), each an
	// ARP answer and a tunnel egress, and a tunnel ingress per node.
	remote := strings.Join(r.flows(vnetflows.VNIOwner(vniX)), "\n")
	if n := len(r.flows(vnetflows.VNIOwner(vniX))); n != 6 || !strings.Contains(remote, "tun_src=172.30.0.12") || !strings.Contains(remote, "nw_dst=10.10.0.3") ||
		strings.Contains(remote, "10.10.0.4") {
		t.Errorf("VNI X's remote flows (%d):\n%s", n, remote)
	}
	st := r.lastStatus("ta/a1")
	if st == nil || st["hostIP"] != "172.30.0.11" || st["ifcName"] != a1 || fmt.Sprint(st["errors"]) != "map[host:[]]" {
		t.Errorf("a1's status apply %v", st)
	}
	if as := r.api.appliedTo("ta/a1"); len(as) != 1 || as[0].manager != "nodeflow-agent/node1" {
		t.Errorf("applies %+v, want one by nodeflow-agent/node1", as)
	}
	for _, key := range []string{"ta/a2", "tb/b1", "tc/c1"} {
		if len(r.api.appliedTo(key)) != 0 {
			t.Errorf("wrote the status of another node's attachment %s", key)
		}
	}

	r.run()
	// An attachment of this node on VNI Y: Y's informers start.
	r.api.create(att("tb", "b2", "node1", "red", vniY, "10.10.0.5", ""))
	eventually(t, "VNI Y's informers", func() error {
		if err := r.expect(3, 2, 2, 6, 2); err != nil {
			return err
		}
		if len(r.flows(vnetflows.VNIOwner(vniY))) != 3 || len(r.flows(vnetflows.LocalOwner("tb", "b2"))) != 6 {
			return fmt.Errorf("VNI Y flows %v, b2's %v", r.flows(vnetflows.VNIOwner(vniY)), r.flows(vnetflows.LocalOwner("tb", "b2")))
		}
		return nil
	})
	// A remote attachment moves: only its VNI's mappings change.
	before := r.flows(vnetflows.LocalOwner("ta", "a1"))
	r.api.update("ta", "a2", func(a *vnet.NetworkAttachment) {
		a.Status.IP, a.Status.MAC = "10.10.0.9", vnet.MACOf(vniX, netip.MustParseAddr("10.10.0.9")).String()
	})
	eventually(t, "a2's new address", func() error {
		if fs := strings.Join(r.flows(vnetflows.VNIOwner(vniX)), "\n"); !strings.Contains(fs, "nw_dst=10.10.0.9") || strings.Contains(fs, "10.10.0.2") {
			return fmt.Errorf("VNI X's flows:\n%s", fs)
		}
		return nil
	})
	if !slices.Equal(before, r.flows(vnetflows.LocalOwner("ta", "a1"))) {
		t.Error("a remote change rewrote a local attachment's flows")
	}

	// The last attachment of this node on VNI X goes: X's informers stop,
	// their watches close, and everything of a1 and of X goes.
	r.api.delete(vnet.NetworkAttachmentGVR, "ta", "a1")
	eventually(t, "VNI X's informers stopped", func() error {
		if err := r.expect(2, 1, 1, 2, 1); err != nil {
			return err
		}
		if n := r.api.openWatches(vnet.ResourceNetworkAttachments, fieldVNI, fmt.Sprint(vniX)) + r.api.openWatches(vnet.ResourceSubnets, fieldVNI, fmt.Sprint(vniX)); n != 0 {
			return fmt.Errorf("%d watches on VNI X still open", n)
		}
		if _, ok := r.host.interfaces()[a1]; ok {
			return fmt.Errorf("a1's interface is still there")
		}
		if r.flows(vnetflows.LocalOwner("ta", "a1")) != nil || r.flows(vnetflows.VNIOwner(vniX)) != nil {
			return fmt.Errorf("a1's or VNI X's flows are still wanted")
		}
		return nil
	})
	if r.api.openWatches(vnet.ResourceNetworkAttachments, fieldVNI, fmt.Sprint(vniZ)) != 0 {
		t.Error("a watch on VNI Z")
	}
}

// TestBadInput: an attachment without an address gets nothing; a missing
// Subnet, an out-of-range VNI or a failure to make the interface are
// reported in status.errors.host and in a Warning event naming the object
// and the field, and disturb no other attachment; once fixed, the
// attachment is made.
func TestBadInput(t *testing.T) {
	r := newRig(t, nil,
		subnet("ta", "blue", vniX, "10.10.0.0/24"),
		att("ta", "good", "node1", "blue", vniX, "10.10.0.1", ""),
		att("ta", "nosubnet", "node1", "nope", vniX, "10.10.0.2", ""),
		att("ta", "badvni", "node1", "blue", 5, "10.10.0.3", ""),
		att("ta", "noip", "node1", "blue", vniX, "", ""),
		att("ta", "outside", "node1", "blue", vniX, "10.99.0.1", ""),
		att("ta", "elsewhere", "node2", "nope", vniX, "10.10.0.5", ""),
	)
	r.sync()
	wantErr := map[string]string{
		"ta/nosubnet": `spec.subnet: Subnet "nope" not found in namespace ta on VNI 8388609`,
		"ta/badvni":   "spec.vni: 5 is not a virtual network's VNI",
		"ta/outside":  "status.ip: 10.99.0.1 is not in Subnet blue (10.10.0.0/24)",
	}
	for key, want := range wantErr {
		st := r.lastStatus(key)
		if !strings.Contains(fmt.Sprint(st), want) || st["ifcName"] != nil {
			t.Errorf("%s: status %v, want errors.host with %q and no interface", key, st, want)
		}
	}
	var events []string
	for len(r.h.Events.Events) > 0 {
		events = append(events, <-r.h.Events.Events)
	}
	for _, want := range []string{
		"Warning SubnetNotFound NetworkAttachment ta/nosubnet: spec.subnet:",
		"Warning VNIInvalid NetworkAttachment ta/badvni: spec.vni:",
		"Warning AddressInvalid NetworkAttachment ta/outside: status.ip:",
	} {
		if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, want) }) {
			t.Errorf("no event %q among %q", want, events)
		}
	}
	if len(events) != 3 {
		t.Errorf("events %q, want 3", events)
	}
	if st := r.lastStatus("ta/good"); st == nil || st["ifcName"] == nil {
		t.Errorf("the good attachment was disturbed: %v", st)
	}
	if len(r.api.appliedTo("ta/noip")) != 0 || len(r.api.appliedTo("ta/elsewhere")) != 0 {
		t.Error("wrote the status of an attachment without an address, or of another node's")
	}
	if n := len(r.host.interfaces()); n != 1 {
		t.Errorf("interfaces %v, want the good attachment's only", r.host.interfaces())
	}

	r.run()
	// The Subnet appears: the attachment is made, its errors cleared.
	r.api.create(subnet("ta", "nope", vniX, "10.10.0.0/24"))
	eventually(t, "nosubnet made once its Subnet exists", func() error {
		if st := r.lastStatus("ta/nosubnet"); st["ifcName"] == nil || fmt.Sprint(st["errors"]) != "map[host:[]]" {
			return fmt.Errorf("status %v", st)
		}
		return nil
	})
	// Making the interface fails: reported, retried, then made.
	r.host.mu.Lock()
	r.host.failWith = errors.New("operation not permitted")
	r.host.mu.Unlock()
	r.api.update("ta", "noip", func(a *vnet.NetworkAttachment) {
		a.Status.IP, a.Status.MAC = "10.10.0.7", vnet.MACOf(vniX, netip.MustParseAddr("10.10.0.7")).String()
	})
	eventually(t, "the failure reported", func() error {
		if st := fmt.Sprint(r.lastStatus("ta/noip")); !strings.Contains(st, "status.ifcName: cannot make interface") || !strings.Contains(st, "operation not permitted") {
			return fmt.Errorf("status %s", st)
		}
		return nil
	})
	r.host.mu.Lock()
	r.host.failWith = nil
	r.host.mu.Unlock()
	eventually(t, "made on a retry", func() error {
		if st := r.lastStatus("ta/noip"); st["ifcName"] != ifname("uid-5") || fmt.Sprint(st["errors"]) != "map[host:[]]" {
			return fmt.Errorf("status %v", st)
		}
		return nil
	})
	// The address goes: so do the interface and the agent's fields.
	r.api.update("ta", "noip", func(a *vnet.NetworkAttachment) { a.Status.IP, a.Status.MAC = "", "" })
	eventually(t, "removed without an address", func() error {
		if _, ok := r.host.interfaces()[ifname("uid-5")]; ok {
			return fmt.Errorf("interface still there")
		}
		if st := r.lastStatus("ta/noip"); st["ifcName"] != nil || st["hostIP"] != nil {
			return fmt.Errorf("status %v", st)
		}
		return nil
	})
}

// TestCRDsInstalledLater: without the CRDs the feature starts no informer
// and does not keep the agent from starting; it starts once they appear.
func TestCRDsInstalledLater(t *testing.T) {
	r := newRig(t, nil, subnet("ta", "blue", vniX, "10.10.0.0/24"), att("ta", "a1", "node1", "blue", vniX, "10.10.0.1", ""))
	r.notServed.Store(true)
	r.sync()
	if err := r.expect(0, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	r.run()
	r.notServed.Store(false)
	eventually(t, "started once the CRDs are served", func() error {
		if _, ok := r.host.interfaces()[ifname("uid-2")]; !ok {
			return fmt.Errorf("no interface")
		}
		return r.expect(2, 1, 1, 1, 1)
	})
}

// TestRestartAdoptsAndCollects: after a restart, an attachment's interface
// is adopted (not made again) and its flows are wanted before the
// reconcilers start; an interface of an attachment that is gone is
// removed.
func TestRestartAdoptsAndCollects(t *testing.T) {
	stale := ifname("uid-gone")
	r := newRig(t, map[string]string{ifname("uid-2"): "vnet-ta.a1", stale: "vnet-ta.gone"},
		subnet("ta", "blue", vniX, "10.10.0.0/24"), att("ta", "a1", "node1", "blue", vniX, "10.10.0.1", ""))
	r.sync()
	got := r.host.interfaces()
	if _, ok := got[stale]; ok || got[ifname("uid-2")] != "vnet-ta.a1" || len(got) != 1 {
		t.Errorf("interfaces after the start-up %v: want a1's kept and the stale one removed", got)
	}
	if len(r.host.kept) != 1 {
		t.Errorf("%d collections at start-up, want 1", len(r.host.kept))
	}
	if len(r.flows(vnetflows.LocalOwner("ta", "a1"))) != 6 {
		t.Error("a1's flows are not wanted at start-up")
	}
	if r.f.states["ta/a1"] != stateReady {
		t.Errorf("a1 is %s", r.f.states["ta/a1"])
	}
}

// TestAddressConflict: two attachments of this node with one address on a
// VNI (which the IPAM controller's locks prevent, but the agent must not
// trust): the second in name order gets no interface and says why, until
// the first goes.
func TestAddressConflict(t *testing.T) {
	r := newRig(t, nil, subnet("ta", "blue", vniX, "10.10.0.0/24"),
		att("ta", "first", "node1", "blue", vniX, "10.10.0.1", ""),
		att("ta", "second", "node1", "blue", vniX, "10.10.0.1", ""))
	r.sync()
	st := fmt.Sprint(r.lastStatus("ta/second"))
	if !strings.Contains(st, "status.ip: 10.10.0.1 on VNI 8388609 is also wanted by vnet/ta/first") {
		t.Errorf("second's status %s", st)
	}
	if got := r.host.interfaces(); len(got) != 1 || got[ifname("uid-2")] == "" {
		t.Errorf("interfaces %v, want the first's only", got)
	}
	if r.host.attaches != 1 {
		t.Errorf("%d attaches, want the first's only (a refused address makes nothing)", r.host.attaches)
	}
	r.run()
	r.api.delete(vnet.NetworkAttachmentGVR, "ta", "first")
	eventually(t, "the second made once the first is gone", func() error {
		if st := r.lastStatus("ta/second"); st["ifcName"] != ifname("uid-3") {
			return fmt.Errorf("status %v", st)
		}
		return nil
	})
}

// TestIPv6Attachment: an attachment with an IPv6 address gets its
// interface (its Subnet's prefix length), its flows and a status whose
// hostIP is the node's IPv4 address (the VXLAN underlay); a remote IPv6
// attachment of the VNI is tunnelled to, solicitations for it included;
// an IPv6 address outside the Subnet is still refused.
func TestIPv6Attachment(t *testing.T) {
	r := newRig(t, nil,
		subnet("ta", "six", vniX, "fd00::/64"),
		att("ta", "a61", "node1", "six", vniX, "fd00::1", ""),            // uid-2
		att("ta", "a62", "node2", "six", vniX, "fd00::2", "172.30.0.12"), // uid-3
		att("ta", "out", "node1", "six", vniX, "fd01::1", ""),            // uid-4
	)
	r.sync()
	a61 := ifname("uid-2")
	if ns, ok := r.host.interfaces()[a61]; !ok || ns != "vnet-ta.a61" || len(r.host.interfaces()) != 1 {
		t.Errorf("interfaces %v, want %s in vnet-ta.a61 only", r.host.interfaces(), a61)
	}
	local := strings.Join(r.flows(vnetflows.LocalOwner("ta", "a61")), "\n")
	if n := len(r.flows(vnetflows.LocalOwner("ta", "a61"))); n != 15 || !strings.Contains(local, "ipv6_dst=ff02::1:ff00:1,icmp_type=135,icmp_code=0,nd_target=fd00::1") ||
		!strings.Contains(local, "set_field:06:01:00:00:00:01->nd_tll,IN_PORT") {
		t.Errorf("a61's flows (%d):\n%s", n, local)
	}
	remote := strings.Join(r.flows(vnetflows.VNIOwner(vniX)), "\n")
	if n := len(r.flows(vnetflows.VNIOwner(vniX))); n != 5 || !strings.Contains(remote, "ipv6_dst=fd00::2 actions=set_field:172.30.0.12->tun_dst") ||
		!strings.Contains(remote, "nd_target=fd00::2 actions=set_field:172.30.0.12->tun_dst") {
		t.Errorf("VNI X's remote flows (%d):\n%s", n, remote)
	}
	st := r.lastStatus("ta/a61")
	if st == nil || st["hostIP"] != "172.30.0.11" || st["ifcName"] != a61 || fmt.Sprint(st["errors"]) != "map[host:[]]" {
		t.Errorf("a61's status apply %v", st)
	}
	if st := r.lastStatus("ta/out"); !strings.Contains(fmt.Sprint(st), "status.ip: fd01::1 is not in Subnet six (fd00::/64)") || st["ifcName"] != nil {
		t.Errorf("ta/out: status %v, want the address refused", st)
	}
}
