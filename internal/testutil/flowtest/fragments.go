package flowtest

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

	"nodeflow/host/cni"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// Real packets through a sandbox's userspace datapath, for the tests of
// the flows that judge IP fragments: two pods on br0 (network namespaces
// with a veth whose peer is a port), a UDP echo server, datagrams sent by
// the kernel and fragments crafted byte by byte, and oracles for what the
// datapath holds and how many times a packet recirculated.

// Pod is a test pod: a network namespace with an interface (eth0, MTU
// 1,400, TX checksum offload off as the agent sets it) whose peer is a
// port of the sandbox's br0.
type Pod struct {
	Netns, HostIf string
	Port          uint32
	MAC           net.HardwareAddr
	V4, V6        netip.Addr
}

// Addr returns the pod's address of a family.
func (p Pod) Addr(v6 bool) netip.Addr {
	if v6 {
		return p.V6
	}
	return p.V4
}

// ipCmd runs ip(8), the test's plumbing tool.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// NewPod makes pod i's namespace and veth (addresses 10.9.0.(4+i)/24 and
// fd09::(4+i)/64) and plugs the peer into br0 as ofport port; both go at
// the test's end.
func NewPod(t *testing.T, sb *ovs.Sandbox, i int, port uint32) Pod {
	t.Helper()
	p := Pod{
		Netns:  fmt.Sprintf("nffrag%d-%d", os.Getpid(), i),
		HostIf: fmt.Sprintf("nff%d-%d", os.Getpid()%100000, i),
		Port:   port,
		MAC:    net.HardwareAddr{0x0a, 0x58, 0x0a, 0x09, 0x00, byte(4 + i)},
		V4:     netip.AddrFrom4([4]byte{10, 9, 0, byte(4 + i)}),
		V6:     netip.MustParseAddr(fmt.Sprintf("fd09::%d", 4+i)),
	}
	ipCmd(t, "netns", "add", p.Netns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.Netns).Run() })
	ipCmd(t, "link", "add", p.HostIf, "netns", sb.Netns, "type", "veth", "peer", "name", "eth0", "netns", p.Netns)
	ipCmd(t, "-n", sb.Netns, "link", "set", p.HostIf, "up")
	ipCmd(t, "-n", p.Netns, "link", "set", "eth0", "address", p.MAC.String(), "mtu", "1400")
	ipCmd(t, "-n", p.Netns, "addr", "add", p.V4.String()+"/24", "dev", "eth0")
	ipCmd(t, "-n", p.Netns, "addr", "add", p.V6.String()+"/64", "dev", "eth0", "nodad")
	ipCmd(t, "-n", p.Netns, "link", "set", "eth0", "up")
	ipCmd(t, "-n", p.Netns, "link", "set", "lo", "up")
	// The userspace datapath checks checksums: no TX offload, as the
	// agent sets it for pods.
	if err := cni.SetTxChecksum("/run/netns/"+p.Netns, "eth0", false); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Vsctl("add-port", "br0", p.HostIf, "--", "set", "interface", p.HostIf, "ofport_request="+strconv.Itoa(int(port))); err != nil {
		t.Fatal(err)
	}
	return p
}

// Neighbours gives p static neighbour entries for peer's addresses, so
// that no ARP or neighbour discovery is needed.
func Neighbours(t *testing.T, p, peer Pod) {
	t.Helper()
	ipCmd(t, "-n", p.Netns, "neigh", "replace", peer.V4.String(), "lladdr", peer.MAC.String(), "dev", "eth0", "nud", "permanent")
	ipCmd(t, "-n", p.Netns, "neigh", "replace", peer.V6.String(), "lladdr", peer.MAC.String(), "dev", "eth0", "nud", "permanent")
}

// NewPodPair starts a sandbox with br0 (ovstest.AddBridge) and two pods
// on it, each with the other's addresses as static neighbours: a client
// c (pod 0, port 1) and a server s (pod 1, port 2) that echoes UDP on
// ports.
func NewPodPair(t *testing.T, ports ...int) (sb *ovs.Sandbox, c, s Pod, srv *UDPServer) {
	t.Helper()
	sb = ovstest.New(t, ovs.Options{})
	ovstest.AddBridge(t, sb, "br0")
	c, s = NewPod(t, sb, 0, 1), NewPod(t, sb, 1, 2)
	Neighbours(t, c, s)
	Neighbours(t, s, c)
	return sb, c, s, ServeUDP(t, s, ports...)
}

// UDPServer counts, per port, the datagrams a pod's UDP sockets read,
// and echoes each one.
type UDPServer struct {
	mu   sync.Mutex
	seen map[int][][]byte
}

// Count returns how many datagrams port read.
func (s *UDPServer) Count(port int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen[port])
}

// ServeUDP starts an echo server on ports in p, until the test ends.
func ServeUDP(t *testing.T, p Pod, ports ...int) *UDPServer {
	t.Helper()
	s := &UDPServer{seen: map[int][][]byte{}}
	for _, port := range ports {
		var pc net.PacketConn
		if err := nsutil.Do(p.Netns, func() error {
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

// SendDatagram sends size bytes from p to dst:port and waits up to timeout for
// the echo; it returns whether the whole datagram came back.
func SendDatagram(t *testing.T, p Pod, dst netip.Addr, port, size int, timeout time.Duration) bool {
	t.Helper()
	var c net.Conn
	if err := nsutil.Do(p.Netns, func() error {
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

// ReasmRequests returns how many IP fragments (IPv4 or IPv6) a network
// namespace's stack has received for reassembly: a fragment that gets
// through counts there, whatever becomes of it.
func ReasmRequests(t *testing.T, netns string, v6 bool) int {
	t.Helper()
	if !v6 {
		return SNMPCounter(t, netns, "Ip", "ReasmReqds")
	}
	const file = "/proc/net/snmp6"
	out, err := exec.Command("ip", "netns", "exec", netns, "cat", file).Output()
	if err != nil {
		t.Fatalf("read %s in %s: %v", file, netns, err)
	}
	m := regexp.MustCompile(`(?m)^Ip6ReasmReqds\s+(\d+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s in %s: no Ip6ReasmReqds", file, netns)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// SNMPCounter reads one counter of a network namespace's /proc/net/snmp:
// proto is the prefix of its two lines, names then values (Ip, Tcp, Udp,
// ...), name the column.
func SNMPCounter(t *testing.T, netns, proto, name string) int {
	t.Helper()
	const file = "/proc/net/snmp"
	out, err := exec.Command("ip", "netns", "exec", netns, "cat", file).Output()
	if err != nil {
		t.Fatalf("read %s in %s: %v", file, netns, err)
	}
	var head []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, proto+": ") {
			continue
		}
		f := strings.Fields(l)
		if head == nil {
			head = f
			continue
		}
		for i, h := range head {
			if h == name && i < len(f) {
				n, _ := strconv.Atoi(f[i])
				return n
			}
		}
	}
	t.Fatalf("%s in %s: no %s %s", file, netns, proto, name)
	return 0
}

// csum16 adds b to the running Internet checksum sum, in 16-bit words.
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

// Fragment is one fragment to craft: the UDP datagram it belongs to
// (id, ports, payload), and which bytes of the datagram (UDP header
// included) it carries.
type Fragment struct {
	ID         uint32
	SrcPort    uint16
	DstPort    uint16
	Payload    []byte
	Start, End int // bytes of the UDP datagram, end exclusive; a multiple of 8 but the last
}

// Frame builds the Ethernet frame of fragment f from src to dst.
func (f Fragment) Frame(src, dst Pod, v6 bool) []byte {
	udp := make([]byte, 8+len(f.Payload))
	binary.BigEndian.PutUint16(udp[0:], f.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], f.DstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], f.Payload)
	sa, da := src.Addr(v6).AsSlice(), dst.Addr(v6).AsSlice()
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
	part := udp[f.Start:f.End]
	more := f.End < len(udp)
	eth := append(append(append([]byte{}, dst.MAC...), src.MAC...), 0x08, 0x00)
	if !v6 {
		// 20 bytes: version/IHL, TOS, total length, id, flags/offset,
		// TTL, protocol, checksum, source, destination.
		h := make([]byte, 20)
		h[0], h[8], h[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(part)))
		binary.BigEndian.PutUint16(h[4:], uint16(f.ID))
		off := uint16(f.Start / 8)
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
	off := uint16(f.Start)
	if more {
		off |= 1
	}
	binary.BigEndian.PutUint16(h[42:], off)
	binary.BigEndian.PutUint32(h[44:], f.ID)
	return append(append(eth, h...), part...)
}

// SendFrames sends raw Ethernet frames out of p's interface.
func SendFrames(t *testing.T, p Pod, frames ...[]byte) {
	t.Helper()
	if err := nsutil.Do(p.Netns, func() error {
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

// HeldFragments returns how many fragments the datapath holds.
func HeldFragments(t *testing.T, sb *ovs.Sandbox) int {
	t.Helper()
	out, err := sb.Appctl("dpctl/ipf-get-status")
	if err != nil {
		t.Fatal(err)
	}
	n, err := ParseHeldFragments(out)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var heldRE = regexp.MustCompile(`num frag: (\d+)`)

// ParseHeldFragments returns how many fragments a userspace datapath
// holds for reassembly, from the output of `ovs-appctl
// dpctl/ipf-get-status`.
func ParseHeldFragments(status string) (int, error) {
	m := heldRE.FindStringSubmatch(status)
	if m == nil {
		return 0, fmt.Errorf("ipf-get-status: no fragment count in %q", status)
	}
	return strconv.Atoi(m[1])
}

var (
	dpRecircRE   = regexp.MustCompile(`recirc_id\((0x[0-9a-f]+|\d+)\)`)
	dpRecircToRE = regexp.MustCompile(`recirc\((0x[0-9a-f]+|\d+)\)`)
	dpInPortRE   = regexp.MustCompile(`in_port\(([^)]+)\)`)
)

// DatapathPasses follows, in the datapath's flows, the chain of recirculations
// of the packets that entered by the datapath port named port with a
// fragment match frag ("first" or "later"), and returns the number of
// passes (one more than the recirculations).
func DatapathPasses(t *testing.T, sb *ovs.Sandbox, port, frag string) int {
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
