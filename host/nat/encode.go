package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Map elements. nftables pads every field of a concatenation to a multiple
// of 4 bytes (one 32-bit register); numbers are in network byte order.
//
// Key (ipv4_addr . inet_proto . inet_service), 12 bytes:
//
//	0      4        5     8        10    12
//	| addr | proto  | pad | port   | pad |
//
// Key (ipv6_addr . inet_proto . inet_service), 24 bytes:
//
//	0      16       17    20       22    24
//	| addr | proto  | pad | port   | pad |
//
// Value (ipv4_addr . inet_service), 8 bytes; (ipv6_addr . inet_service),
// 20 bytes:
//
//	0      4|16     6|18  8|20
//	| addr | port   | pad |

// keyLen and valLen return the element sizes of a family.
func keyLen(v6 bool) int {
	if v6 {
		return 24
	}
	return 12
}

func valLen(v6 bool) int {
	if v6 {
		return 20
	}
	return 8
}

// encodeKey returns the map key of k.
func encodeKey(k Key) []byte {
	a := k.Daddr.AsSlice()
	b := make([]byte, len(a)+8)
	copy(b, a)
	b[len(a)] = k.Proto
	binary.BigEndian.PutUint16(b[len(a)+4:], k.Port)
	return b
}

// encodeVal returns the map value of ap.
func encodeVal(ap netip.AddrPort) []byte {
	a := ap.Addr().AsSlice()
	b := make([]byte, len(a)+4)
	copy(b, a)
	binary.BigEndian.PutUint16(b[len(a):], ap.Port())
	return b
}

// decodeElement parses one element of a family's map.
func decodeElement(v6 bool, key, val []byte) (Rule, error) {
	fam := "ip"
	if v6 {
		fam = "ip6"
	}
	if len(key) != keyLen(v6) {
		return Rule{}, fmt.Errorf("hostnat: %s map element: key of %d bytes, want %d", fam, len(key), keyLen(v6))
	}
	if len(val) != valLen(v6) {
		return Rule{}, fmt.Errorf("hostnat: %s map element: value of %d bytes, want %d", fam, len(val), valLen(v6))
	}
	n := 4
	if v6 {
		n = 16
	}
	daddr, _ := netip.AddrFromSlice(key[:n])
	to, _ := netip.AddrFromSlice(val[:n])
	return Rule{
		Key: Key{Daddr: daddr, Proto: key[n], Port: binary.BigEndian.Uint16(key[n+4:])},
		To:  netip.AddrPortFrom(to, binary.BigEndian.Uint16(val[n:])),
	}, nil
}
