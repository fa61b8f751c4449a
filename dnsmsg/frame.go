package dnsmsg

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
)

// DNSPort is the port DNS servers answer from.
const DNSPort = 53

// EtherTypes and IP protocol numbers read by DecodeFrame.
const (
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86dd
	etherTypeVLAN  = 0x8100
	etherTypeQinQ  = 0x88a8
	protoHopByHop  = 0
	protoUDP       = 17
	protoRouting   = 43
	protoFragment  = 44
	protoDestOpts  = 60
	maxVLANTags    = 2
	maxIPv6ExtHdrs = 8
)

// Datagram is a UDP datagram found in a frame.
type Datagram struct {
	// Src and Dst are the IP addresses and UDP ports.
	Src, Dst netip.AddrPort
	// Payload is the UDP payload, as long as the UDP length says. It
	// refers to the frame's bytes.
	Payload []byte
}

// DecodeFrame finds the UDP datagram in an Ethernet frame and checks that
// it comes from port 53. It allocates nothing unless it fails. Errors wrap
// io.ErrUnexpectedEOF when the frame is shorter than its headers say,
// ErrNotIP, ErrNotUDP, ErrFragment, ErrNotDNSPort or ErrInvalid.
func DecodeFrame(frame []byte) (Datagram, error) {
	d, err := decodeUDP(frame)
	if err != nil {
		return Datagram{}, err
	}
	if d.Src.Port() != DNSPort {
		return Datagram{}, fmt.Errorf("dnsmsg: udp source port %d: %w", d.Src.Port(), ErrNotDNSPort)
	}
	return d, nil
}

// decodeUDP walks Ethernet, IP and UDP.
func decodeUDP(frame []byte) (Datagram, error) {
	// Ethernet: 6 bytes destination, 6 bytes source, 2 bytes EtherType.
	// A VLAN tag puts 2 bytes TPID (the EtherType 0x8100 or 0x88a8) and 2
	// bytes TCI before the real EtherType.
	if len(frame) < 14 {
		return Datagram{}, fmt.Errorf("dnsmsg: ethernet header: %d bytes, want 14: %w", len(frame), io.ErrUnexpectedEOF)
	}
	etherType := binary.BigEndian.Uint16(frame[12:14])
	b := frame[14:]
	for tags := 0; etherType == etherTypeVLAN || etherType == etherTypeQinQ; tags++ {
		if tags == maxVLANTags {
			return Datagram{}, fmt.Errorf("dnsmsg: ethernet: more than %d vlan tags: %w", maxVLANTags, ErrInvalid)
		}
		if len(b) < 4 {
			return Datagram{}, fmt.Errorf("dnsmsg: vlan tag %d: %d bytes, want 4: %w", tags+1, len(b), io.ErrUnexpectedEOF)
		}
		etherType = binary.BigEndian.Uint16(b[2:4])
		b = b[4:]
	}
	var (
		src, dst netip.Addr
		udp      []byte
		err      error
	)
	switch etherType {
	case etherTypeIPv4:
		src, dst, udp, err = decodeIPv4(b)
	case etherTypeIPv6:
		src, dst, udp, err = decodeIPv6(b)
	default:
		return Datagram{}, fmt.Errorf("dnsmsg: ethertype %#04x: %w", etherType, ErrNotIP)
	}
	if err != nil {
		return Datagram{}, err
	}
	// UDP: 2 bytes source port, 2 bytes destination port, 2 bytes length
	// (header included), 2 bytes checksum.
	if len(udp) < 8 {
		return Datagram{}, fmt.Errorf("dnsmsg: udp header: %d bytes, want 8: %w", len(udp), io.ErrUnexpectedEOF)
	}
	length := int(binary.BigEndian.Uint16(udp[4:6]))
	switch {
	case length < 8:
		return Datagram{}, fmt.Errorf("dnsmsg: udp length %d, less than its 8-byte header: %w", length, ErrInvalid)
	case length > len(udp):
		return Datagram{}, fmt.Errorf("dnsmsg: udp length %d, %d bytes present: %w", length, len(udp), io.ErrUnexpectedEOF)
	}
	return Datagram{
		Src:     netip.AddrPortFrom(src, binary.BigEndian.Uint16(udp[0:2])),
		Dst:     netip.AddrPortFrom(dst, binary.BigEndian.Uint16(udp[2:4])),
		Payload: udp[8:length],
	}, nil
}

// decodeIPv4 returns the addresses and the payload of a UDP packet.
func decodeIPv4(b []byte) (src, dst netip.Addr, payload []byte, err error) {
	// IPv4: 1 byte version (4 bits) and header length in 32-bit words (4
	// bits), 1 byte DSCP/ECN, 2 bytes total length, 2 bytes
	// identification, 2 bytes flags (3 bits, MF is 0x2000) and fragment
	// offset (13 bits), 1 byte TTL, 1 byte protocol, 2 bytes checksum,
	// 4 bytes source, 4 bytes destination, options.
	if len(b) < 20 {
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv4 header: %d bytes, want 20: %w", len(b), io.ErrUnexpectedEOF)
	}
	if v := b[0] >> 4; v != 4 {
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv4 version %d: %w", v, ErrInvalid)
	}
	hlen := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	switch {
	case hlen < 20:
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv4 header length %d bytes, less than 20: %w", hlen, ErrInvalid)
	case total < hlen:
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv4 total length %d, less than the header's %d: %w", total, hlen, ErrInvalid)
	case total > len(b):
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv4 total length %d, %d bytes present: %w", total, len(b), io.ErrUnexpectedEOF)
	}
	if frag := binary.BigEndian.Uint16(b[6:8]); frag&0x3fff != 0 {
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv4 flags and offset %#04x: %w", frag, ErrFragment)
	}
	if p := b[9]; p != protoUDP {
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv4 protocol %d: %w", p, ErrNotUDP)
	}
	src = netip.AddrFrom4([4]byte(b[12:16]))
	dst = netip.AddrFrom4([4]byte(b[16:20]))
	return src, dst, b[hlen:total], nil
}

// decodeIPv6 returns the addresses and the payload of a UDP packet,
// skipping extension headers.
func decodeIPv6(b []byte) (src, dst netip.Addr, payload []byte, err error) {
	// IPv6: 4 bytes version (4 bits), traffic class and flow label, 2
	// bytes payload length, 1 byte next header, 1 byte hop limit, 16
	// bytes source, 16 bytes destination.
	if len(b) < 40 {
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 header: %d bytes, want 40: %w", len(b), io.ErrUnexpectedEOF)
	}
	if v := b[0] >> 4; v != 6 {
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 version %d: %w", v, ErrInvalid)
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	next := b[6]
	src = netip.AddrFrom16([16]byte(b[8:24]))
	dst = netip.AddrFrom16([16]byte(b[24:40]))
	switch {
	case plen == 0:
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 payload length 0 (a jumbogram or empty): %w", ErrInvalid)
	case plen > len(b)-40:
		return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 payload length %d, %d bytes present: %w", plen, len(b)-40, io.ErrUnexpectedEOF)
	}
	payload = b[40 : 40+plen]
	for n := 0; next != protoUDP; n++ {
		if n == maxIPv6ExtHdrs {
			return src, dst, nil, fmt.Errorf("dnsmsg: ipv6: more than %d extension headers: %w", maxIPv6ExtHdrs, ErrInvalid)
		}
		switch next {
		case protoHopByHop, protoRouting, protoDestOpts:
			// 1 byte next header, 1 byte length in 8-byte units after
			// the first 8, options.
			if len(payload) < 2 {
				return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 extension header %d: %d bytes: %w", next, len(payload), io.ErrUnexpectedEOF)
			}
			l := (int(payload[1]) + 1) * 8
			if l > len(payload) {
				return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 extension header %d: length %d, %d bytes present: %w", next, l, len(payload), io.ErrUnexpectedEOF)
			}
			next, payload = payload[0], payload[l:]
		case protoFragment:
			// 1 byte next header, 1 byte reserved, 2 bytes offset (13
			// bits) and flags (M is 0x1), 4 bytes identification. An
			// atomic fragment (offset 0, M clear) is a whole packet.
			if len(payload) < 8 {
				return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 fragment header: %d bytes, want 8: %w", len(payload), io.ErrUnexpectedEOF)
			}
			if off := binary.BigEndian.Uint16(payload[2:4]); off&0xfff9 != 0 {
				return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 fragment offset and flags %#04x: %w", off, ErrFragment)
			}
			next, payload = payload[0], payload[8:]
		default:
			return src, dst, nil, fmt.Errorf("dnsmsg: ipv6 next header %d: %w", next, ErrNotUDP)
		}
	}
	return src, dst, payload, nil
}
