package cni

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"nodeflow/host/nsrun"
)

// HostVethName is the name of the host end of an attachment's veth, and of
// its OVS port: "nf" and 13 hex digits of SHA-256(containerID "/" ifName).
// It fits IFNAMSIZ and is the same in every invocation, so DEL finds the
// interface without any saved state.
func HostVethName(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "/" + ifName))
	return "nf" + hex.EncodeToString(sum[:])[:13]
}

// MACFromIP derives a pod's MAC address from its address: 0a:58 followed by
// the four bytes of the IPv4 address, or the last four bytes of an IPv6
// address. 0x0a is a locally administered unicast first octet, so the MAC
// cannot clash with a vendor's.
func MACFromIP(a netip.Addr) net.HardwareAddr {
	b := a.AsSlice()
	return net.HardwareAddr{0x0a, 0x58, b[len(b)-4], b[len(b)-3], b[len(b)-2], b[len(b)-1]}
}

// socketIn opens a datagram socket in the network namespace at path (the
// current one when path is ""); ethtool ioctls on it address that namespace's
// interfaces.
func socketIn(path string) (int, error) {
	fd := -1
	open := func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	}
	var err error
	if path == "" {
		err = open()
	} else {
		err = nsrun.Do(path, open)
	}
	return fd, err
}

// ethtool commands (linux/ethtool.h).
const (
	ethtoolGTXCSUM = 0x16 // get TX checksum offload
	ethtoolSTXCSUM = 0x17 // set TX checksum offload
)

// ethtoolValue is struct ethtool_value:
//
//	4 bytes: cmd
//	4 bytes: data
type ethtoolValue struct {
	cmd, data uint32
}

// ifreqData is struct ifreq with the ifr_data member of its union:
//
//	16 bytes: ifr_name, NUL-padded
//	 8 bytes: ifr_data (pointer)
//	16 bytes: rest of the union
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

func ethtoolIoctl(fd int, ifName string, v *ethtoolValue) error {
	var req ifreqData
	if len(ifName) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q too long", ifName)
	}
	copy(req.name[:], ifName)
	req.data = uintptr(unsafe.Pointer(v))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	runtime.KeepAlive(v)
	if errno != 0 {
		return errno
	}
	return nil
}

// SetTxChecksum turns TX checksum offload of ifName, in the network namespace
// at netnsPath ("" for the current one), on or off, like `ethtool -K IF tx off`.
func SetTxChecksum(netnsPath, ifName string, on bool) error {
	fd, err := socketIn(netnsPath)
	if err != nil {
		return fmt.Errorf("cni: ethtool %s: %w", ifName, err)
	}
	defer unix.Close(fd)
	v := &ethtoolValue{cmd: ethtoolSTXCSUM}
	if on {
		v.data = 1
	}
	if err := ethtoolIoctl(fd, ifName, v); err != nil {
		return fmt.Errorf("cni: ethtool %s: set tx checksum: %w", ifName, err)
	}
	return nil
}

// TxChecksum reports whether TX checksum offload of ifName is on.
func TxChecksum(netnsPath, ifName string) (bool, error) {
	fd, err := socketIn(netnsPath)
	if err != nil {
		return false, fmt.Errorf("cni: ethtool %s: %w", ifName, err)
	}
	defer unix.Close(fd)
	v := &ethtoolValue{cmd: ethtoolGTXCSUM}
	if err := ethtoolIoctl(fd, ifName, v); err != nil {
		return false, fmt.Errorf("cni: ethtool %s: get tx checksum: %w", ifName, err)
	}
	return v.data != 0, nil
}

// podLink is what setupVeth configures inside the pod.
type podLink struct {
	netns   string // path of the pod's network namespace
	ifName  string
	mtu     int
	mac     net.HardwareAddr
	addrs   []netip.Prefix // pod addresses with the subnet's prefix length
	gateway []netip.Addr   // one per address, same order
}

// retryDump repeats a netlink dump that the kernel interrupted.
func retryDump[T any](f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 5 {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

// setupVeth creates the veth pair hostName <-> pl.ifName (in the pod), and
// configures the pod end. It returns the host end's and the pod end's link.
// An existing host end of the same name (a retried ADD) is replaced.
func setupVeth(hostName string, pl podLink) (host, pod netlink.Link, err error) {
	if old, err := netlink.LinkByName(hostName); err == nil {
		_ = netlink.LinkDel(old)
	}
	target, err := netns.GetFromPath(pl.netns)
	if err != nil {
		return nil, nil, fmt.Errorf("open netns %s: %w", pl.netns, err)
	}
	defer target.Close()
	ph, err := netlink.NewHandleAt(target)
	if err != nil {
		return nil, nil, fmt.Errorf("netlink in %s: %w", pl.netns, err)
	}
	defer ph.Close()
	if _, err := ph.LinkByName(pl.ifName); err == nil {
		return nil, nil, fmt.Errorf("interface %s already exists in %s", pl.ifName, pl.netns)
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: hostName, MTU: pl.mtu},
		PeerName:         pl.ifName,
		PeerHardwareAddr: pl.mac,
		PeerNamespace:    netlink.NsFd(int(target)),
		PeerMTU:          uint32(pl.mtu),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, nil, fmt.Errorf("create veth %s: %w", hostName, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = netlink.LinkDel(veth)
		}
	}()
	host, err = netlink.LinkByName(hostName)
	if err != nil {
		return nil, nil, fmt.Errorf("veth %s: %w", hostName, err)
	}
	pod, err = ph.LinkByName(pl.ifName)
	if err != nil {
		return nil, nil, fmt.Errorf("veth peer %s in %s: %w", pl.ifName, pl.netns, err)
	}
	if err := SetTxChecksum("", hostName, false); err != nil {
		return nil, nil, err
	}
	if err := quietHostEnd(hostName); err != nil {
		return nil, nil, err
	}
	if err := SetTxChecksum(pl.netns, pl.ifName, false); err != nil {
		return nil, nil, err
	}
	if lo, err := ph.LinkByName("lo"); err == nil {
		_ = ph.LinkSetUp(lo)
	}
	for _, a := range pl.addrs {
		addr := &netlink.Addr{IPNet: prefixToIPNet(a)}
		if a.Addr().Is6() {
			// The address is ours by allocation; duplicate address
			// detection would only delay the pod by a second or two.
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := ph.AddrAdd(pod, addr); err != nil {
			return nil, nil, fmt.Errorf("add %s to %s: %w", a, pl.ifName, err)
		}
	}
	if err := ph.LinkSetUp(pod); err != nil {
		return nil, nil, fmt.Errorf("set %s up: %w", pl.ifName, err)
	}
	for _, gw := range pl.gateway {
		dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if gw.Is6() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		r := &netlink.Route{LinkIndex: pod.Attrs().Index, Dst: prefixToIPNet(dst), Gw: gw.AsSlice()}
		if err := ph.RouteAdd(r); err != nil {
			return nil, nil, fmt.Errorf("add default route via %s on %s: %w", gw, pl.ifName, err)
		}
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return nil, nil, fmt.Errorf("set %s up: %w", hostName, err)
	}
	ok = true
	return host, pod, nil
}

// HostEndSysctls are the sysctls of a veth's host end that quietHostEnd
// sets, by file under /proc/sys/net, with their values.
var HostEndSysctls = map[string]string{"ipv4/conf/%s/arp_ignore": "8", "ipv6/conf/%s/disable_ipv6": "1"}

// quietHostEnd keeps the kernel's own IP stack off the host end of a
// pod's veth. With the userspace datapath the kernel still receives that
// end's frames beside OVS: if it answered ARP there for one of the node's
// addresses (the kernel answers for any of them on any interface by
// default), a pod would send the node's traffic to the veth's MAC, and the
// kernel and OVS would each deliver every such packet (a UDP reply from a
// pod to its own node arrived twice). arp_ignore=8 answers nothing; the
// end takes no part in IPv6 either.
func quietHostEnd(name string) error {
	for file, value := range HostEndSysctls {
		path := filepath.Join("/proc/sys/net", fmt.Sprintf(file, name))
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("cni: veth %s: %w", name, err)
		}
	}
	return nil
}

// deleteVeth removes the host end (and with it the pod end). A missing link
// is not an error.
func deleteVeth(hostName string) error {
	l, err := netlink.LinkByName(hostName)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("look up %s: %w", hostName, err)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("delete %s: %w", hostName, err)
	}
	return nil
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
