package servicefeature

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

var (
	macA = []byte{0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x05}
	macB = []byte{0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x01}
)

// frame builds an ethernet frame from macA to macB around an IP packet
// from src to dst carrying l4 (a TCP segment or a UDP datagram, checksum
// left zero: the reject path does not check the input's).
func frame(src, dst netip.Addr, proto byte, l4 []byte) []byte {
	f := append(append(append([]byte{}, macB...), macA...), 0, 0)
	if src.Is4() {
		binary.BigEndian.PutUint16(f[12:], ethTypeIPv4)
		h := make([]byte, 20)
		h[0], h[8], h[9] = 0x45, 64, proto
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		binary.BigEndian.PutUint16(h[10:], checksum(0, h))
		return append(append(f, h...), l4...)
	}
	binary.BigEndian.PutUint16(f[12:], ethTypeIPv6)
	h := make([]byte, 40)
	h[0], h[6], h[7] = 0x60, proto, 64
	binary.BigEndian.PutUint16(h[4:], uint16(len(l4)))
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(append(f, h...), l4...)
}

func tcpSeg(sport, dport uint16, seq, ack uint32, flags byte, payload int) []byte {
	s := make([]byte, 20+payload)
	binary.BigEndian.PutUint16(s[0:], sport)
	binary.BigEndian.PutUint16(s[2:], dport)
	binary.BigEndian.PutUint32(s[4:], seq)
	binary.BigEndian.PutUint32(s[8:], ack)
	s[12], s[13] = 5<<4, flags
	return s
}

// parsed is the reply as the tests read it.
type parsed struct {
	src, dst         netip.Addr
	proto            byte
	l4               []byte
	ipOK, l4OK, macs bool
}

func parseReply(t *testing.T, f []byte) parsed {
	t.Helper()
	var p parsed
	p.macs = bytes.Equal(f[0:6], macA) && bytes.Equal(f[6:12], macB)
	ip := f[ethLen:]
	switch binary.BigEndian.Uint16(f[12:14]) {
	case ethTypeIPv4:
		p.src = netip.AddrFrom4([4]byte(ip[12:16]))
		p.dst = netip.AddrFrom4([4]byte(ip[16:20]))
		p.proto = ip[9]
		p.ipOK = checksum(0, ip[:20]) == 0 && int(binary.BigEndian.Uint16(ip[2:4])) == len(ip)
		p.l4 = ip[20:]
		if p.proto == protoTCP {
			p.l4OK = checksum(pseudoSum(ip[12:16], ip[16:20], protoTCP, len(p.l4)), p.l4) == 0
		} else {
			p.l4OK = checksum(0, p.l4) == 0
		}
	case ethTypeIPv6:
		p.src = netip.AddrFrom16([16]byte(ip[8:24]))
		p.dst = netip.AddrFrom16([16]byte(ip[24:40]))
		p.proto = ip[6]
		p.ipOK = int(binary.BigEndian.Uint16(ip[4:6])) == len(ip)-40
		p.l4 = ip[40:]
		p.l4OK = checksum(pseudoSum(ip[8:24], ip[24:40], p.proto, len(p.l4)), p.l4) == 0
	default:
		t.Fatalf("reply ethertype %x", f[12:14])
	}
	return p
}

func TestRejectReply(t *testing.T) {
	pod4, vip4 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.96.0.10")
	pod6, vip6 := netip.MustParseAddr("fd00:10:244:1::5"), netip.MustParseAddr("fd00:10:96::10")
	udp := []byte{0x9c, 0x40, 0, 53, 0, 13, 0, 0, 'h', 'e', 'l', 'l', 'o'}
	for _, tc := range []struct {
		name             string
		in               []byte
		proto            byte
		seq, ack         uint32 // TCP replies
		icmpType, icmpCd byte   // ICMP replies
	}{
		{name: "tcp syn v4", in: frame(pod4, vip4, protoTCP, tcpSeg(40000, 80, 1000, 0, tcpSYN, 0)), proto: protoTCP, seq: 0, ack: 1001},
		{name: "tcp syn v6", in: frame(pod6, vip6, protoTCP, tcpSeg(40000, 80, 7, 0, tcpSYN, 0)), proto: protoTCP, seq: 0, ack: 8},
		{name: "tcp data with ack", in: frame(pod4, vip4, protoTCP, tcpSeg(40000, 80, 500, 900, tcpACK, 10)), proto: protoTCP, seq: 900, ack: 510},
		{name: "tcp fin ack", in: frame(pod4, vip4, protoTCP, tcpSeg(40000, 80, 500, 900, tcpACK|tcpFIN, 0)), proto: protoTCP, seq: 900, ack: 501},
		{name: "udp v4", in: frame(pod4, vip4, 17, udp), proto: protoICMP, icmpType: 3, icmpCd: 3},
		{name: "udp v6", in: frame(pod6, vip6, 17, udp), proto: protoICMPv6, icmpType: 1, icmpCd: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := rejectReply(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			p := parseReply(t, out)
			in := parseReply(t, append(append(append([]byte{}, macA...), macB...), tc.in[12:]...))
			if !p.macs {
				t.Errorf("macs not swapped: % x", out[:12])
			}
			if p.src != in.dst || p.dst != in.src {
				t.Errorf("reply %s -> %s, want %s -> %s", p.src, p.dst, in.dst, in.src)
			}
			if !p.ipOK || !p.l4OK {
				t.Errorf("bad header (ip ok %v) or checksum (l4 ok %v)", p.ipOK, p.l4OK)
			}
			if p.proto != tc.proto {
				t.Fatalf("protocol %d, want %d", p.proto, tc.proto)
			}
			if tc.proto == protoTCP {
				r := p.l4
				if r[13] != tcpRST|tcpACK {
					t.Errorf("flags %#x, want RST|ACK", r[13])
				}
				if sp, dp := binary.BigEndian.Uint16(r[0:]), binary.BigEndian.Uint16(r[2:]); sp != 80 || dp != 40000 {
					t.Errorf("ports %d -> %d, want 80 -> 40000", sp, dp)
				}
				if seq, ack := binary.BigEndian.Uint32(r[4:]), binary.BigEndian.Uint32(r[8:]); seq != tc.seq || ack != tc.ack {
					t.Errorf("seq %d ack %d, want %d %d", seq, ack, tc.seq, tc.ack)
				}
				return
			}
			if p.l4[0] != tc.icmpType || p.l4[1] != tc.icmpCd {
				t.Errorf("icmp type %d code %d, want %d %d", p.l4[0], p.l4[1], tc.icmpType, tc.icmpCd)
			}
			if !bytes.Equal(p.l4[8:], tc.in[ethLen:]) {
				t.Errorf("quoted packet differs from the offending one")
			}
		})
	}
}

func TestRejectReplyRefuses(t *testing.T) {
	pod4, vip4 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.96.0.10")
	rst := frame(pod4, vip4, protoTCP, tcpSeg(1, 2, 3, 4, tcpRST, 0))
	arp := append(append(append([]byte{}, macB...), macA...), 0x08, 0x06, 0, 1)
	for _, tc := range []struct {
		name   string
		in     []byte
		silent bool // errNotRejectable: dropped without complaint
	}{
		{"empty", nil, false},
		{"arp", arp, true},
		{"tcp rst", rst, true},
		{"truncated ipv4", rst[:ethLen+10], false},
		{"truncated tcp", rst[:ethLen+20+8], false},
		{"ipv4 total beyond frame", func() []byte {
			b := append([]byte{}, rst...)
			binary.BigEndian.PutUint16(b[ethLen+2:], 400)
			return b
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := rejectReply(tc.in)
			if err == nil {
				t.Fatalf("answered with % x", out)
			}
			if errors.Is(err, errNotRejectable) != tc.silent {
				t.Errorf("error %v: not-rejectable %v, want %v", err, errors.Is(err, errNotRejectable), tc.silent)
			}
		})
	}
}

func FuzzRejectReply(f *testing.F) {
	pod4, vip4 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.96.0.10")
	pod6, vip6 := netip.MustParseAddr("fd00::5"), netip.MustParseAddr("fd00::10")
	f.Add(frame(pod4, vip4, protoTCP, tcpSeg(1, 80, 5, 0, tcpSYN, 0)))
	f.Add(frame(pod6, vip6, protoTCP, tcpSeg(1, 80, 5, 9, tcpACK, 3)))
	f.Add(frame(pod4, vip4, 17, []byte{0, 1, 0, 2, 0, 8, 0, 0}))
	f.Add(frame(pod6, vip6, 132, []byte{1, 2, 3}))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := rejectReply(in)
		if err != nil {
			return
		}
		// Every reply is a well-formed frame with valid checksums, and
		// rejecting it again never panics.
		if len(out) < ethLen+ipv4MinLen {
			t.Fatalf("reply of %d bytes", len(out))
		}
		p := parseReply(t, out)
		if !p.ipOK || !p.l4OK {
			t.Fatalf("reply with a bad header (%v) or checksum (%v): % x", p.ipOK, p.l4OK, out)
		}
		_, _ = rejectReply(out)
	})
}

func TestWithSource(t *testing.T) {
	host4, vip4, node4 := netip.MustParseAddr("169.254.169.2"), netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("172.30.0.11")
	host6, vip6, node6 := netip.MustParseAddr("fd69::2"), netip.MustParseAddr("fd00:10:96::10"), netip.MustParseAddr("fd00:172:30::11")
	mac := []byte{2, 0, 0, 0, 0, 9}
	for _, tc := range []struct {
		name    string
		in      []byte
		node    netip.Addr
		wantErr bool
		vip     netip.Addr
	}{
		{name: "ipv4", in: frame(host4, vip4, protoTCP, tcpSeg(40000, 80, 1, 0, tcpSYN, 0)), node: node4, vip: vip4},
		{name: "ipv6", in: frame(host6, vip6, 17, []byte{0, 1, 0, 53, 0, 8, 0, 0}), node: node6, vip: vip6},
		{name: "family mismatch", in: frame(host4, vip4, protoTCP, tcpSeg(1, 2, 3, 4, tcpSYN, 0)), node: node6, wantErr: true},
		{name: "short", in: []byte{1, 2, 3}, node: node4, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := withSource(tc.in, mac, tc.node)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if src, _ := frameSource(out); src != tc.node {
				t.Errorf("source %s, want %s", src, tc.node)
			}
			if !bytes.Equal(out[6:12], mac) {
				t.Errorf("source mac % x", out[6:12])
			}
			if tc.node.Is4() && checksum(0, out[ethLen:ethLen+20]) != 0 {
				t.Errorf("ipv4 header checksum not recomputed")
			}
			reply, err := rejectReply(out)
			if err != nil {
				t.Fatal(err)
			}
			p := parseReply(t, reply)
			if p.dst != tc.node || p.src != tc.vip || !bytes.Equal(reply[0:6], mac) || !p.ipOK || !p.l4OK {
				t.Errorf("reply %s -> %s (mac % x, ok %v %v), want %s -> %s", p.src, p.dst, reply[0:6], p.ipOK, p.l4OK, tc.vip, tc.node)
			}
		})
	}
}
