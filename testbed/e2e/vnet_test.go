package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/agent/features/vnetfeature"
	"nodeflow/model/vnet"
)

// readyAttachments waits until every attachment named in want (namespace
// ns) has its address and its interface made on its node, and returns
// them by name.
func readyAttachments(t *testing.T, e *env, ns string, want ...string) map[string]*vnet.NetworkAttachment {
	t.Helper()
	d := vnetClient(t, e)
	out := map[string]*vnet.NetworkAttachment{}
	eventually(t, 90*time.Second, "attachments ready", func(ctx context.Context) error {
		atts, err := attachments(ctx, d, ns)
		if err != nil {
			return err
		}
		by := map[string]*vnet.NetworkAttachment{}
		for _, a := range atts {
			by[a.Name] = a
		}
		for _, n := range want {
			a := by[n]
			switch {
			case a == nil:
				return fmt.Errorf("%s: not found", n)
			case a.Status.IP == "":
				return fmt.Errorf("%s: no address (%v)", n, a.Status.Errors.IPAM)
			case a.Status.HostIP == "" || a.Status.IfcName == "" || len(a.Status.Errors.Host) > 0:
				return fmt.Errorf("%s: interface not made: hostIP %q ifcName %q errors %v", n, a.Status.HostIP, a.Status.IfcName, a.Status.Errors.Host)
			}
			out[n] = a
		}
		return nil
	})
	return out
}

// forwardsTo returns the flow of table 110 among flows that forwards VNI
// vni's packets to ip, or "".
func forwardsTo(flows []string, vni uint32, ip string) string {
	for _, f := range flows {
		if strings.Contains(f, "table=110") && strings.Contains(f, "nw_dst="+ip+" ") || strings.Contains(f, "nw_dst="+ip+",") {
			if strings.Contains(f, fmt.Sprintf("reg1=%#x", vni)) && strings.Contains(f, "table=110") {
				return f
			}
		}
	}
	return ""
}

// attIP is an attachment's address.
func attIP(t *testing.T, a *vnet.NetworkAttachment) netip.Addr {
	t.Helper()
	ip, err := netip.ParseAddr(a.Status.IP)
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

// TestVirtualNetworks runs the virtual networks end to end: the IPAM
// controller assigns, both nodes' agents make the interfaces and program
// br0, and attachments of one VNI reach each other on one node and across
// the tunnel (ping, TCP, UDP), while another VNI with the same CIDR is
// unreachable from them; deleting an attachment removes its interface, its
// lock and its flows.
func TestVirtualNetworks(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	d := vnetClient(t, e)
	ns := vnetNamespace(t, e, "vnet-e2e")
	startController(t, e, "ipam", e.state.IPAMKubeconfig, "ipam-e2e", "--leader-elect=false")
	const red, blue, green = vnet.MinVNI + 100, vnet.MinVNI + 101, vnet.MinVNI + 102
	createVNet(t, d, ns, subnet("red", red, "10.99.0.0/24"))
	createVNet(t, d, ns, subnet("blue", blue, "10.99.0.0/24"))
	createVNet(t, d, ns, subnet("green", green, "fd99:0:0:1::/64")) // IPv6: neighbour discovery
	// Keep blue's first five addresses out of the controller's hands (locks
	// without an owner), so that blue's attachments get addresses red's do
	// not have: an answer from one of them could only cross VNIs.
	for i := byte(1); i <= 5; i++ {
		ip := netip.AddrFrom4([4]byte{10, 99, 0, i})
		createVNet(t, d, ns, &vnet.IPLock{ObjectMeta: metav1.ObjectMeta{Name: vnet.LockName(blue, ip)},
			Spec: vnet.IPLockSpec{Attachment: "reserved", VNI: blue, IP: ip.String()}})
	}
	for _, a := range []struct{ name, node, subnet string }{
		{"red1", "node1", "red"}, {"red2", "node2", "red"}, {"red3", "node1", "red"},
		{"blue1", "node1", "blue"}, {"blue2", "node2", "blue"},
		{"green1", "node1", "green"}, {"green2", "node2", "green"},
	} {
		createVNet(t, d, ns, attachment(a.name, a.node, a.subnet))
	}
	atts := readyAttachments(t, e, ns, "red1", "red2", "red3", "blue1", "blue2", "green1", "green2")
	netns := func(name string) string { return vnetfeature.NetnsName(ns, name) }
	for _, n := range []string{"red1", "red2", "red3", "blue1", "blue2", "green1", "green2"} {
		t.Logf("%s: %s on %s (%s), %s in %s", n, atts[n].Status.IP, atts[n].Spec.Node, atts[n].Status.HostIP, atts[n].Status.IfcName, netns(n))
	}
	for _, n := range []string{"blue1", "blue2"} {
		if attIP(t, atts[n]).As4()[3] <= 5 {
			t.Fatalf("%s got %s, a reserved address", n, atts[n].Status.IP)
		}
	}
	for name, a := range atts {
		if want := vnetfeature.InterfaceName(a.UID); a.Status.IfcName != want {
			t.Errorf("%s: ifcName %q, want %q", name, a.Status.IfcName, want)
		}
		m := member(t, e, a.Spec.Node)
		if hip := memberIP(t, m, false); a.Status.HostIP != hip.String() {
			t.Errorf("%s: hostIP %s, want %s's %s", name, a.Status.HostIP, a.Spec.Node, hip)
		}
		serveSecondary(t, netns(name), name, []netip.Addr{attIP(t, a)})
	}

	ctx := context.Background()
	reach := func(from, to string, want bool) {
		t.Helper()
		dst := attIP(t, atts[to])
		n, out := ping(netns(from), dst, 3)
		if want && n == 0 {
			t.Errorf("%s -> %s (%s): no ping answered\n%s", from, to, dst, out)
		}
		if !want && n > 0 {
			t.Errorf("%s -> %s (%s): %d pings answered across VNIs", from, to, dst, n)
		}
		if !want {
			return
		}
		if pod, client, err := httpGet(ctx, netns(from), dst, secTCP); err != nil || pod != to || hostOf(client) != atts[from].Status.IP {
			t.Errorf("%s -> %s TCP: %q from %q, %v; want %s from %s", from, to, pod, client, err, to, atts[from].Status.IP)
		}
		if pod, client, err := udpEcho(ctx, netns(from), dst, secUDP); err != nil || pod != to || hostOf(client) != atts[from].Status.IP {
			t.Errorf("%s -> %s UDP: %q from %q, %v; want %s from %s", from, to, pod, client, err, to, atts[from].Status.IP)
		}
	}
	reach("red1", "red2", true) // across the tunnel
	reach("red2", "red1", true)
	reach("red1", "red3", true) // on one node
	reach("blue2", "blue1", true)
	reach("green1", "green2", true) // IPv6 across the tunnel
	reach("green2", "green1", true)
	// The other VNI, on the same CIDR, at addresses red does not use.
	for _, from := range []string{"red1", "red2"} {
		for _, to := range []string{"blue1", "blue2"} {
			reach(from, to, false)
			reach(to, from, false)
		}
	}
	// A virtual network reaches neither pods nor nodes.
	var outside []netip.Addr
	if pods := netPods(t, e, "default"); len(pods) > 0 {
		outside = append(outside, pods[0].ip(false))
	}
	for _, n := range []string{"node1", "node2"} {
		outside = append(outside, memberIP(t, member(t, e, n), false))
	}
	for _, dst := range outside {
		if n, _ := ping(netns("red1"), dst, 1); n > 0 {
			t.Errorf("red1 reached %s, outside its virtual network", dst)
		}
	}

	// The flows: br0 on node1 holds red2's mapping in table 110 with
	// red2's node as tun_dst.
	n1 := member(t, e, "node1")
	if f := forwardsTo(dumpFlows(t, n1, "br0"), red, atts["red2"].Status.IP); f == "" || !strings.Contains(f, atts["red2"].Status.HostIP+"->tun_dst") {
		t.Errorf("node1's br0 table 110 does not tunnel to red2 (%s) at %s: %q", atts["red2"].Status.IP, atts["red2"].Status.HostIP, f)
	}

	// Deleting red2 frees its lock and removes its interface, its network
	// namespace and its flows on both nodes.
	lock := vnet.LockName(red, attIP(t, atts["red2"]))
	if err := d.Resource(vnet.NetworkAttachmentGVR).Namespace(ns).Delete(ctx, "red2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "red2's lock, interface and flows gone", func(ctx context.Context) error {
		if _, err := d.Resource(vnet.IPLockGVR).Namespace(ns).Get(ctx, lock, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("IPLock %s still there", lock)
		}
		if out, err := exec.Command("ip", "netns", "list").Output(); err != nil || strings.Contains(string(out), netns("red2")+" ") || strings.HasSuffix(strings.TrimSpace(string(out)), netns("red2")) {
			return fmt.Errorf("network namespace %s still there (%v)", netns("red2"), err)
		}
		for _, node := range []string{"node1", "node2"} {
			fl, err := tryDumpFlows(member(t, e, node), "br0")
			if err != nil {
				return err
			}
			if f := forwardsTo(fl, red, atts["red2"].Status.IP); f != "" {
				return fmt.Errorf("%s still forwards to red2: %s", node, f)
			}
		}
		return nil
	})
	if n, _ := ping(netns("red1"), attIP(t, atts["red3"]), 2); n == 0 {
		t.Errorf("red1 -> red3 lost after red2 went")
	}
}
