// Package packet reads the headers of the Ethernet frames that Open
// vSwitch hands the agent in packet-ins, and builds the few frames the
// agent sends itself. It does no I/O and allocates nothing unless it
// fails.
//
// Decode walks Ethernet (with up to two 802.1Q/802.1ad tags), IPv4 or IPv6
// (skipping hop-by-hop, routing and destination options headers, and
// atomic fragments) to the transport header, and returns the addresses,
// the transport protocol and the transport bytes. It checks every length
// against both the header's claim and the bytes present: a frame cut
// short, for example by a packet-in's max_len, gives io.ErrUnexpectedEOF.
//
// # Why not gopacket
//
// The agent's tests build and check frames with gopacket, as an
// independent implementation. The agent itself does not link it: the
// package github.com/gopacket/gopacket/layers declares two tables of
// 65,536 pointer-holding entries (2.5 MiB each) that the garbage collector
// scans on every cycle, which keeps 5.3 MiB of the process resident and
// adds their scan to every collection, for the three headers the agent
// reads and the one frame it builds (docs/benchmarks.md, "Memory at 10,000
// Services").
package packet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
)

// EtherTypes and IP protocol numbers.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	etherTypeQinQ = 0x88a8

	ProtoTCP      = 6
	ProtoUDP      = 17
	ProtoSCTP     = 132
	protoHopByHop = 0
	protoRouting  = 43
	protoFragment = 44
	protoDestOpts = 60

	maxVLANTags    = 2
	maxIPv6ExtHdrs = 8
)

// Sentinel errors. Decode's errors wrap one of these, or io.ErrUnexpectedEOF
// when the frame ends before its headers say, and name the field that was
// wrong.
var (
	// ErrNotIP means the frame carries neither IPv4 nor IPv6.
	ErrNotIP = errors.New("not an IPv4 or IPv6 packet")
	// ErrFragment means the packet is a fragment of a larger one, whose
	// transport header (if any) cannot be read on its own.
	ErrFragment = errors.New("a fragment")
	// ErrInvalid means a header field holds a value that cannot be right.
	ErrInvalid = errors.New("invalid value")
)

// IP is an IP packet found in a frame.
type IP struct {
	// Src and Dst are the IP addresses.
	Src, Dst netip.Addr
	// Proto is the transport protocol: the IPv4 protocol, or the IPv6
	// next header after the extension headers Decode skips.
	Proto uint8
	// Transport is the transport header and its payload, as long as the
	// IP header says (Ethernet padding left out). It refers to the frame's
	// bytes.
	Transport []byte
}

// Ports returns the source and destination ports of a TCP, UDP or SCTP
// packet (each begins with them); false for another protocol or a
// transport header too short to hold them.
func (p IP) Ports() (src, dst uint16, ok bool) {
	switch p.Proto {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
	default:
		return 0, 0, false
	}
	if len(p.Transport) < 4 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(p.Transport[0:2]), binary.BigEndian.Uint16(p.Transport[2:4]), true
}

// ProtoName returns the name of an IP protocol the agent logs by name
// (TCP, UDP, SCTP, ICMP, IPv6-ICMP), or its number.
func ProtoName(proto uint8) string {
	switch proto {
	case ProtoTCP:
		return "TCP"
	case ProtoUDP:
		return "UDP"
	case ProtoSCTP:
		return "SCTP"
	case 1:
		return "ICMP"
	case 58:
		return "IPv6-ICMP"
	}
	return fmt.Sprint(proto)
}

// Decode finds the IP packet in an Ethernet frame. For a fragment it
// returns ErrFragment with the addresses and the protocol set, and no
// transport bytes.
func Decode(frame []byte) (IP, error) {
	// Ethernet: 6 bytes destination, 6 bytes source, 2 bytes EtherType.
	// A VLAN tag puts 2 bytes TPID (the EtherType 0x8100 or 0x88a8) and 2
	// bytes TCI before the real EtherType.
	if len(frame) < 14 {
		return IP{}, fmt.Errorf("ethernet header: %d bytes, want 14: %w", len(frame), io.ErrUnexpectedEOF)
	}
	etherType := binary.BigEndian.Uint16(frame[12:14])
	b := frame[14:]
	for tags := 0; etherType == etherTypeVLAN || etherType == etherTypeQinQ; tags++ {
		if tags == maxVLANTags {
			return IP{}, fmt.Errorf("ethernet: more than %d vlan tags: %w", maxVLANTags, ErrInvalid)
		}
		if len(b) < 4 {
			return IP{}, fmt.Errorf("vlan tag %d: %d bytes, want 4: %w", tags+1, len(b), io.ErrUnexpectedEOF)
		}
		etherType = binary.BigEndian.Uint16(b[2:4])
		b = b[4:]
	}
	switch etherType {
	case EtherTypeIPv4:
		return decodeIPv4(b)
	case EtherTypeIPv6:
		return decodeIPv6(b)
	}
	return IP{}, fmt.Errorf("ethertype %#04x: %w", etherType, ErrNotIP)
}

// decodeIPv4 reads an IPv4 header.
func decodeIPv4(b []byte) (IP, error) {
	// IPv4: 1 byte version (4 bits) and header length in 32-bit words (4
	// bits), 1 byte DSCP/ECN, 2 bytes total length, 2 bytes
	// identification, 2 bytes flags (3 bits, MF is 0x2000) and fragment
	// offset (13 bits), 1 byte TTL, 1 byte protocol, 2 bytes checksum,
	// 4 bytes source, 4 bytes destination, options.
	if len(b) < 20 {
		return IP{}, fmt.Errorf("ipv4 header: %d bytes, want 20: %w", len(b), io.ErrUnexpectedEOF)
	}
	if v := b[0] >> 4; v != 4 {
		return IP{}, fmt.Errorf("ipv4 version %d: %w", v, ErrInvalid)
	}
	hlen := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	switch {
	case hlen < 20:
		return IP{}, fmt.Errorf("ipv4 header length %d bytes, less than 20: %w", hlen, ErrInvalid)
	case total < hlen:
		return IP{}, fmt.Errorf("ipv4 total length %d, less than the header's %d: %w", total, hlen, ErrInvalid)
	case total > len(b):
		return IP{}, fmt.Errorf("ipv4 total length %d, %d bytes present: %w", total, len(b), io.ErrUnexpectedEOF)
	}
	p := IP{Src: netip.AddrFrom4([4]byte(b[12:16])), Dst: netip.AddrFrom4([4]byte(b[16:20])), Proto: b[9]}
	if frag := binary.BigEndian.Uint16(b[6:8]); frag&0x3fff != 0 {
		return p, fmt.Errorf("ipv4 flags and offset %#04x: %w", frag, ErrFragment)
	}
	p.Transport = b[hlen:total]
	return p, nil
}

// decodeIPv6 reads an IPv6 header and skips its extension headers.
func decodeIPv6(b []byte) (IP, error) {
	// IPv6: 4 bytes version (4 bits), traffic class and flow label, 2
	// bytes payload length, 1 byte next header, 1 byte hop limit, 16
	// bytes source, 16 bytes destination.
	if len(b) < 40 {
		return IP{}, fmt.Errorf("ipv6 header: %d bytes, want 40: %w", len(b), io.ErrUnexpectedEOF)
	}
	if v := b[0] >> 4; v != 6 {
		return IP{}, fmt.Errorf("ipv6 version %d: %w", v, ErrInvalid)
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	p := IP{Src: netip.AddrFrom16([16]byte(b[8:24])), Dst: netip.AddrFrom16([16]byte(b[24:40])), Proto: b[6]}
	switch {
	case plen == 0:
		return IP{}, fmt.Errorf("ipv6 payload length 0 (a jumbogram or empty): %w", ErrInvalid)
	case plen > len(b)-40:
		return IP{}, fmt.Errorf("ipv6 payload length %d, %d bytes present: %w", plen, len(b)-40, io.ErrUnexpectedEOF)
	}
	payload := b[40 : 40+plen]
	for n := 0; ; n++ {
		switch p.Proto {
		case protoHopByHop, protoRouting, protoDestOpts, protoFragment:
		default:
			p.Transport = payload
			return p, nil
		}
		if n == maxIPv6ExtHdrs {
			return IP{}, fmt.Errorf("ipv6: more than %d extension headers: %w", maxIPv6ExtHdrs, ErrInvalid)
		}
		if p.Proto == protoFragment {
			// 1 byte next header, 1 byte reserved, 2 bytes offset (13
			// bits) and flags (M is 0x1), 4 bytes identification. An
			// atomic fragment (offset 0, M clear) is a whole packet.
			if len(payload) < 8 {
				return IP{}, fmt.Errorf("ipv6 fragment header: %d bytes, want 8: %w", len(payload), io.ErrUnexpectedEOF)
			}
			p.Proto = payload[0]
			if off := binary.BigEndian.Uint16(payload[2:4]); off&0xfff9 != 0 {
				return p, fmt.Errorf("ipv6 fragment offset and flags %#04x: %w", off, ErrFragment)
			}
			payload = payload[8:]
			continue
		}
		// 1 byte next header, 1 byte length in 8-byte units after the
		// first 8, options.
		if len(payload) < 2 {
			return IP{}, fmt.Errorf("ipv6 extension header %d: %d bytes: %w", p.Proto, len(payload), io.ErrUnexpectedEOF)
		}
		l := (int(payload[1]) + 1) * 8
		if l > len(payload) {
			return IP{}, fmt.Errorf("ipv6 extension header %d: length %d, %d bytes present: %w", p.Proto, l, len(payload), io.ErrUnexpectedEOF)
		}
		p.Proto, payload = payload[0], payload[l:]
	}
}
