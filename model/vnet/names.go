package vnet

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The VNI range. br0 carries a 24-bit id in the VXLAN key: namespace ids
// take the lower half (package nsid, 1..0x7fffff), virtual networks the
// upper half, so a VNI never reads as a namespace id on the wire.
const (
	MinVNI uint32 = 0x800000 // 8388608
	MaxVNI uint32 = 0xffffff // 16777215
)

// ValidVNI reports whether vni is in MinVNI..MaxVNI.
func ValidVNI(vni uint32) bool { return vni >= MinVNI && vni <= MaxVNI }

// The shortest prefixes a Subnet may have.
const (
	MinIPv4PrefixLen = 8
	MinIPv6PrefixLen = 64
)

// Errors of ParseLockName.
var (
	ErrNotLockName = errors.New("not an IPLock name: want v<vni>-<a-b-c-d> or v<vni>-<32 hex digits>")
	ErrVNIRange    = fmt.Errorf("VNI not in %d..%d", MinVNI, MaxVNI)
)

// LockName returns the name of the IPLock of ip on vni:
//
//	v<vni in decimal>-<a>-<b>-<c>-<d>     IPv4: the dotted quad with dashes
//	v<vni in decimal>-<32 hex digits>     IPv6: the 16 bytes in lowercase hex
//
// for example v8388609-10-0-0-5 and v8388609-fd000000000000000000000000000005.
// Both are DNS subdomains (as metadata.name must be), at most 42
// characters long, and the two forms cannot be confused, so the name is a
// one-to-one function of (vni, ip). An IPv6 address is spelled out in
// full because its colons cannot be mapped to dashes: "fd00::" would end
// in a dash. An IPv4-mapped IPv6 address is named as its IPv4 address, and
// a zone is ignored.
func LockName(vni uint32, ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	b := make([]byte, 0, 42)
	b = append(b, 'v')
	b = strconv.AppendUint(b, uint64(vni), 10)
	b = append(b, '-')
	if ip.Is4() {
		a := ip.As4()
		for i, o := range a {
			if i > 0 {
				b = append(b, '-')
			}
			b = strconv.AppendUint(b, uint64(o), 10)
		}
		return string(b)
	}
	a := ip.As16()
	return string(hex.AppendEncode(b, a[:]))
}

// ParseLockName is the inverse of LockName. It accepts exactly the names
// LockName returns for a VNI in MinVNI..MaxVNI: decimal without leading
// zeros, lowercase hex.
func ParseLockName(name string) (vni uint32, ip netip.Addr, err error) {
	rest, ok := strings.CutPrefix(name, "v")
	if !ok {
		return 0, netip.Addr{}, ErrNotLockName
	}
	num, addr, ok := strings.Cut(rest, "-")
	if !ok || !canonicalDecimal(num, 8) {
		return 0, netip.Addr{}, ErrNotLockName
	}
	v, err := strconv.ParseUint(num, 10, 32)
	if err != nil {
		return 0, netip.Addr{}, ErrNotLockName
	}
	if !ValidVNI(uint32(v)) {
		return 0, netip.Addr{}, ErrVNIRange
	}
	if len(addr) == 32 {
		var a [16]byte
		if _, err := hex.Decode(a[:], []byte(addr)); err != nil || strings.ToLower(addr) != addr {
			return 0, netip.Addr{}, ErrNotLockName
		}
		ip = netip.AddrFrom16(a)
		if ip.Is4In6() {
			return 0, netip.Addr{}, ErrNotLockName // LockName names it as IPv4
		}
		return uint32(v), ip, nil
	}
	parts := strings.Split(addr, "-")
	if len(parts) != 4 {
		return 0, netip.Addr{}, ErrNotLockName
	}
	var a [4]byte
	for i, p := range parts {
		if !canonicalDecimal(p, 3) {
			return 0, netip.Addr{}, ErrNotLockName
		}
		o, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return 0, netip.Addr{}, ErrNotLockName
		}
		a[i] = byte(o)
	}
	return uint32(v), netip.AddrFrom4(a), nil
}

// canonicalDecimal reports whether s is 1 to max decimal digits without a
// leading zero (but "0" itself).
func canonicalDecimal(s string, max int) bool {
	if s == "" || len(s) > max || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// MACOf returns the MAC of the attachment that has ip on vni: a locally
// administered unicast address, a function of the VNI and the address
// alone, so that every node computes the same one without asking.
//
//	byte 0: bits 7..3: VNI bits 12..8
//	        bit 2:     the family: 0 IPv4, 1 IPv6
//	        bit 1:     1, locally administered
//	        bit 0:     0, unicast
//	byte 1: VNI bits 7..0
//	bytes 2..5: the IPv4 address, or the last 4 bytes of the IPv6 address
//
// On one VNI, two IPv4 addresses never share a MAC, nor does an IPv4
// address share one with an IPv6 address. Two IPv6 addresses share one
// when their last 32 bits are equal, which two addresses of one Subnet of
// 2^32 addresses or fewer (a /96 or longer) never are; the IPAM controller
// skips an IPv6 address whose MAC another address of its VNI has (see
// docs/virtual-networks.md). Attachments of two VNIs whose low 13 bits
// differ never share a MAC; VNIs isolate, so those that do need not differ.
func MACOf(vni uint32, ip netip.Addr) net.HardwareAddr {
	ip = ip.Unmap()
	mac := make(net.HardwareAddr, 6)
	mac[0] = byte((vni>>8)&0x1f)<<3 | 0x02
	mac[1] = byte(vni)
	if ip.Is4() {
		a := ip.As4()
		copy(mac[2:], a[:])
	} else {
		mac[0] |= 0x04
		a := ip.As16()
		copy(mac[2:], a[12:])
	}
	return mac
}

// ParseCIDR reads a Subnet's spec.cidr: an IPv4 prefix of length
// MinIPv4PrefixLen or more, or an IPv6 prefix of length MinIPv6PrefixLen or
// more, without host bits set, not IPv4-mapped and without a zone.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
	}
	a := p.Addr()
	switch {
	case a.Is4In6():
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 prefix", s)
	case p.Masked() != p:
		return netip.Prefix{}, fmt.Errorf("%q has host bits set (the prefix is %s)", s, p.Masked())
	case a.Is4() && p.Bits() < MinIPv4PrefixLen:
		return netip.Prefix{}, fmt.Errorf("%q is shorter than /%d", s, MinIPv4PrefixLen)
	case a.Is6() && p.Bits() < MinIPv6PrefixLen:
		return netip.Prefix{}, fmt.Errorf("%q is shorter than /%d", s, MinIPv6PrefixLen)
	}
	return p, nil
}

// Parse checks the Subnet's spec and returns its prefix; the error names
// the Subnet and the field.
func (s *Subnet) Parse() (netip.Prefix, error) {
	var errs []error
	if !ValidVNI(s.Spec.VNI) {
		errs = append(errs, fmt.Errorf("spec.vni: %d is not in %d..%d", s.Spec.VNI, MinVNI, MaxVNI))
	}
	p, err := ParseCIDR(s.Spec.CIDR)
	if err != nil {
		errs = append(errs, fmt.Errorf("spec.cidr: %w", err))
	}
	if len(errs) > 0 {
		return netip.Prefix{}, fmt.Errorf("vnet: Subnet %s/%s: %w", s.Namespace, s.Name, errors.Join(errs...))
	}
	return p, nil
}

// NewIPLock returns the lock that gives ip on vni to att: named
// LockName(vni, ip), in att's namespace, owned by att (its controller, so
// that the garbage collector deletes it with att; blockOwnerDeletion is
// false, so that deleting att waits for nothing).
func NewIPLock(att *NetworkAttachment, vni uint32, ip netip.Addr) *IPLock {
	ip = ip.Unmap().WithZone("")
	yes, no := true, false
	return &IPLock{
		TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: KindIPLock},
		ObjectMeta: metav1.ObjectMeta{
			Name:      LockName(vni, ip),
			Namespace: att.Namespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         APIVersion,
				Kind:               KindNetworkAttachment,
				Name:               att.Name,
				UID:                att.UID,
				Controller:         &yes,
				BlockOwnerDeletion: &no,
			}},
		},
		Spec: IPLockSpec{Attachment: att.Name, VNI: vni, IP: ip.String()},
	}
}

// Holder returns the name and UID of the NetworkAttachment that holds the
// lock: its controller owner reference of kind NetworkAttachment in this
// API group. ok is false for a lock without one (a reservation).
func (k *IPLock) Holder() (ref metav1.OwnerReference, ok bool) {
	for _, r := range k.OwnerReferences {
		if r.Controller == nil || !*r.Controller || r.Kind != KindNetworkAttachment {
			continue
		}
		if gv, err := parseGroup(r.APIVersion); err != nil || gv != Group {
			continue
		}
		return r, true
	}
	return metav1.OwnerReference{}, false
}

func parseGroup(apiVersion string) (string, error) {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return "", fmt.Errorf("apiVersion %q has no group", apiVersion)
	}
	return g, nil
}
