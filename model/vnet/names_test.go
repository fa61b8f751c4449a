package vnet

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"nodeflow/cluster/namespaceid"
)

func TestLockName(t *testing.T) {
	for _, tc := range []struct {
		name string
		vni  uint32
		ip   string
		want string
	}{
		{"IPv4", 8388609, "10.0.0.5", "v8388609-10-0-0-5"},
		{"IPv4, highest VNI", MaxVNI, "255.255.255.255", "v16777215-255-255-255-255"},
		{"IPv4, zeros", MinVNI, "0.0.0.0", "v8388608-0-0-0-0"},
		{"IPv6", 8388609, "fd00::5", "v8388609-fd000000000000000000000000000005"},
		{"IPv6 ending in ::", 8388609, "fd00:0:0:1::", "v8388609-fd000000000000010000000000000000"},
		{"IPv4-mapped IPv6 is named as IPv4", 8388609, "::ffff:10.0.0.5", "v8388609-10-0-0-5"},
		{"zone ignored", 8388609, "fe80::1%eth0", "v8388609-fe800000000000000000000000000001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LockName(tc.vni, netip.MustParseAddr(tc.ip))
			if got != tc.want {
				t.Fatalf("LockName(%d, %s) = %q, want %q", tc.vni, tc.ip, got, tc.want)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("%q is not a valid object name: %v", got, errs)
			}
			vni, ip, err := ParseLockName(got)
			if err != nil || vni != tc.vni || ip != netip.MustParseAddr(tc.ip).Unmap().WithZone("") {
				t.Errorf("ParseLockName(%q) = %d, %s, %v", got, vni, ip, err)
			}
		})
	}
}

func TestParseLockNameRefuses(t *testing.T) {
	for _, name := range []string{
		"", "v", "8388609-10-0-0-5", "v8388609", "v8388609-", "v8388609-10-0-0",
		"v8388609-10-0-0-5-1", "v8388609-10-0-0-256", "v8388609-10-0-0-05", "v08388609-10-0-0-5",
		"v1-10-0-0-5", "v16777216-10-0-0-5", "v8388609-FD000000000000000000000000000005",
		"v8388609-fd00000000000000000000000000000", "v8388609-fd00000000000000000000000000000g",
		"v8388609-00000000000000000000ffff0a000005", // IPv4-mapped: named as IPv4
		"v+8388609-10-0-0-5", "v8388609-+1-0-0-5", "v8388609-10.0.0.5",
	} {
		if vni, ip, err := ParseLockName(name); err == nil {
			t.Errorf("ParseLockName(%q) = %d, %s; want an error", name, vni, ip)
		}
	}
}

// addrOf builds an address from fuzz input: IPv4 from the first 4 bytes,
// or IPv6 from 16.
func addrOf(v4 bool, b []byte) netip.Addr {
	var a [16]byte
	copy(a[:], b)
	if v4 {
		return netip.AddrFrom4([4]byte(a[:4]))
	}
	return netip.AddrFrom16(a).Unmap()
}

// FuzzLockName checks that LockName is one-to-one, names valid objects,
// and that ParseLockName inverts it.
func FuzzLockName(f *testing.F) {
	f.Add(uint32(8388609), true, []byte{10, 0, 0, 5}, uint32(8388609), true, []byte{10, 0, 0, 6})
	f.Add(uint32(8388609), false, []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 5}, uint32(8388609), true, []byte{10, 0, 0, 5})
	f.Add(uint32(8388609), true, []byte{1, 1, 1, 1}, uint32(8388610), true, []byte{1, 1, 1, 1})
	f.Add(uint32(8388610), true, []byte{1, 1, 1, 1}, uint32(8388610), false, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, vni1 uint32, v41 bool, b1 []byte, vni2 uint32, v42 bool, b2 []byte) {
		vni1, vni2 = MinVNI+vni1%(MaxVNI-MinVNI+1), MinVNI+vni2%(MaxVNI-MinVNI+1)
		a1, a2 := addrOf(v41, b1), addrOf(v42, b2)
		n1, n2 := LockName(vni1, a1), LockName(vni2, a2)
		if same := vni1 == vni2 && a1 == a2; same != (n1 == n2) {
			t.Fatalf("(%d, %s) -> %q and (%d, %s) -> %q", vni1, a1, n1, vni2, a2, n2)
		}
		if errs := validation.IsDNS1123Subdomain(n1); len(errs) > 0 || len(n1) > 42 {
			t.Fatalf("%q: %v", n1, errs)
		}
		vni, ip, err := ParseLockName(n1)
		if err != nil || vni != vni1 || ip != a1 {
			t.Fatalf("ParseLockName(%q) = %d, %s, %v; want %d, %s", n1, vni, ip, err, vni1, a1)
		}
	})
}

// FuzzParseLockName checks that a name ParseLockName accepts is the one
// LockName gives its result: one name per lock.
func FuzzParseLockName(f *testing.F) {
	for _, s := range []string{"v8388609-10-0-0-5", "v8388609-fd000000000000000000000000000005", "v8388609-10-0-0-05", "v08388609-1-1-1-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		vni, ip, err := ParseLockName(name)
		if err != nil {
			return
		}
		if got := LockName(vni, ip); got != name {
			t.Fatalf("ParseLockName(%q) = %d, %s, which LockName names %q", name, vni, ip, got)
		}
	})
}

func TestMACOf(t *testing.T) {
	for _, tc := range []struct {
		vni  uint32
		ip   string
		want string
	}{
		// VNI 0x801234: bits 12..8 are 0x12, bits 7..0 0x34.
		{0x801234, "10.0.0.5", "92:34:0a:00:00:05"},
		{0x801234, "fd00::a00:5", "96:34:0a:00:00:05"},
		{MinVNI, "192.168.1.2", "02:00:c0:a8:01:02"},
		{MaxVNI, "192.168.1.2", "fa:ff:c0:a8:01:02"},
		{0x801234, "::ffff:10.0.0.5", "92:34:0a:00:00:05"},
	} {
		got := MACOf(tc.vni, netip.MustParseAddr(tc.ip)).String()
		if got != tc.want {
			t.Errorf("MACOf(%#x, %s) = %s, want %s", tc.vni, tc.ip, got, tc.want)
		}
	}
}

// Every address of an IPv4 /16, and of an IPv6 /112 next to it, on one
// VNI has its own MAC, locally administered and unicast; so do the same
// address on VNIs whose low 13 bits differ.
func TestMACOfUnique(t *testing.T) {
	seen := map[string]string{}
	check := func(vni uint32, a netip.Addr) {
		mac := MACOf(vni, a)
		if mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
			t.Fatalf("MACOf(%d, %s) = %s: not locally administered unicast", vni, a, mac)
		}
		k := mac.String()
		if prev, ok := seen[k]; ok {
			t.Fatalf("MACOf(%d, %s) = %s, the MAC of %s", vni, a, k, prev)
		}
		seen[k] = a.String()
	}
	for a := range RangeOf(netip.MustParsePrefix("10.1.0.0/16")).All() {
		check(MinVNI+7, a)
	}
	for a := range RangeOf(netip.MustParsePrefix("fd00::a01:0/112")).All() {
		check(MinVNI+7, a)
	}
	clear(seen)
	a := netip.MustParseAddr("10.0.0.1")
	for v := range uint32(1 << 13) {
		check(MinVNI+v, a)
	}
}

func TestParseCIDR(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		err  string
	}{
		{"10.0.0.0/24", ""},
		{"10.0.0.0/8", ""},
		{"10.0.0.7/32", ""},
		{"fd00::/64", ""},
		{"fd00::1/128", ""},
		{"10.0.0.1/24", "host bits set"},
		{"10.0.0.0/7", "shorter than /8"},
		{"fd00::/63", "shorter than /64"},
		{"::ffff:10.0.0.0/120", "IPv4-mapped"},
		{"10.0.0.0", "not a CIDR"},
		{"10.0.0.0/33", "not a CIDR"},
		{"", "not a CIDR"},
	} {
		_, err := ParseCIDR(tc.cidr)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseCIDR(%q) error %v, want %q", tc.cidr, err, tc.err)
		}
	}
	s := &Subnet{Spec: SubnetSpec{VNI: 7, CIDR: "10.0.0.1/24"}}
	s.Namespace, s.Name = "ns", "blue"
	_, err := s.Parse()
	if err == nil || !strings.Contains(err.Error(), "Subnet ns/blue") || !strings.Contains(err.Error(), "spec.vni: 7 is not in") || !strings.Contains(err.Error(), "spec.cidr:") {
		t.Errorf("Subnet.Parse: %v, want errors naming the Subnet, spec.vni and spec.cidr", err)
	}
}

func TestNewIPLock(t *testing.T) {
	att := &NetworkAttachment{}
	att.Namespace, att.Name, att.UID = "ns", "a1", "uid-1"
	l := NewIPLock(att, MinVNI+1, netip.MustParseAddr("10.0.0.9"))
	if l.Name != "v8388609-10-0-0-9" || l.Namespace != "ns" || l.Spec != (IPLockSpec{Attachment: "a1", VNI: MinVNI + 1, IP: "10.0.0.9"}) {
		t.Errorf("lock %s/%s %+v", l.Namespace, l.Name, l.Spec)
	}
	ref, ok := l.Holder()
	if !ok || ref.Name != "a1" || ref.UID != "uid-1" || ref.BlockOwnerDeletion == nil || *ref.BlockOwnerDeletion {
		t.Errorf("holder %+v %v: want a1/uid-1, blockOwnerDeletion false", ref, ok)
	}
	// Not a holder: no controller reference, or another kind.
	l.OwnerReferences[0].Controller = nil
	if _, ok := l.Holder(); ok {
		t.Error("a non-controller reference holds the lock")
	}
	yes := true
	l.OwnerReferences[0].Controller = &yes
	l.OwnerReferences[0].APIVersion = "v1"
	if _, ok := l.Holder(); ok {
		t.Error("a reference of another group holds the lock")
	}
}

// The VNI range is the half of the 24-bit id space that package nsid
// leaves to virtual networks.
func TestVNIRangeIsNsidsReservedHalf(t *testing.T) {
	if MinVNI != namespaceid.FirstVNI || MaxVNI != namespaceid.LastVNI || namespaceid.ValidID(MinVNI) || namespaceid.ValidID(MaxVNI) {
		t.Errorf("VNIs %#x..%#x, nsid reserves %#x..%#x", MinVNI, MaxVNI, namespaceid.FirstVNI, namespaceid.LastVNI)
	}
}
