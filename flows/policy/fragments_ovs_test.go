package policy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"nodeflow/cni"
	"nodeflow/conntrack"
	"nodeflow/flows/flowtest"
	"nodeflow/flows/gateway"
	"nodeflow/flows/plan"
	"nodeflow/openflow"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// fragPod is one end of the fragment test: a network namespace with an
// interface whose peer is a port of the sandbox's br0.
type fragPod struct {
	netns, hostIf string
	port          uint32
	mac           net.HardwareAddr
	v4, v6        netip.Addr
}

func (p fragPod) addr(v6 bool) netip.Addr {
	if v6 {
		return p.v6
	}
	return p.v4
}

// ipCmd runs ip(8), the test's plumbing tool.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newFragPod makes pod i's namespace and veth, plugs the peer into br0 as
// ofport port, and gives the pod static neighbours for peer.
func newFragPod(t *testing.T, sb *ovs.Sandbox, i int, port uint32) fragPod {
	t.Helper()
	p := fragPod{
		netns:  fmt.Sprintf("nffrag%d-%d", os.Getpid(), i),
		hostIf: fmt.Sprintf("nff%d-%d", os.Getpid()%100000, i),
		port:   port,
		mac:    net.HardwareAddr{0x0a, 0x58, 0x0a, 0x09, 0x00, byte(4 + i)},
		v4:     netip.AddrFrom4([4]byte{10, 9, 0, byte(4 + i)}),
		v6:     netip.MustParseAddr(fmt.Sprintf("fd09::%d", 4+i)),
	}
	ipCmd(t, "netns", "add", p.netns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.netns).Run() })
	ipCmd(t, "link", "add", p.hostIf, "netns", sb.Netns, "type", "veth", "peer", "name", "eth0", "netns", p.netns)
	ipCmd(t, "-n", sb.Netns, "link", "set", p.hostIf, "up")
	ipCmd(t, "-n", p.netns, "link", "set", "eth0", "address", p.mac.String(), "mtu", "1400")
	ipCmd(t, "-n", p.netns, "addr", "add", p.v4.String()+"/24", "dev", "eth0")
	ipCmd(t, "-n", p.netns, "addr", "add", p.v6.String()+"/64", "dev", "eth0", "nodad")
	ipCmd(t, "-n", p.netns, "link", "set", "eth0", "up")
	ipCmd(t, "-n", p.netns, "link", "set", "lo", "up")
	// The userspace datapath checks checksums: no TX offload, as the
	// agent sets it for pods.
	if err := cni.SetTxChecksum("/run/netns/"+p.netns, "eth0", false); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Vsctl("add-port", "br0", p.hostIf, "--", "set", "interface", p.hostIf, "ofport_request="+strconv.Itoa(int(port))); err != nil {
		t.Fatal(err)
	}
	return p
}

func neighbours(t *testing.T, p, peer fragPod) {
	t.Helper()
	ipCmd(t, "-n", p.netns, "neigh", "replace", peer.v4.String(), "lladdr", peer.mac.String(), "dev", "eth0", "nud", "permanent")
	ipCmd(t, "-n", p.netns, "neigh", "replace", peer.v6.String(), "lladdr", peer.mac.String(), "dev", "eth0", "nud", "permanent")
}

// fragServer counts, per port, the datagrams a pod's UDP sockets read,
// and echoes each one.
type fragServer struct {
	mu   sync.Mutex
	seen map[int][][]byte
}

func (s *fragServer) count(port int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen[port])
}

func serveFrag(t *testing.T, p fragPod, ports ...int) *fragServer {
	t.Helper()
	s := &fragServer{seen: map[int][][]byte{}}
	for _, port := range ports {
		var pc net.PacketConn
		if err := nsutil.Do(p.netns, func() error {
			var err error
			pc, err = net.ListenPacket("udp", ":"+strconv.Itoa(port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 65536)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				s.mu.Lock()
				s.seen[port] = append(s.seen[port], bytes.Clone(buf[:n]))
				s.mu.Unlock()
				_, _ = pc.WriteTo(buf[:n], from)
			}
		}()
	}
	return s
}

// sendBig sends size bytes from p to dst:port and waits up to timeout for
// the echo; it returns whether the whole datagram came back.
func sendBig(t *testing.T, p fragPod, dst netip.Addr, port, size int, timeout time.Duration) bool {
	t.Helper()
	var c net.Conn
	if err := nsutil.Do(p.netns, func() error {
		var err error
		c, err = net.Dial("udp", net.JoinHostPort(dst.String(), strconv.Itoa(port)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte{byte(port)}, size)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(buf[:n], msg)
}

// reasm returns the fragments a namespace's IP stack received for
// reassembly (IPv4 or IPv6).
func reasm(t *testing.T, netns string, v6 bool) int {
	t.Helper()
	file := "/proc/net/snmp"
	if v6 {
		file = "/proc/net/snmp6"
	}
	out, err := exec.Command("ip", "netns", "exec", netns, "cat", file).Output()
	if err != nil {
		t.Fatal(err)
	}
	if v6 {
		m := regexp.MustCompile(`(?m)^Ip6ReasmReqds\s+(\d+)$`).FindSubmatch(out)
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	var names, values []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "Ip:" {
			if names == nil {
				names = f
			} else {
				values = f
			}
		}
	}
	for i, n := range names {
		if n == "ReasmReqds" {
			v, _ := strconv.Atoi(values[i])
			return v
		}
	}
	t.Fatalf("no ReasmReqds in %s", out)
	return 0
}

// csum16 is the Internet checksum of b, folded, not inverted.
func csum16(sum uint32, b []byte) uint32 {
	for ; len(b) >= 2; b = b[2:] {
		sum += uint32(binary.BigEndian.Uint16(b))
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// rawFragment is one fragment to craft: the UDP datagram it belongs to
// (id, ports, payload), and which bytes of the datagram (UDP header
// included) it carries.
type rawFragment struct {
	id         uint32
	sport      uint16
	dport      uint16
	payload    []byte
	start, end int // bytes of the UDP datagram, end exclusive; a multiple of 8 but the last
}

// frame builds the Ethernet frame of fragment f from src to dst.
func (f rawFragment) frame(src, dst fragPod, v6 bool) []byte {
	udp := make([]byte, 8+len(f.payload))
	binary.BigEndian.PutUint16(udp[0:], f.sport)
	binary.BigEndian.PutUint16(udp[2:], f.dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], f.payload)
	sa, da := src.addr(v6).AsSlice(), dst.addr(v6).AsSlice()
	// The UDP checksum over the pseudo-header and the whole datagram.
	var sum uint32
	sum = csum16(sum, sa)
	sum = csum16(sum, da)
	sum += 17 + uint32(len(udp))
	sum = csum16(sum, udp)
	ck := fold(sum)
	if ck == 0 {
		ck = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], ck)
	part := udp[f.start:f.end]
	more := f.end < len(udp)
	eth := append(append(append([]byte{}, dst.mac...), src.mac...), 0x08, 0x00)
	if !v6 {
		// 20 bytes: version/IHL, TOS, total length, id, flags/offset,
		// TTL, protocol, checksum, source, destination.
		h := make([]byte, 20)
		h[0], h[8], h[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(part)))
		binary.BigEndian.PutUint16(h[4:], uint16(f.id))
		off := uint16(f.start / 8)
		if more {
			off |= 0x2000
		}
		binary.BigEndian.PutUint16(h[6:], off)
		copy(h[12:], sa)
		copy(h[16:], da)
		binary.BigEndian.PutUint16(h[10:], fold(csum16(0, h)))
		return append(append(eth, h...), part...)
	}
	eth[12], eth[13] = 0x86, 0xdd
	// 40 bytes: version/class/label, payload length, next header (44,
	// a fragment header), hop limit, source, destination; then 8 bytes:
	// next header (17), reserved, offset/M, identification.
	h := make([]byte, 48)
	h[0], h[6], h[7] = 0x60, 44, 64
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(part)))
	copy(h[8:], sa)
	copy(h[24:], da)
	h[40] = 17
	off := uint16(f.start)
	if more {
		off |= 1
	}
	binary.BigEndian.PutUint16(h[42:], off)
	binary.BigEndian.PutUint32(h[44:], f.id)
	return append(append(eth, h...), part...)
}

// sendFrames sends raw Ethernet frames out of p's interface.
func sendFrames(t *testing.T, p fragPod, frames ...[]byte) {
	t.Helper()
	if err := nsutil.Do(p.netns, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}
		copy(to.Addr[:], frames[0][:6])
		for _, f := range frames {
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// heldFragments returns how many fragments the datapath holds.
func heldFragments(t *testing.T, sb *ovs.Sandbox) int {
	t.Helper()
	out, err := sb.Appctl("dpctl/ipf-get-status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`num frag: (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ipf-get-status: %s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var (
	dpRecircRE   = regexp.MustCompile(`recirc_id\((0x[0-9a-f]+|\d+)\)`)
	dpRecircToRE = regexp.MustCompile(`recirc\((0x[0-9a-f]+|\d+)\)`)
	dpInPortRE   = regexp.MustCompile(`in_port\(([^)]+)\)`)
)

// passes follows, in the datapath's flows, the chain of recirculations
// of the packets that entered by the datapath port named port with a
// fragment match frag ("first" or "later"), and returns the number of
// passes (one more than the recirculations).
func passes(t *testing.T, sb *ovs.Sandbox, port, frag string) int {
	t.Helper()
	out, err := sb.Appctl("dpctl/dump-flows", "-m")
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]string{} // a flow's recirc_id -> the recirc it goes to, for the packet's flows
	start := ""
	for _, l := range strings.Split(out, "\n") {
		m := dpRecircRE.FindStringSubmatch(l)
		if m == nil || !strings.Contains(l, "frag="+frag) {
			continue
		}
		id, _ := strconv.ParseUint(m[1], 0, 32)
		to := ""
		if a := dpRecircToRE.FindStringSubmatch(l[strings.Index(l, "actions:"):]); a != nil {
			n, _ := strconv.ParseUint(a[1], 0, 32)
			to = strconv.FormatUint(n, 16)
		}
		key := strconv.FormatUint(id, 16)
		if id == 0 {
			if p := dpInPortRE.FindStringSubmatch(l); p == nil || p[1] != port {
				continue
			}
			start = key
		}
		next[key] = to
	}
	if start == "" {
		t.Fatalf("no datapath flow of a %s fragment from %s:\n%s", frag, port, out)
	}
	n := 0
	for id := start; id != ""; id = next[id] {
		n++
		if n > 10 {
			t.Fatalf("recirculation loop:\n%s", out)
		}
	}
	return n
}

// TestOVSFragments sends real fragmented UDP through the policy tables in
// a sandboxed userspace datapath, between two pods of one node: pod c
// (egress: UDP 5000 and 5002 anywhere) and pod s (ingress: UDP 5000 and
// 5001 from anyone). A 3,000-byte datagram to 5000 comes back whole; to
// 5001 (denied by c's egress, table 45) and 5002 (denied by s's ingress,
// table 65) not one fragment reaches s. Crafted fragments follow the same
// rule: the first fragment of an allowed datagram with the later fragments
// of another, to a denied port; a later fragment alone; an overlapping
// fragment. And the allowed datagram's fragments recirculate three times
// (table 25, and each table's meeting).
func TestOVSFragments(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	c, s := newFragPod(t, sb, 0, 1), newFragPod(t, sb, 1, 2)
	neighbours(t, c, s)
	neighbours(t, s, c)
	srv := serveFrag(t, s, 5000, 5001, 5002)

	cfg := Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/24"), netip.MustParsePrefix("fd09::/64")},
		Masquerade: conntrack.DefaultPlan()}
	var fs []openflow.Flow
	add := func(f []openflow.Flow, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f...)
	}
	// The pipeline around the policy tables: every IP packet from a pod
	// port is tracked in the service zone and goes to 45, the egress
	// firewall passes, routing sends the pods' subnet through 65, and
	// delivery outputs by destination.
	frame := []openflow.Flow{}
	for _, p := range []fragPod{c, s} {
		frame = append(frame, flow(plan.PodClassifier, 100, []openflow.Instruction{
			openflow.ApplyActions{Actions: []openflow.Action{plan.FromPod.Load()}}, openflow.GotoTable{Table: uint8(plan.PodConntrack)}},
			openflow.InPort(p.port)))
		for _, f := range families {
			a := p.addr(f.v6)
			frame = append(frame, flow(plan.PodLocalDelivery, 100, []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
				openflow.SetField{Field: openflow.EthDst(p.mac)}, openflow.Output{Port: p.port}}}}, f.eth, f.dst(netip.PrefixFrom(a, a.BitLen()))))
		}
	}
	for _, f := range families {
		frame = append(frame, flow(plan.PodConntrack, 50, []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
			openflow.CT{Zone: uint16(conntrack.ZoneService), RecircTable: uint8(plan.PodEgressPolicy), Actions: []openflow.Action{openflow.NAT{}}}}}}, f.eth))
	}
	for _, p := range cfg.PodCIDRs {
		f := families[0]
		if p.Addr().Is6() {
			f = families[1]
		}
		frame = append(frame, flow(plan.PodRouting, 100, goTo(plan.PodIngressPolicy), f.eth, f.dst(p)))
	}
	for _, fl := range gateway.PipelineFlows(plan.Pod) {
		switch plan.TableID(fl.Table) {
		case plan.PodEgressPolicy, plan.PodEgressFirewall, plan.PodIngressPolicy:
			fs = append(fs, fl)
		}
	}
	fs = append(fs, frame...)
	add(BaseFlows(cfg))
	add(RuleFlows(cfg, Egress, 3))
	add(RuleFlows(cfg, Ingress, 1))
	add(IsolationFlows(Egress, c.port, nil, false))
	add(IsolationFlows(Ingress, 0, []netip.Addr{s.v4, s.v6}, false))
	add(ClauseFlows(Key{Dir: Egress, InPort: c.port}, []Conj{{3, 1}}))
	for _, v6 := range []bool{false, true} {
		for _, port := range []uint16{5000, 5002} {
			add(ClauseFlows(Key{Dir: Egress, V6: v6, L4: L4{ProtoUDP, port, 0xffff}}, []Conj{{3, 2}}))
		}
		add(ClauseFlows(Key{Dir: Ingress, V6: v6}, []Conj{{1, 1}}))
		a := s.addr(v6)
		// 5000-5001 as one bitwise match.
		add(ClauseFlows(Key{Dir: Ingress, V6: v6, Dst: netip.PrefixFrom(a, a.BitLen()), L4: L4{ProtoUDP, 5000, 0xfffe}}, []Conj{{1, 2}}))
	}
	flowtest.InstallAndCompare(t, sb, "br0", fs)

	for _, v6 := range []bool{false, true} {
		fam := "ipv4"
		if v6 {
			fam = "ipv6"
		}
		dst := s.addr(v6)
		t.Run("allowed "+fam, func(t *testing.T) {
			if _, err := sb.Appctl("revalidator/purge"); err != nil {
				t.Fatal(err)
			}
			if !sendBig(t, c, dst, 5000, 3000, 2*time.Second) {
				t.Fatalf("no echo of a 3000-byte datagram to %s:5000", dst)
			}
			// The datapath port names of the pods' interfaces are theirs.
			for _, frag := range []string{"first", "later"} {
				if n := passes(t, sb, c.hostIf, frag); n != 4 {
					t.Errorf("a %s fragment took %d passes through the datapath, want 4 (3 recirculations: table 25 and the meetings of 45 and 65)", frag, n)
				}
			}
		})
		for _, port := range []int{5001, 5002} {
			t.Run(fmt.Sprintf("denied %s %d", fam, port), func(t *testing.T) {
				before, seen := reasm(t, s.netns, v6), srv.count(port)
				if sendBig(t, c, dst, port, 3000, time.Second) {
					t.Errorf("a 3000-byte datagram to %s:%d was answered", dst, port)
				}
				if n := reasm(t, s.netns, v6) - before; n != 0 {
					t.Errorf("%d fragments of a datagram to denied port %d reached the server's stack", n, port)
				}
				if srv.count(port) != seen {
					t.Errorf("the server read a datagram on denied port %d", port)
				}
				if held := heldFragments(t, sb); held == 0 {
					t.Errorf("the datapath holds no fragment: the denied datagram's later fragments should wait there")
				}
			})
		}
		t.Run("crafted "+fam, func(t *testing.T) {
			// 3,000 bytes with the UDP header, in fragments of 1,296
			// bytes (the datapath's least for a fragment that is not
			// the last is 1,200 bytes of IPv4 and 1,280 of IPv6) and
			// the rest, within the pods' MTU of 1,400.
			payload := bytes.Repeat([]byte{'x'}, 2992)
			allowed := rawFragment{id: 0x1001, sport: 40001, dport: 5000, payload: payload}
			denied := rawFragment{id: 0x1002, sport: 40002, dport: 5002, payload: payload}
			part := func(f rawFragment, start, end int) []byte {
				f.start, f.end = start, end
				return f.frame(c, s, v6)
			}
			before := reasm(t, s.netns, v6)
			// The allowed datagram's first fragment and the denied one's
			// later fragments: nothing can be put together, nothing of
			// the denied datagram may pass.
			sendFrames(t, c, part(allowed, 0, 1296), part(denied, 1296, 2592), part(denied, 2592, 3000))
			// A later fragment of a datagram whose first never comes.
			sendFrames(t, c, part(rawFragment{id: 0x1003, sport: 40003, dport: 5002, payload: payload}, 2592, 3000))
			// Give the datapath the chance to pass something on: a
			// datagram sent after them comes back first.
			if !sendBig(t, c, dst, 5000, 3000, 2*time.Second) {
				t.Fatal("no echo of the datagram sent after the crafted fragments")
			}
			if n := reasm(t, s.netns, v6) - before; n != 3 {
				t.Errorf("the server's stack received %d fragments, want only the 3 of the allowed datagram sent after", n)
			}
			// A whole allowed datagram with a duplicate of its second
			// fragment that overlaps the first: it arrives once, the
			// duplicate nowhere.
			seen := srv.count(5000)
			dup := allowed
			dup.id = 0x1004
			before = reasm(t, s.netns, v6)
			sendFrames(t, c, part(dup, 0, 1296), part(dup, 1288, 2592), part(dup, 1296, 2592), part(dup, 2592, 3000))
			deadline := time.Now().Add(2 * time.Second)
			for srv.count(5000) == seen && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if srv.count(5000) != seen+1 {
				t.Fatalf("the server read %d datagrams on 5000, want the one with the overlapping fragment", srv.count(5000)-seen)
			}
			if n := reasm(t, s.netns, v6) - before; n != 3 {
				t.Errorf("the server's stack received %d fragments, want 3 (not the overlapping one)", n)
			}
		})
	}
}
