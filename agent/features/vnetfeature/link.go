package vnetfeature

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/host/cni"
	"nodeflow/host/nsrun"
)

// Names of an attachment's interface and namespace.
const (
	// InterfacePrefix starts the name of both ends of an attachment's veth
	// pair: "vn" and 10 hex digits of SHA-256 of the attachment's UID.
	InterfacePrefix = "vn"
	// NetnsPrefix starts the name of an attachment's network namespace.
	NetnsPrefix = "vnet-"
	// maxNetnsName bounds a readable namespace name; a longer one is
	// hashed.
	maxNetnsName = 64
)

// InterfaceName returns the name of both ends of the veth pair of the
// attachment with uid: "vn" and 10 hex digits of SHA-256(uid), 12
// characters (IFNAMSIZ allows 15). It is a function of the UID alone, so
// an attachment deleted and created again under the same name gets
// another interface, and the old one is recognised as stale.
func InterfaceName(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return InterfacePrefix + hex.EncodeToString(sum[:])[:10]
}

// isInterfaceName reports whether s is an InterfaceName. libvirt's vnetN
// devices, say, are not ("t" is not a hex digit).
func isInterfaceName(s string) bool {
	if len(s) != len(InterfacePrefix)+10 || !strings.HasPrefix(s, InterfacePrefix) {
		return false
	}
	for _, c := range s[len(InterfacePrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NetnsName returns the name of the network namespace of the attachment
// namespace/name: "vnet-<namespace>.<name>" (a namespace name holds no
// dot, so the first dot separates the two), or, when that is longer than
// 64 characters, "vnet-" and 16 hex digits of SHA-256("<namespace>/<name>")
// (which holds no dot, so it never equals a readable name).
func NetnsName(namespace, name string) string {
	s := NetnsPrefix + namespace + "." + name
	if len(s) <= maxNetnsName {
		return s
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return NetnsPrefix + hex.EncodeToString(sum[:])[:16]
}

// Spec is one attachment's interface: a veth pair named Name at both ends,
// one end in the host's namespace (a port of br0), the other, with MAC and
// Addr, in the attachment's own namespace Netns.
type Spec struct {
	Name  string
	Netns string
	MAC   net.HardwareAddr
	// Addr is the attachment's address with its Subnet's prefix length.
	Addr netip.Prefix
	MTU  int
}

// Links makes, adopts and removes the attachments' interfaces over
// netlink.
type Links struct {
	// HostNetns is the path of the network namespace br0's ports are in;
	// "" is the agent's own.
	HostNetns string
	// NetnsDir holds the attachments' namespaces (DefaultNetnsDir).
	NetnsDir string
	// ProcSysNet is where /proc/sys/net is writable (hostnet.ProcSysNet);
	// a thread sees its own namespace's sysctls there.
	ProcSysNet string
}

func (l *Links) netnsPath(name string) string { return filepath.Join(l.NetnsDir, name) }

// Dir is NetnsDir.
func (l *Links) Dir() string { return l.NetnsDir }

// hostHandle returns a netlink handle on the host's namespace.
func (l *Links) hostHandle() (*netlink.Handle, error) {
	if l.HostNetns == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromPath(l.HostNetns)
	if err != nil {
		return nil, fmt.Errorf("host netns %s: %w", l.HostNetns, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// nsHandle returns a netlink handle on the namespace at path.
func nsHandle(path string) (*netlink.Handle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// inHost runs fn in the host's namespace.
func (l *Links) inHost(fn func() error) error {
	if l.HostNetns == "" {
		return fn()
	}
	return nsrun.Do(l.HostNetns, fn)
}

func notFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// Ensure makes s's interface, or adopts the one that is already there
// when it is exactly s (its traffic is not interrupted: adopted is true).
// Anything else of that name or namespace is removed and made again.
func (l *Links) Ensure(s Spec) (adopted bool, err error) {
	host, err := l.hostHandle()
	if err != nil {
		return false, err
	}
	defer host.Close()
	if why := l.check(host, s); why == nil {
		// Idempotent, and cheap: the offload and sysctls as made.
		return true, l.tune(s)
	} else if !errors.Is(why, errAbsent) {
		if err := l.Remove(s.Name, s.Netns); err != nil {
			return false, fmt.Errorf("interface %s in %s is not as wanted (%v): %w", s.Name, s.Netns, why, err)
		}
	}
	if err := l.create(host, s); err != nil {
		_ = l.Remove(s.Name, s.Netns)
		return false, err
	}
	return false, nil
}

// errAbsent: nothing of the attachment's interface exists yet.
var errAbsent = errors.New("absent")

// check returns why the interface on the host is not s (nil when it is;
// errAbsent when nothing of it exists).
func (l *Links) check(host *netlink.Handle, s Spec) error {
	path := l.netnsPath(s.Netns)
	hostEnd, herr := host.LinkByName(s.Name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if herr != nil && notFound(herr) {
			return errAbsent
		}
		return fmt.Errorf("namespace %s is missing", s.Netns)
	}
	if herr != nil {
		return fmt.Errorf("host end: %w", herr)
	}
	nh, err := nsHandle(path)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", s.Netns, err)
	}
	defer nh.Close()
	in, err := nh.LinkByName(s.Name)
	if err != nil {
		return fmt.Errorf("attachment end: %w", err)
	}
	switch {
	case hostEnd.Type() != "veth" || in.Type() != "veth":
		return fmt.Errorf("not a veth pair")
	case in.Attrs().ParentIndex != hostEnd.Attrs().Index:
		return fmt.Errorf("the host end is not the attachment end's peer")
	case in.Attrs().HardwareAddr.String() != s.MAC.String():
		return fmt.Errorf("mac %s, want %s", in.Attrs().HardwareAddr, s.MAC)
	case in.Attrs().MTU != s.MTU || hostEnd.Attrs().MTU != s.MTU:
		return fmt.Errorf("mtu %d/%d, want %d", hostEnd.Attrs().MTU, in.Attrs().MTU, s.MTU)
	case in.Attrs().Flags&net.FlagUp == 0 || hostEnd.Attrs().Flags&net.FlagUp == 0:
		return fmt.Errorf("down")
	}
	family := netlink.FAMILY_V4
	if s.Addr.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	all, err := nh.AddrList(in, family)
	if err != nil {
		return fmt.Errorf("addresses: %w", err)
	}
	// A link-local address the workload added is its own business:
	// port security drops what it sends from one.
	addrs := slices.DeleteFunc(all, func(a netlink.Addr) bool { return a.IPNet != nil && a.IP.IsLinkLocalUnicast() })
	if len(addrs) != 1 || addrs[0].IPNet == nil || prefixOf(addrs[0].IPNet) != s.Addr {
		var have []string
		for _, a := range addrs {
			have = append(have, a.IPNet.String())
		}
		return fmt.Errorf("addresses %v, want %s", have, s.Addr)
	}
	return nil
}

func prefixOf(n *net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// create makes s's namespace and veth pair and configures both ends.
func (l *Links) create(host *netlink.Handle, s Spec) error {
	if old, err := host.LinkByName(s.Name); err == nil {
		if err := host.LinkDel(old); err != nil {
			return fmt.Errorf("delete the old %s: %w", s.Name, err)
		}
	}
	if err := createNetns(l.NetnsDir, s.Netns); err != nil {
		return err
	}
	path := l.netnsPath(s.Netns)
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", s.Netns, err)
	}
	defer target.Close()
	nh, err := netlink.NewHandleAt(target)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", s.Netns, err)
	}
	defer nh.Close()
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: s.Name, MTU: s.MTU},
		PeerName:         s.Name,
		PeerHardwareAddr: s.MAC,
		PeerNamespace:    netlink.NsFd(int(target)),
		PeerMTU:          uint32(s.MTU),
	}
	if err := host.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", s.Name, err)
	}
	hostEnd, err := host.LinkByName(s.Name)
	if err != nil {
		return fmt.Errorf("veth %s: %w", s.Name, err)
	}
	in, err := nh.LinkByName(s.Name)
	if err != nil {
		return fmt.Errorf("veth %s in %s: %w", s.Name, s.Netns, err)
	}
	if err := l.configure(nh, in, s); err != nil {
		return err
	}
	if err := host.LinkSetUp(hostEnd); err != nil {
		return fmt.Errorf("set %s up: %w", s.Name, err)
	}
	return nil
}

// configure sets up the namespace's end in of s's pair (through nh, a
// handle in its namespace): lo up, the sysctls, the address, the link up.
func (l *Links) configure(nh *netlink.Handle, in netlink.Link, s Spec) error {
	if lo, err := nh.LinkByName("lo"); err == nil {
		if err := nh.LinkSetUp(lo); err != nil {
			return fmt.Errorf("lo in %s: %w", s.Netns, err)
		}
	}
	// The sysctls first: an IPv6 address needs IPv6 on, and must not get
	// a link-local address beside it when the link goes up.
	if err := l.tune(s); err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: ipNet(s.Addr)}
	if s.Addr.Addr().Is6() {
		// No duplicate-address detection: the address is the IPAM
		// controller's to give, and usable at once (not tentative).
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := nh.AddrAdd(in, addr); err != nil {
		return fmt.Errorf("add %s to %s in %s: %w", s.Addr, s.Name, s.Netns, err)
	}
	if err := nh.LinkSetUp(in); err != nil {
		return fmt.Errorf("set %s up in %s: %w", s.Name, s.Netns, err)
	}
	return nil
}

// attachmentSysctls are the sysctls of an attachment's end in its
// namespace, by file under /proc/sys/net/ipv6/conf/<name>/, for an IPv4
// attachment (IPv6 off: router solicitations and the like would only be
// dropped by port security) and an IPv6 one (IPv6 on; no router
// advertisements taken; no link-local address, so that the interface has
// the one address port security lets it send from, and its neighbour
// solicitations come from it).
var attachmentSysctls = map[bool][][2]string{
	false: {{"disable_ipv6", "1"}},
	true:  {{"disable_ipv6", "0"}, {"accept_ra", "0"}, {"addr_gen_mode", "1"}},
}

// tune turns TX checksum offload off on both ends (with the userspace
// datapath, nothing would fill in the checksums a veth leaves to the
// hardware), keeps the host's IP stack off the host end (cni.HostEndSysctls,
// as the CNI plugin does for pods), and sets the attachment end's IPv6
// sysctls (attachmentSysctls).
func (l *Links) tune(s Spec) error {
	path := l.netnsPath(s.Netns)
	if err := cni.SetTxChecksum(l.HostNetns, s.Name, false); err != nil {
		return err
	}
	if err := cni.SetTxChecksum(path, s.Name, false); err != nil {
		return err
	}
	if err := l.inHost(func() error {
		for file, value := range cni.HostEndSysctls {
			if err := writeSysctl(filepath.Join(l.ProcSysNet, fmt.Sprintf(file, s.Name)), value); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("host end %s: %w", s.Name, err)
	}
	v6 := s.Addr.Addr().Is6()
	return nsrun.Do(path, func() error {
		for _, kv := range attachmentSysctls[v6] {
			err := writeSysctl(filepath.Join(l.ProcSysNet, "ipv6/conf", s.Name, kv[0]), kv[1])
			if errors.Is(err, os.ErrNotExist) && !v6 {
				return nil // no IPv6 in this kernel
			}
			if err != nil {
				return fmt.Errorf("%s in %s: ipv6 %s: %w", s.Name, s.Netns, kv[0], err)
			}
		}
		return nil
	})
}

// writeSysctl writes value unless the file holds it already.
func writeSysctl(path, value string) error {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == value {
		return nil
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl: %w", err)
	}
	return nil
}

// Remove removes an attachment's interface: the host end named name (its
// peer goes with it), every interface in the namespace netnsName (an
// older UID's) by their host ends, and the namespace. Either name may be
// "" (none). What is missing is not an error.
func (l *Links) Remove(name, netnsName string) error {
	host, err := l.hostHandle()
	if err != nil {
		return err
	}
	defer host.Close()
	names := []string{}
	if name != "" {
		names = append(names, name)
	}
	if netnsName != "" {
		if inner, err := l.interfacesIn(netnsName); err == nil {
			names = append(names, inner...)
		}
	}
	var errs []error
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		lk, err := host.LinkByName(n)
		if err != nil {
			if !notFound(err) {
				errs = append(errs, fmt.Errorf("look up %s: %w", n, err))
			}
			continue
		}
		if err := host.LinkDel(lk); err != nil && !notFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", n, err))
		}
	}
	if netnsName != "" {
		if err := deleteNetns(l.NetnsDir, netnsName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// interfacesIn returns the names of the interfaces in the namespace
// netnsName other than lo.
func (l *Links) interfacesIn(netnsName string) ([]string, error) {
	nh, err := nsHandle(l.netnsPath(netnsName))
	if err != nil {
		return nil, err
	}
	defer nh.Close()
	links, err := nh.LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, lk := range links {
		if n := lk.Attrs().Name; n != "lo" {
			out = append(out, n)
		}
	}
	return out, nil
}

// Namespaces returns the names of the namespaces in NetnsDir that are
// this agent's: named NetnsPrefix..., holding nothing but lo and
// interfaces named as InterfaceName names them, each the peer of one of
// hostEnds (the agent's host ends: another agent on this machine, as in
// the testbed where nodes are namespaces that share /run/netns, has its
// own), or none at all (a leftover of an interrupted making). Another
// namespace that happens to be named so is left alone.
func (l *Links) Namespaces(hostEnds []string) ([]string, error) {
	entries, err := os.ReadDir(l.NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns dir %s: %w", l.NetnsDir, err)
	}
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), NetnsPrefix) {
			continue
		}
		names, err := l.interfacesIn(e.Name())
		if err != nil {
			continue // not a namespace, or not ours to open
		}
		if !slices.ContainsFunc(names, func(n string) bool { return !isInterfaceName(n) || !slices.Contains(hostEnds, n) }) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// HostEnds returns the host's veths named as InterfaceName names them.
func (l *Links) HostEnds() ([]string, error) {
	host, err := l.hostHandle()
	if err != nil {
		return nil, err
	}
	defer host.Close()
	links, err := host.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []string
	for _, lk := range links {
		if lk.Type() == "veth" && isInterfaceName(lk.Attrs().Name) {
			out = append(out, lk.Attrs().Name)
		}
	}
	return out, nil
}
