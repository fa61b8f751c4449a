package vnetfeature

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/vnetflows"
	"nodeflow/host/cni"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/ovsdb"
	"nodeflow/model/vnet"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// inNetns runs a command in the named network namespace, as an operator
// would (`ip netns exec`): the test's oracle.
func inNetns(ns string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// packetSwitch is a sandboxed ovs-vswitchd with br0 (userspace datapath)
// and vxlan0, the real plumbing on it, and mk, which describes an
// attachment of this run (its address with a prefix length of bits).
type packetSwitch struct {
	sb     *ovs.Sandbox
	ctx    context.Context
	prefix string
	links  *Links
	p      *plumbing
	mk     func(name string, vni uint32, ip string, bits int) desired
}

func newPacketSwitch(t *testing.T) *packetSwitch {
	t.Helper()
	sb := ovstest.New(t, ovs.Options{})
	if _, err := exec.LookPath("ping"); err != nil {
		t.Skip("needs ping (iputils) as the oracle")
	}
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-port", "br0", "vxlan0", "--", "set", "interface", "vxlan0", "type=vxlan", "options:remote_ip=flow", "options:key=flow", "ofport_request=1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	db, err := ovsdb.Dial(ctx, "unix:"+sb.DBSock(), ovsdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	prefix := fmt.Sprintf("t%d", os.Getpid()) // the attachments' namespace: their netns names are unique to this run
	links := &Links{HostNetns: filepath.Join(DefaultNetnsDir, sb.Netns), NetnsDir: DefaultNetnsDir, ProcSysNet: "/proc/sys/net"}
	const mtu = 1400
	return &packetSwitch{sb: sb, ctx: ctx, links: links, prefix: prefix,
		p: &plumbing{links: links, db: db, bridge: "br0", ofportTimeout: 10 * time.Second},
		mk: func(name string, vni uint32, ip string, bits int) desired {
			a := netip.MustParseAddr(ip)
			uid := types.UID(prefix + "-" + name)
			return desired{namespace: prefix, name: name, uid: uid, vni: vni, ip: a, mac: vnet.MACOf(vni, a),
				link: Spec{Name: InterfaceName(uid), Netns: NetnsName(prefix, name), MAC: vnet.MACOf(vni, a), Addr: netip.PrefixFrom(a, bits), MTU: mtu}}
		}}
}

// attachAll makes all's interfaces, installs their flows (with the
// pipeline's) on br0 and returns their ports.
func (ps *packetSwitch) attachAll(t *testing.T, all []desired) map[string]uint32 {
	t.Helper()
	t.Cleanup(func() {
		for _, d := range all {
			_ = ps.links.Remove(d.link.Name, d.link.Netns)
		}
	})
	fs := gatewayflows.PipelineFlows(plan.Pod)
	ports := map[string]uint32{}
	for _, d := range all {
		port, adopted, err := ps.p.attach(ps.ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if adopted {
			t.Errorf("%s: adopted an interface that did not exist", d.name)
		}
		ports[d.name] = port
		lfs, err := vnetflows.LocalFlows(vnetflows.Local{Namespace: d.namespace, Name: d.name, VNI: d.vni, Port: port, MAC: d.mac, IP: d.ip})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, lfs...)
	}
	flowtest.InstallAndCompare(t, ps.sb, "br0", fs)
	return ports
}

// ping sends one echo request (ping -6 for an IPv6 address).
func ping(from desired, to string) error {
	args := []string{"ping", "-c", "1", "-W", "1", to}
	if netip.MustParseAddr(to).Is6() {
		args = slices.Insert(args, 1, "-6")
	}
	out, err := inNetns(from.link.Netns, args...)
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// pingCase is one ping and whether it must be answered.
type pingCase struct {
	from  desired
	to    string
	reach bool
}

// checkPings pings as each case says: one that must be answered may take
// the retries of reach, one that must not gets a single echo request.
func checkPings(t *testing.T, cases []pingCase) {
	t.Helper()
	for _, tc := range cases {
		try := ping
		if tc.reach {
			try = reach
		}
		err := try(tc.from, tc.to)
		if (err == nil) != tc.reach {
			t.Errorf("%s pings %s: reached %v, want %v (%v)", tc.from.name, tc.to, err == nil, tc.reach, err)
		}
	}
}

// reach keeps sending echo requests until one is answered or 10 s have
// passed (a loaded machine, a port that ovs-vswitchd has only just
// opened).
func reach(from desired, to string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(from, to)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// TestPacketsBetweenAttachments makes four attachments' interfaces with
// the real plumbing (veth pairs, namespaces under /run/netns, ports added
// over OVSDB) on a sandboxed ovs-vswitchd's br0 (userspace datapath),
// installs their flows, and sends real packets: the attachments of one
// VNI ping each other, nothing reaches the other VNI although both use
// the same CIDR, and ARP is answered from the mappings. Then it checks
// adoption, removal and the collection of leftovers.
func TestPacketsBetweenAttachments(t *testing.T) {
	ps := newPacketSwitch(t)
	sb, ctx, links, p, mk, prefix := ps.sb, ps.ctx, ps.links, ps.p, ps.mk, ps.prefix
	all := []desired{mk("x1", vniX, "10.10.0.1", 24), mk("x2", vniX, "10.10.0.2", 24), mk("y1", vniY, "10.10.0.1", 24), mk("y3", vniY, "10.10.0.3", 24)}
	ports := ps.attachAll(t, all)
	// What the interfaces are: both ends' TX checksum offload off, the
	// attachment end with its MAC and address, in its own namespace.
	x1 := all[0]
	for _, ns := range []string{links.HostNetns, filepath.Join(DefaultNetnsDir, x1.link.Netns)} {
		if on, err := cni.TxChecksum(ns, x1.link.Name); err != nil || on {
			t.Errorf("TX checksum offload of %s in %s: on %v, %v", x1.link.Name, ns, on, err)
		}
	}
	if out, err := inNetns(x1.link.Netns, "ip", "-o", "addr", "show", "dev", x1.link.Name); err != nil || !strings.Contains(out, "inet 10.10.0.1/24") {
		t.Errorf("x1's address: %v\n%s", err, out)
	}

	checkPings(t, []pingCase{
		{all[0], "10.10.0.2", true},  // x1 -> x2
		{all[1], "10.10.0.1", true},  // x2 -> x1, not y1
		{all[2], "10.10.0.3", true},  // y1 -> y3
		{all[0], "10.10.0.3", false}, // x1 -> y3's address: VNI X has none
		{all[3], "10.10.0.2", false}, // y3 -> x2's address: VNI Y has none
	})
	// x2 answered x1 from VNI X's MAC; y1 never heard of x1.
	if out, _ := inNetns(x1.link.Netns, "ip", "neigh", "show", "10.10.0.2"); !strings.Contains(out, all[1].mac.String()) {
		t.Errorf("x1's neighbour 10.10.0.2: %q, want %s", out, all[1].mac)
	}
	if out, _ := inNetns(all[2].link.Netns, "ip", "neigh", "show", "10.10.0.2"); strings.Contains(out, "lladdr") {
		t.Errorf("y1 knows 10.10.0.2: %q", out)
	}

	// A restart adopts: same port, nothing made again, still working.
	port, adopted, err := p.attach(ctx, x1)
	if err != nil || !adopted || port != ports["x1"] {
		t.Errorf("attach again: port %d (was %d), adopted %v, %v", port, ports["x1"], adopted, err)
	}
	if err := reach(all[1], "10.10.0.1"); err != nil {
		t.Errorf("after adoption: %v", err)
	}
	// An interface changed behind the agent's back is made again.
	if _, err := inNetns(x1.link.Netns, "ip", "addr", "flush", "dev", x1.link.Name); err != nil {
		t.Fatal(err)
	}
	port, adopted, err = p.attach(ctx, x1)
	if err != nil || adopted {
		t.Fatalf("attach after the address was flushed: adopted %v, %v", adopted, err)
	}
	if port != ports["x1"] {
		// Its flows follow its new port, as the feature sets them.
		ports["x1"] = port
		fs := gatewayflows.PipelineFlows(plan.Pod)
		for _, d := range all {
			lfs, err := vnetflows.LocalFlows(vnetflows.Local{Namespace: d.namespace, Name: d.name, VNI: d.vni, Port: ports[d.name], MAC: d.mac, IP: d.ip})
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, lfs...)
		}
		flowtest.InstallAndCompare(t, sb, "br0", fs)
	}
	if err := reach(all[1], "10.10.0.1"); err != nil {
		t.Errorf("after the interface was made again: %v", err)
		out, _ := sb.Vsctl("show")
		t.Logf("x1 on port %d; the switch:\n%s", port, out)
		out, _ = sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0")
		t.Logf("%s", out)
		out, _ = sb.Ofctl("-O", "OpenFlow15", "dump-ports", "br0")
		t.Logf("%s", out)
		out, _ = inNetns(x1.link.Netns, "ip", "-s", "link")
		t.Logf("%s", out)
		out, _ = inNetns(x1.link.Netns, "ip", "addr")
		t.Logf("%s", out)
	}

	// Removal takes the interface, the namespace and the port.
	x2 := all[1]
	if err := p.detach(ctx, x2.link.Name, x2.link.Netns); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(DefaultNetnsDir, x2.link.Netns)); !os.IsNotExist(err) {
		t.Errorf("x2's namespace is still there: %v", err)
	}
	if out, _ := sb.Vsctl("list-ports", "br0"); strings.Contains(out, x2.link.Name) {
		t.Errorf("x2's port is still on br0: %s", out)
	}

	// Collection: y3 is no longer wanted; an empty leftover namespace and
	// another agent's namespace (its veth's peer is not ours) are told apart.
	leftover := NetnsPrefix + prefix + ".leftover"
	if err := createNetns(DefaultNetnsDir, leftover); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteNetns(DefaultNetnsDir, leftover) })
	otherHost, other := prefix+"-otherhost", NetnsPrefix+prefix+".other"
	for _, ns := range []string{otherHost, other} {
		if err := createNetns(DefaultNetnsDir, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = deleteNetns(DefaultNetnsDir, ns) })
	}
	otherLinks := &Links{HostNetns: filepath.Join(DefaultNetnsDir, otherHost), NetnsDir: DefaultNetnsDir}
	oh, err := otherLinks.hostHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer oh.Close()
	peerNs, err := netns.GetFromPath(filepath.Join(DefaultNetnsDir, other))
	if err != nil {
		t.Fatal(err)
	}
	defer peerNs.Close()
	otherIf := InterfaceName("another agent's")
	if err := oh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: otherIf}, PeerName: otherIf, PeerNamespace: netlink.NsFd(int(peerNs))}); err != nil {
		t.Fatal(err)
	}
	keep := map[string]string{x1.link.Name: x1.link.Netns, all[2].link.Name: all[2].link.Netns}
	removed, err := p.collect(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"namespace " + leftover, "port " + all[3].link.Name}
	for _, w := range want {
		if !strings.Contains(strings.Join(removed, "\n"), w) {
			t.Errorf("collected %q, want %q among them", removed, w)
		}
	}
	for _, ns := range []string{x1.link.Netns, all[2].link.Netns, other} {
		if _, err := os.Stat(filepath.Join(DefaultNetnsDir, ns)); err != nil {
			t.Errorf("namespace %s was collected: %v", ns, err)
		}
	}
	if err := ping(x1, "10.10.0.2"); err == nil {
		t.Error("x1 still reaches x2 after x2's removal")
	}
}

// TestIPv6PacketsBetweenAttachments is TestPacketsBetweenAttachments for
// IPv6 attachments, two VNIs with one prefix, fd00::/64: the interfaces
// have their one address, usable at once (no duplicate-address
// detection, no link-local address) and take no router advertisements;
// the attachments of one VNI ping each other, which needs their neighbour
// solicitations forwarded to their targets and the advertisements back;
// nothing reaches the other VNI.
func TestIPv6PacketsBetweenAttachments(t *testing.T) {
	ps := newPacketSwitch(t)
	mk := ps.mk
	all := []desired{mk("x61", vniX, "fd00::1", 64), mk("x62", vniX, "fd00::2", 64), mk("y61", vniY, "fd00::1", 64), mk("y63", vniY, "fd00::3", 64)}
	ports := ps.attachAll(t, all)

	x61 := all[0]
	for _, ns := range []string{ps.links.HostNetns, filepath.Join(DefaultNetnsDir, x61.link.Netns)} {
		if on, err := cni.TxChecksum(ns, x61.link.Name); err != nil || on {
			t.Errorf("TX checksum offload of %s in %s: on %v, %v", x61.link.Name, ns, on, err)
		}
	}
	out, err := inNetns(x61.link.Netns, "ip", "-o", "-6", "addr", "show", "dev", x61.link.Name)
	if err != nil || !strings.Contains(out, "inet6 fd00::1/64") || strings.Count(out, "inet6") != 1 || strings.Contains(out, "tentative") {
		t.Errorf("x61's addresses: want fd00::1/64 alone, not tentative: %v\n%s", err, out)
	}
	for file, want := range map[string]string{"disable_ipv6": "0", "accept_ra": "0", "addr_gen_mode": "1"} {
		out, err := inNetns(x61.link.Netns, "cat", filepath.Join("/proc/sys/net/ipv6/conf", x61.link.Name, file))
		if err != nil || strings.TrimSpace(out) != want {
			t.Errorf("x61's ipv6 %s: %q, want %s (%v)", file, strings.TrimSpace(out), want, err)
		}
	}

	checkPings(t, []pingCase{
		{all[0], "fd00::2", true},  // x61 -> x62
		{all[1], "fd00::1", true},  // x62 -> x61, not y61
		{all[2], "fd00::3", true},  // y61 -> y63
		{all[0], "fd00::3", false}, // x61 -> y63's address: VNI X has none
		{all[3], "fd00::2", false}, // y63 -> x62's address: VNI Y has none
	})
	// br0 answered x61's solicitation with x62's MAC (table 105, from the
	// mapping); y61 never heard of fd00::2.
	if out, _ := inNetns(x61.link.Netns, "ip", "-6", "neigh", "show", "fd00::2"); !strings.Contains(out, all[1].mac.String()) {
		t.Errorf("x61's neighbour fd00::2: %q, want %s", out, all[1].mac)
	}
	dump, err := ps.sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0", "table=105,icmp6,icmp_type=136,ipv6_src=fd00::2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dump, "nd_target=fd00::2") || strings.Contains(dump, "n_packets=0,") {
		t.Errorf("br0's advertisement for fd00::2 counted nothing:\n%s", dump)
	}
	if out, _ := inNetns(all[2].link.Netns, "ip", "-6", "neigh", "show", "fd00::2"); strings.Contains(out, "lladdr") {
		t.Errorf("y61 knows fd00::2: %q", out)
	}

	// A restart adopts: same port, nothing made again, still working.
	port, adopted, err := ps.p.attach(ps.ctx, x61)
	if err != nil || !adopted || port != ports["x61"] {
		t.Errorf("attach again: port %d (was %d), adopted %v, %v", port, ports["x61"], adopted, err)
	}
	if err := reach(all[1], "fd00::1"); err != nil {
		t.Errorf("after adoption: %v", err)
	}
}

// TestFeatureOnSwitch runs the whole feature (fake API, real plumbing) on a
// sandboxed ovs-vswitchd: Sync makes the attachment's interface and adds
// its port over OVSDB; a port deleted by an operator comes back; deleting
// the attachment removes the port and the namespace.
func TestFeatureOnSwitch(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("f%d", os.Getpid())
	r := newRig(t, nil, subnet(ns, "blue", vniX, "10.10.0.0/24"), att(ns, "a1", "node1", "blue", vniX, "10.10.0.1", ""))
	r.f.host = nil
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	db, err := ovsdb.Dial(dctx, "unix:"+sb.DBSock(), ovsdb.Options{})
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	r.h.DB = db
	r.f.opts.HostNetns = filepath.Join(DefaultNetnsDir, sb.Netns)
	r.f.opts.ProcSysNet = "/proc/sys/net"
	name, netnsName := ifname("uid-2"), NetnsName(ns, "a1")
	t.Cleanup(func() { _ = (&Links{HostNetns: r.f.opts.HostNetns, NetnsDir: DefaultNetnsDir}).Remove(name, netnsName) })
	r.sync()
	port := func() string {
		out, _ := sb.Vsctl("--if-exists", "get", "interface", name, "external_ids:vnet-attachment")
		return strings.TrimSpace(out)
	}
	if got := port(); got != `"`+ns+`/a1"` {
		t.Fatalf("port %s: external_ids:vnet-attachment %q", name, got)
	}
	if _, err := os.Stat(filepath.Join(DefaultNetnsDir, netnsName)); err != nil {
		t.Fatal(err)
	}
	if fs := r.flows(vnetflows.LocalOwner(ns, "a1")); len(fs) != 6 {
		t.Fatalf("flows %v", fs)
	}
	r.run()
	if _, err := sb.Vsctl("del-port", "br0", name); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted port re-added", func() error {
		if got := port(); got == "" {
			return fmt.Errorf("no port")
		}
		return nil
	})
	r.api.delete(vnet.NetworkAttachmentGVR, ns, "a1")
	eventually(t, "the attachment's port and namespace removed", func() error {
		if got := port(); got != "" {
			return fmt.Errorf("port still there: %s", got)
		}
		if _, err := os.Stat(filepath.Join(DefaultNetnsDir, netnsName)); !os.IsNotExist(err) {
			return fmt.Errorf("namespace still there: %v", err)
		}
		return nil
	})
}

// TestFeatureWaitsForOVSDB: when the agent's OVSDB client is not connected
// at start-up, Sync makes nothing and the passes hold what they were asked
// (the start-up's full pass included); once the client is there, the
// retry of the pass makes the attachment's interface, port, flows and
// status, with no other change to wake the loop.
func TestFeatureWaitsForOVSDB(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("w%d", os.Getpid())
	r := newRig(t, nil, subnet(ns, "blue", vniX, "10.10.0.0/24"), att(ns, "a1", "node1", "blue", vniX, "10.10.0.1", ""))
	r.f.host = nil
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	db, err := ovsdb.Dial(dctx, "unix:"+sb.DBSock(), ovsdb.Options{})
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var connected atomic.Bool
	var dials atomic.Int32
	r.h.DBFunc = func() *ovsdb.Client {
		dials.Add(1)
		if !connected.Load() {
			return nil
		}
		return db
	}
	r.f.opts.HostNetns = filepath.Join(DefaultNetnsDir, sb.Netns)
	r.f.opts.ProcSysNet = "/proc/sys/net"
	name, netnsName := ifname("uid-2"), NetnsName(ns, "a1")
	t.Cleanup(func() { _ = (&Links{HostNetns: r.f.opts.HostNetns, NetnsDir: DefaultNetnsDir}).Remove(name, netnsName) })
	r.sync()
	if fs := r.flows(vnetflows.LocalOwner(ns, "a1")); len(fs) != 0 {
		t.Fatalf("flows without an OVSDB client: %v", fs)
	}
	if st := r.lastStatus(ns + "/a1"); st != nil {
		t.Fatalf("status written without an OVSDB client: %v", st)
	}
	// The loop's first pass finds no client either; only its retry can
	// make the attachment.
	before := dials.Load()
	r.run()
	eventually(t, "the loop's first pass", func() error {
		if dials.Load() == before {
			return fmt.Errorf("no dial since Sync")
		}
		return nil
	})
	connected.Store(true)
	eventually(t, "the attachment made once OVSDB is there", func() error {
		out, _ := sb.Vsctl("--if-exists", "get", "interface", name, "external_ids:vnet-attachment")
		if got := strings.TrimSpace(out); got != `"`+ns+`/a1"` {
			return fmt.Errorf("port %s: external_ids:vnet-attachment %q", name, got)
		}
		if fs := r.flows(vnetflows.LocalOwner(ns, "a1")); len(fs) != 6 {
			return fmt.Errorf("flows %v", fs)
		}
		if st := r.lastStatus(ns + "/a1"); st == nil || st["ifcName"] != name {
			return fmt.Errorf("status %v", st)
		}
		return nil
	})
}
