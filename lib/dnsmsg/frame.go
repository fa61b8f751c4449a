package dnsmsg

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"

	"nodeflow/lib/packet"
)

// DNSPort is the port DNS servers answer from.
const DNSPort = 53

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
	ip, err := packet.Decode(frame)
	if err != nil {
		return Datagram{}, fmt.Errorf("dnsmsg: %w", err)
	}
	if ip.Proto != packet.ProtoUDP {
		return Datagram{}, fmt.Errorf("dnsmsg: ip protocol %d: %w", ip.Proto, ErrNotUDP)
	}
	// UDP: 2 bytes source port, 2 bytes destination port, 2 bytes length
	// (header included), 2 bytes checksum.
	udp := ip.Transport
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
		Src:     netip.AddrPortFrom(ip.Src, binary.BigEndian.Uint16(udp[0:2])),
		Dst:     netip.AddrPortFrom(ip.Dst, binary.BigEndian.Uint16(udp[2:4])),
		Payload: udp[8:length],
	}, nil
}
