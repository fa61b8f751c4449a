package cleanup

import (
	"context"
	"net"
	"net/netip"
	"nodeflow/testbed/nsutil"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"nodeflow/agent/features/vnetfeature"
)

// The virtual-network attachments' interfaces and namespaces go after the
// pod bridge, and stay with it when it stays.
func TestPlanVNet(t *testing.T) {
	o := testOptions
	o.VNet = &vnetfeature.Links{NetnsDir: "/run/netns"}
	f := agentNode()
	f.VNetInterfaces = []string{"vn0123456789"}
	f.VNetNamespaces = []string{"vnet-default.a1"}
	got := stepStrings(Make(o, f))
	i := slices.Index(got, "delete bridge br0")
	j := slices.Index(got, "delete virtual-network interface vn0123456789")
	k := slices.Index(got, "delete virtual-network namespace /run/netns/vnet-default.a1")
	if i < 0 || j < i || k < j {
		t.Errorf("steps:\n%s\nwant the bridge, then the interface, then the namespace", strings.Join(got, "\n"))
	}

	f.Bridges[0].ExternalIDs = map[string]string{}
	p := Make(o, f)
	if slices.ContainsFunc(p.Steps, func(s Step) bool { return s.Kind == DeleteVNetLink || s.Kind == DeleteVNetNetns }) {
		t.Errorf("steps %q delete virtual-network interfaces of a bridge that stays", stepStrings(p))
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool {
		return strings.Contains(n, "1 virtual-network interfaces and 1 namespaces are left")
	}) {
		t.Errorf("notes %q, want one about the virtual-network interfaces left", p.Notes)
	}
}

// TestVNetCleanup makes an attachment's veth and namespace as the agent
// does, in a network namespace standing for the host, and a namespace named
// like an attachment's that holds another interface; cleanup finds the
// first and removes it, and leaves the other.
func TestVNetCleanup(t *testing.T) {
	dir := t.TempDir()
	nsutil.InNew(t, func() { vnetCleanup(t, dir) })
}

// vnetCleanup is TestVNetCleanup in the namespace standing for the host.
func vnetCleanup(t *testing.T, dir string) {
	l := &vnetfeature.Links{NetnsDir: dir, ProcSysNet: "/proc/sys/net"}
	name, ns := vnetfeature.InterfaceName("uid-1"), vnetfeature.NetnsName("default", "a1")
	other := vnetfeature.NetnsName("default", "other")
	t.Cleanup(func() {
		// Before the directory goes: the namespaces, and the directory's
		// mount on itself (the agent makes its namespace directory a
		// mount point, as `ip netns` does).
		_ = l.Remove("", ns)
		_ = l.Remove("", other)
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	mac, _ := net.ParseMAC("0a:58:c0:a8:05:02")
	if _, err := l.Ensure(vnetfeature.Spec{Name: name, Netns: ns, MAC: mac, Addr: netip.MustParsePrefix("192.168.5.2/24"), MTU: 1400}); err != nil {
		t.Fatal(err)
	}
	// Someone else's namespace with our prefix, holding a veth pair.
	if _, err := l.Ensure(vnetfeature.Spec{Name: vnetfeature.InterfaceName("uid-2"), Netns: other, MAC: mac, Addr: netip.MustParsePrefix("192.168.6.2/24"), MTU: 1400}); err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(vnetfeature.InterfaceName("uid-2"), ""); err != nil {
		t.Fatal(err)
	}
	oh, err := netlink.NewHandleAt(mustNetns(t, filepath.Join(dir, other)))
	if err != nil {
		t.Fatal(err)
	}
	defer oh.Close()
	if err := oh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "foreign0"}, PeerName: "foreign1"}); err != nil {
		t.Fatal(err)
	}

	o := Options{PodBridge: "br0", GatewayBridge: "breth0", VNet: &vnetfeature.Links{NetnsDir: dir}}
	var f Facts
	if err := inspectVNet(o, &f); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.VNetInterfaces, []string{name}) || !slices.Equal(f.VNetNamespaces, []string{ns}) {
		t.Fatalf("found interfaces %q and namespaces %q, want [%s] and [%s]", f.VNetInterfaces, f.VNetNamespaces, name, ns)
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	if err := Apply(context.Background(), Make(o, f), nil, log); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(name); err == nil {
		t.Errorf("%s still there", name)
	}
	if _, err := os.Stat(filepath.Join(dir, ns)); err == nil {
		t.Errorf("namespace %s still there", ns)
	}
	if _, err := os.Stat(filepath.Join(dir, other)); err != nil {
		t.Errorf("someone else's namespace %s removed: %v", other, err)
	}
	f = Facts{}
	if err := inspectVNet(o, &f); err != nil || len(f.VNetInterfaces)+len(f.VNetNamespaces) != 0 {
		t.Errorf("after the cleanup: interfaces %q, namespaces %q, %v; want none", f.VNetInterfaces, f.VNetNamespaces, err)
	}
	if err := l.Remove("", other); err != nil {
		t.Error(err)
	}
}

// mustNetns opens the network namespace at path.
func mustNetns(t *testing.T, path string) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
