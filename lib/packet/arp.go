package packet

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// ARPRequestLen is the length of the frame ARPRequest builds: a 14-byte
// Ethernet header and a 28-byte ARP packet, padded with zeros to Ethernet's
// 60-byte minimum (without the frame check sequence).
const ARPRequestLen = 60

// ARPRequest returns an Ethernet frame, from srcMAC to dstMAC (unicast, as
// a neighbour's reachability is confirmed, or broadcast), in which src at
// srcMAC asks who has dst.
func ARPRequest(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr) ([]byte, error) {
	if !src.Is4() || !dst.Is4() || len(srcMAC) != 6 || len(dstMAC) != 6 {
		return nil, fmt.Errorf("ARP request from %s (%s) to %s (%s): need IPv4 addresses and Ethernet MACs", src, srcMAC, dst, dstMAC)
	}
	b := make([]byte, ARPRequestLen)
	copy(b[0:6], dstMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:14], EtherTypeARP)
	// ARP: 2 bytes hardware type (1, Ethernet), 2 bytes protocol type
	// (IPv4), 1 byte hardware and 1 byte protocol address lengths, 2 bytes
	// operation (1, request), then the sender's MAC and IPv4 address and
	// the target's (its MAC unknown: zero).
	a := b[14:]
	binary.BigEndian.PutUint16(a[0:2], 1)
	binary.BigEndian.PutUint16(a[2:4], EtherTypeIPv4)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:8], 1)
	copy(a[8:14], srcMAC)
	s4, d4 := src.As4(), dst.As4()
	copy(a[14:18], s4[:])
	copy(a[24:28], d4[:])
	return b, nil
}
