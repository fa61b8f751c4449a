package servicefeature

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Answers to new connections to a service port without endpoints: the
// switch sends the first packet to the agent (a metered packet-in), and
// the agent sends back, by packet-out through the port it came from, what
// kube-proxy's REJECT rule would: a TCP RST+ACK, or an ICMP (ICMPv6)
// destination/port unreachable for anything else.

// errNotRejectable is returned for frames the reject path does not answer.
var errNotRejectable = errors.New("not an IPv4 or IPv6 packet")

// Frame offsets and constants.
const (
	ethLen      = 14 // dst(6) src(6) ethertype(2)
	ethTypeIPv4 = 0x0800
	ethTypeIPv6 = 0x86dd
	ipv4MinLen  = 20
	ipv6Len     = 40
	tcpMinLen   = 20
	protoTCP    = 6
	protoICMP   = 1
	protoICMPv6 = 58

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10

	// icmpQuoteV4 is how much of the offending datagram an ICMP error
	// quotes (RFC 792: header plus 64 bits; we quote up to 548 bytes of
	// IP, which keeps the error within 576 bytes as RFC 1812 allows).
	icmpQuoteV4 = 548
	// icmpQuoteV6 keeps an ICMPv6 error within the IPv6 minimum MTU.
	icmpQuoteV6 = 1280 - ipv6Len - 8
)

// rejectReply returns the frame that rejects frame: a TCP RST+ACK for a
// TCP segment, an ICMP port unreachable (ICMPv6 port unreachable) for any
// other protocol. Addresses, MACs and ports are swapped; checksums are
// complete, because the userspace datapath and the receiving stack check
// them.
func rejectReply(frame []byte) ([]byte, error) {
	if len(frame) < ethLen {
		return nil, fmt.Errorf("services: reject: frame of %d bytes: shorter than an ethernet header", len(frame))
	}
	switch et := binary.BigEndian.Uint16(frame[12:14]); et {
	case ethTypeIPv4:
		return rejectIPv4(frame)
	case ethTypeIPv6:
		return rejectIPv6(frame)
	default:
		return nil, fmt.Errorf("services: reject: ethertype 0x%04x: %w", et, errNotRejectable)
	}
}

// ethReply returns a new frame of the reply's ethernet header: MACs swapped,
// same ethertype.
//
//	0: dst MAC (6) | 6: src MAC (6) | 12: ethertype (2)
func ethReply(frame []byte, size int) []byte {
	out := make([]byte, ethLen, ethLen+size)
	copy(out[0:6], frame[6:12])
	copy(out[6:12], frame[0:6])
	copy(out[12:14], frame[12:14])
	return out
}

// IPv4 header:
//
//	0: version/IHL | 1: TOS | 2: total length (2) | 4: id (2) | 6: flags/frag (2)
//	8: TTL | 9: protocol | 10: checksum (2) | 12: src (4) | 16: dst (4)
func rejectIPv4(frame []byte) ([]byte, error) {
	ip := frame[ethLen:]
	if len(ip) < ipv4MinLen || ip[0]>>4 != 4 {
		return nil, fmt.Errorf("services: reject: ipv4 header: truncated or bad version")
	}
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ihl < ipv4MinLen || total < ihl || total > len(ip) {
		return nil, fmt.Errorf("services: reject: ipv4 header: length %d, total %d, frame %d: inconsistent", ihl, total, len(ip))
	}
	ip = ip[:total]
	if binary.BigEndian.Uint16(ip[6:8])&0x1fff != 0 {
		return nil, fmt.Errorf("services: reject: ipv4: a non-first fragment: %w", errNotRejectable)
	}
	src, dst := ip[12:16], ip[16:20]
	// ICMP: type 3 (destination unreachable), code 3 (port unreachable).
	proto, payload, err := rejectAnswer(ip, ihl, ip[9] == protoTCP, src, dst, unreachable{
		typ: 3, code: 3, proto: protoICMP, quote: icmpQuoteV4,
		sum: func(msg []byte) uint16 { return checksum(0, msg) },
	})
	if err != nil {
		return nil, err
	}
	out := ethReply(frame, ipv4MinLen+len(payload))
	h := make([]byte, ipv4MinLen)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:4], uint16(ipv4MinLen+len(payload)))
	binary.BigEndian.PutUint16(h[6:8], 0x4000) // don't fragment
	h[8], h[9] = 64, proto
	copy(h[12:16], dst)
	copy(h[16:20], src)
	binary.BigEndian.PutUint16(h[10:12], checksum(0, h))
	out = append(out, h...)
	return append(out, payload...), nil
}

// unreachable is the ICMP port unreachable of one family: its type and
// code, its protocol number, how much of the packet it quotes, and its
// checksum.
type unreachable struct {
	typ, code, proto byte
	quote            int
	sum              func(msg []byte) uint16
}

// rejectAnswer is the answer to ip, whose layer 4 starts at l4: a TCP RST
// to a TCP segment, else u.
func rejectAnswer(ip []byte, l4 int, tcp bool, src, dst []byte, u unreachable) (proto byte, payload []byte, err error) {
	if tcp {
		seg, err := rstFor(ip[l4:], src, dst)
		if err != nil {
			return 0, nil, err
		}
		return protoTCP, seg, nil
	}
	quote := ip
	if len(quote) > u.quote {
		quote = quote[:u.quote]
	}
	// type, code, checksum (2), unused (4), the quoted packet.
	msg := make([]byte, 8, 8+len(quote))
	msg[0], msg[1] = u.typ, u.code
	msg = append(msg, quote...)
	binary.BigEndian.PutUint16(msg[2:4], u.sum(msg))
	return u.proto, msg, nil
}

// IPv6 header:
//
//	0: version/class/flow (4) | 4: payload length (2) | 6: next header | 7: hop limit
//	8: src (16) | 24: dst (16)
//
// Extension headers are not walked: a packet with any is not answered by
// TCP RST but, like every other protocol, by ICMPv6.
func rejectIPv6(frame []byte) ([]byte, error) {
	ip := frame[ethLen:]
	if len(ip) < ipv6Len || ip[0]>>4 != 6 {
		return nil, fmt.Errorf("services: reject: ipv6 header: truncated or bad version")
	}
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if ipv6Len+plen > len(ip) {
		return nil, fmt.Errorf("services: reject: ipv6: payload length %d beyond the frame (%d)", plen, len(ip)-ipv6Len)
	}
	ip = ip[:ipv6Len+plen]
	src, dst := ip[8:24], ip[24:40]
	// ICMPv6: type 1 (destination unreachable), code 4 (port unreachable).
	next, payload, err := rejectAnswer(ip, ipv6Len, ip[6] == protoTCP, src, dst, unreachable{
		typ: 1, code: 4, proto: protoICMPv6, quote: icmpQuoteV6,
		sum: func(msg []byte) uint16 { return checksum(pseudoSum(dst, src, protoICMPv6, len(msg)), msg) },
	})
	if err != nil {
		return nil, err
	}
	out := ethReply(frame, ipv6Len+len(payload))
	h := make([]byte, ipv6Len)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:6], uint16(len(payload)))
	h[6], h[7] = next, 64
	copy(h[8:24], dst)
	copy(h[24:40], src)
	out = append(out, h...)
	return append(out, payload...), nil
}

// rstFor returns the RST+ACK segment answering seg, which src sent to dst.
// RFC 9293 3.10.7.1: with ACK set in seg the reset takes seq = SEG.ACK;
// otherwise seq 0 and ack = SEG.SEQ + SEG.LEN (SYN and FIN count one).
// A segment carrying RST is never answered.
//
// TCP header:
//
//	0: src port (2) | 2: dst port (2) | 4: seq (4) | 8: ack (4)
//	12: data offset (4 bits) | 13: flags | 14: window (2) | 16: checksum (2) | 18: urgent (2)
func rstFor(seg, src, dst []byte) ([]byte, error) {
	if len(seg) < tcpMinLen {
		return nil, fmt.Errorf("services: reject: tcp header: %d bytes, want %d", len(seg), tcpMinLen)
	}
	off := int(seg[12]>>4) * 4
	if off < tcpMinLen || off > len(seg) {
		return nil, fmt.Errorf("services: reject: tcp header: data offset %d: outside the segment (%d)", off, len(seg))
	}
	flags := seg[13]
	if flags&tcpRST != 0 {
		return nil, fmt.Errorf("services: reject: tcp: a reset is not answered: %w", errNotRejectable)
	}
	inSeq := binary.BigEndian.Uint32(seg[4:8])
	inAck := binary.BigEndian.Uint32(seg[8:12])
	segLen := uint32(len(seg) - off)
	if flags&tcpSYN != 0 {
		segLen++
	}
	if flags&tcpFIN != 0 {
		segLen++
	}
	r := make([]byte, tcpMinLen)
	copy(r[0:2], seg[2:4])
	copy(r[2:4], seg[0:2])
	if flags&tcpACK != 0 {
		binary.BigEndian.PutUint32(r[4:8], inAck)
	}
	binary.BigEndian.PutUint32(r[8:12], inSeq+segLen)
	r[12] = (tcpMinLen / 4) << 4
	r[13] = tcpRST | tcpACK
	binary.BigEndian.PutUint16(r[16:18], checksum(pseudoSum(dst, src, protoTCP, len(r)), r))
	return r, nil
}

// pseudoSum is the unfolded sum of the pseudo-header of a reply from src to
// dst: the addresses (4 or 16 bytes each), the protocol and the length.
func pseudoSum(src, dst []byte, proto byte, length int) uint32 {
	var s uint32
	for _, a := range [][]byte{src, dst} {
		for i := 0; i+1 < len(a); i += 2 {
			s += uint32(binary.BigEndian.Uint16(a[i:]))
		}
	}
	return s + uint32(proto) + uint32(length)
}

// checksum folds the Internet checksum (RFC 1071) of b, starting from the
// unfolded partial sum.
func checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// frameSource returns the IP source address of an ethernet frame, if it
// carries IPv4 or IPv6.
func frameSource(frame []byte) (netip.Addr, bool) {
	src, _, ok := frameAddrs(frame)
	return src, ok
}

// frameAddrs returns the IP source and destination of an ethernet frame,
// if it carries IPv4 or IPv6.
func frameAddrs(frame []byte) (src, dst netip.Addr, ok bool) {
	if len(frame) < ethLen {
		return src, dst, false
	}
	ip := frame[ethLen:]
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case ethTypeIPv4:
		if len(ip) >= ipv4MinLen {
			return netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])), true
		}
	case ethTypeIPv6:
		if len(ip) >= ipv6Len {
			return netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])), true
		}
	}
	return src, dst, false
}

// withSource returns a copy of frame whose source MAC is mac and whose IP
// source is src (of the frame's family), the IPv4 header checksum
// recomputed. The reject path uses it to answer the host directly: a
// packet the host sent to a service reaches br0 SNATed to the host
// masquerade address, and the answer must reach the host's socket at the
// node IP.
func withSource(frame []byte, mac net.HardwareAddr, src netip.Addr) ([]byte, error) {
	cur, ok := frameSource(frame)
	if !ok || cur.Is4() != src.Is4() || len(mac) != 6 {
		return nil, fmt.Errorf("services: reject: cannot rewrite the source of a %d-byte frame to %s", len(frame), src)
	}
	out := append([]byte(nil), frame...)
	copy(out[6:12], mac)
	ip := out[ethLen:]
	if src.Is4() {
		a := src.As4()
		copy(ip[12:16], a[:])
		ihl := int(ip[0]&0x0f) * 4
		if ihl >= ipv4MinLen && ihl <= len(ip) {
			ip[10], ip[11] = 0, 0
			binary.BigEndian.PutUint16(ip[10:12], checksum(0, ip[:ihl]))
		}
		return out, nil
	}
	a := src.As16()
	copy(ip[8:24], a[:])
	return out, nil
}
