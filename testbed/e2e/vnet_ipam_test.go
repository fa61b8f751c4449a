package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"nodeflow/model/vnet"
)

// vnetClient is a dynamic client of the testbed's API server as admin,
// with the client-side rate limit raised for bulk creates.
func vnetClient(t testing.TB, e *env) dynamic.Interface {
	t.Helper()
	cfg := adminConfig(t, e, 500)
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// vnetNamespace creates a namespace for one test's virtual networks,
// deleted when the test ends.
func vnetNamespace(t testing.TB, e *env, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// createVNet creates obj (a model/vnet object) in namespace ns.
func createVNet[T vnet.Object](t testing.TB, d dynamic.Interface, ns string, obj T) *unstructured.Unstructured {
	t.Helper()
	u, err := vnet.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	gvr := vnet.NetworkAttachmentGVR
	switch u.GetKind() {
	case vnet.KindSubnet:
		gvr = vnet.SubnetGVR
	case vnet.KindIPLock:
		gvr = vnet.IPLockGVR
	}
	out, err := d.Resource(gvr).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", u.GetKind(), ns, u.GetName(), err)
	}
	return out
}

func subnet(name string, vni uint32, cidr string) *vnet.Subnet {
	return &vnet.Subnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: vnet.SubnetSpec{VNI: vni, CIDR: cidr}}
}

func attachment(name, node, subnet string) *vnet.NetworkAttachment {
	return &vnet.NetworkAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: vnet.NetworkAttachmentSpec{Node: node, Subnet: subnet}}
}

// attachments lists the attachments of namespace ns.
func attachments(ctx context.Context, d dynamic.Interface, ns string) ([]*vnet.NetworkAttachment, error) {
	return listVnet[*vnet.NetworkAttachment](ctx, d, vnet.NetworkAttachmentGVR, ns)
}

// locks lists the IPLocks of namespace ns.
func locks(ctx context.Context, d dynamic.Interface, ns string) ([]*vnet.IPLock, error) {
	return listVnet[*vnet.IPLock](ctx, d, vnet.IPLockGVR, ns)
}

// listVnet lists the objects of a vnet resource in namespace ns.
func listVnet[T vnet.Object](ctx context.Context, d dynamic.Interface, gvr schema.GroupVersionResource, ns string) ([]T, error) {
	l, err := d.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []T
	for i := range l.Items {
		o, err := vnet.FromUnstructured[T](&l.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// checkIPAM checks the IPAM invariants in namespace ns from the API
// server: no address in two attachments' statuses, every status address
// held by that attachment's lock (by UID), with the MAC of its VNI and
// address. It returns how many attachments have an address.
func checkIPAM(ctx context.Context, d dynamic.Interface, ns string) (assigned int, err error) {
	atts, err := attachments(ctx, d, ns)
	if err != nil {
		return 0, err
	}
	ls, err := locks(ctx, d, ns)
	if err != nil {
		return 0, err
	}
	lockByName := map[string]*vnet.IPLock{}
	for _, k := range ls {
		lockByName[k.Name] = k
	}
	holder := map[string]string{}
	for _, a := range atts {
		if a.Status.IP == "" {
			continue
		}
		ip, perr := netip.ParseAddr(a.Status.IP)
		if perr != nil {
			return 0, fmt.Errorf("%s: status.ip %q: %v", a.Name, a.Status.IP, perr)
		}
		key := fmt.Sprintf("%d/%s", a.Spec.VNI, ip)
		if other, dup := holder[key]; dup {
			return 0, fmt.Errorf("address %s is in the status of both %s and %s", key, other, a.Name)
		}
		holder[key] = a.Name
		k := lockByName[vnet.LockName(a.Spec.VNI, ip)]
		if k == nil {
			return 0, fmt.Errorf("%s has %s with no IPLock", a.Name, key)
		}
		ref, ok := k.Holder()
		if !ok || ref.UID != a.UID || ref.Name != a.Name {
			return 0, fmt.Errorf("%s has %s, whose IPLock is held by %+v", a.Name, key, ref)
		}
		if want := vnet.MACOf(a.Spec.VNI, ip).String(); a.Status.MAC != want {
			return 0, fmt.Errorf("%s: status.mac %s, want %s", a.Name, a.Status.MAC, want)
		}
		assigned++
	}
	return assigned, nil
}

// TestVirtualNetworkIPAM runs the IPAM controller against the testbed's
// API server with the manifests' roles: addresses are assigned; killing
// the controller in the middle of a burst and running two at once (no
// leader election, the worst case) never puts one address in two
// attachments; deleting an attachment frees its lock; bad input is
// reported in the attachment's status.
func TestVirtualNetworkIPAM(t *testing.T) {
	e := up(t)
	d := vnetClient(t, e)
	ns := vnetNamespace(t, e, "vnet-ipam")
	ctx := context.Background()
	const vni = vnet.MinVNI + 7
	createVNet(t, d, ns, subnet("net", vni, "10.77.0.0/26")) // 62 addresses
	// Another VNI with the same CIDR: its addresses are its own.
	createVNet(t, d, ns, subnet("twin", vni+1, "10.77.0.0/26"))

	a := startController(t, e, "ipam", e.state.IPAMKubeconfig, "ipam-a", "--leader-elect=false")
	const n = 60
	for i := range n {
		node := "node1"
		if i%2 == 1 {
			node = "node2"
		}
		createVNet(t, d, ns, attachment(fmt.Sprintf("a%02d", i), node, "net"))
	}
	createVNet(t, d, ns, attachment("t0", "node1", "twin"))
	// Kill the controller while the burst is being assigned.
	eventually(t, 60*time.Second, "some addresses assigned", func(ctx context.Context) error {
		got, err := checkIPAM(ctx, d, ns)
		if err != nil {
			t.Fatal(err)
		}
		if got < 10 {
			return fmt.Errorf("%d assigned", got)
		}
		return nil
	})
	a.kill(t)
	got, err := checkIPAM(ctx, d, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("controller killed with %d of %d assigned", got, n+1)
	// Two controllers at once, without leader election.
	startController(t, e, "ipam", e.state.IPAMKubeconfig, "ipam-b", "--leader-elect=false")
	startController(t, e, "ipam", e.state.IPAMKubeconfig, "ipam-c", "--leader-elect=false")
	eventually(t, 90*time.Second, "every attachment assigned", func(ctx context.Context) error {
		got, err := checkIPAM(ctx, d, ns)
		if err != nil {
			t.Fatal(err)
		}
		if got != n+1 {
			return fmt.Errorf("%d of %d assigned", got, n+1)
		}
		return nil
	})
	ls, err := locks(ctx, d, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != n+1 {
		t.Errorf("%d IPLocks for %d attachments", len(ls), n+1)
	}

	// The Subnet has 62 addresses: three more attachments, and the third
	// finds it full.
	extra := []string{"x1", "x2", "x3"}
	for _, x := range extra {
		createVNet(t, d, ns, attachment(x, "node1", "net"))
	}
	eventually(t, 30*time.Second, "one of x1, x2, x3 reported full", func(ctx context.Context) error {
		atts, err := attachments(ctx, d, ns)
		if err != nil {
			return err
		}
		full := 0
		for _, a := range atts {
			if slices.Contains(extra, a.Name) && a.Status.IP == "" && strings.Contains(strings.Join(a.Status.Errors.IPAM, ";"), "no free address") {
				full++
			}
		}
		if full != 1 {
			return fmt.Errorf("%d of x1, x2, x3 reported full", full)
		}
		return nil
	})

	// Deleting an attachment frees its lock, and the full one gets it.
	if err := d.Resource(vnet.NetworkAttachmentGVR).Namespace(ns).Delete(ctx, "a00", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "x1, x2 and x3 assigned after a00 went", func(ctx context.Context) error {
		atts, err := attachments(ctx, d, ns)
		if err != nil {
			return err
		}
		for _, a := range atts {
			if slices.Contains(extra, a.Name) && a.Status.IP == "" {
				return fmt.Errorf("%s: no address yet (%v)", a.Name, a.Status.Errors.IPAM)
			}
		}
		if _, err := checkIPAM(ctx, d, ns); err != nil {
			t.Fatal(err)
		}
		return nil
	})

	// Bad input: a missing Subnet and a missing Node are reported, and
	// nothing else changes.
	createVNet(t, d, ns, attachment("nosubnet", "node1", "absent"))
	createVNet(t, d, ns, attachment("nonode", "node9", "twin"))
	eventually(t, 30*time.Second, "bad attachments reported", func(ctx context.Context) error {
		atts, err := attachments(ctx, d, ns)
		if err != nil {
			return err
		}
		want := map[string]string{"nosubnet": "spec.subnet", "nonode": "spec.node"}
		for _, a := range atts {
			field, ok := want[a.Name]
			if !ok {
				continue
			}
			msg := strings.Join(a.Status.Errors.IPAM, ";")
			if a.Status.IP != "" || !strings.Contains(msg, field) {
				return fmt.Errorf("%s: ip %q, errors.ipam %q: want no address and an error naming %s", a.Name, a.Status.IP, msg, field)
			}
			delete(want, a.Name)
		}
		if len(want) > 0 {
			return fmt.Errorf("not seen: %v", want)
		}
		return nil
	})
	if got, err := checkIPAM(ctx, d, ns); err != nil || got != n+3 {
		t.Errorf("after the bad input: %d assigned (%v), want %d", got, err, n+3)
	}
}
