package netstack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/host/cni"
)

// ServiceRouteMTU is the MTU of the host's route to the service network, as
// in the host-to-services design.
const ServiceRouteMTU = 1400

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func toAddr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// globalAddrs returns the global-scope addresses of link (no link-local).
func globalAddrs(link netlink.Link) ([]netlink.Addr, error) {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("hostnet: list addresses of %s: %w", link.Attrs().Name, err)
	}
	var out []netlink.Addr
	for _, a := range addrs {
		ip := toAddr(a.IP)
		if ip.IsLinkLocalUnicast() || ip.IsLoopback() || !ip.IsValid() {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// NodeIPs returns the node's addresses: the global addresses on bridge (or
// on uplink when they have not moved yet), at most one per family, skipping
// the masquerade subnets.
func NodeIPs(uplink, bridge string, masq conntrack.Plan) ([]netip.Prefix, error) {
	var out []netip.Prefix
	have := map[bool]bool{}
	for _, name := range []string{bridge, uplink} {
		link, err := netlink.LinkByName(name)
		if err != nil {
			continue
		}
		addrs, err := globalAddrs(link)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			ip := toAddr(a.IP)
			ones, _ := a.Mask.Size()
			if (masq.V4.Subnet.IsValid() && masq.V4.Subnet.Contains(ip)) || (masq.V6.Subnet.IsValid() && masq.V6.Subnet.Contains(ip)) {
				continue
			}
			if have[ip.Is6()] {
				continue
			}
			have[ip.Is6()] = true
			out = append(out, netip.PrefixFrom(ip, ones))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("hostnet: node IPs: no global address on %s or %s", bridge, uplink)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, nil
}

// configRoutes returns the routes through link that the kernel did not
// derive from an address: default and static routes of the main table.
func configRoutes(link netlink.Link) ([]netlink.Route, error) {
	var routes []netlink.Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := retryDump(func() ([]netlink.Route, error) { return netlink.RouteList(link, fam) })
		if err != nil {
			return nil, fmt.Errorf("hostnet: list routes of %s: %w", link.Attrs().Name, err)
		}
		for _, r := range rs {
			if r.Protocol == unix.RTPROT_KERNEL || (r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast()) || r.Dst != nil && r.Dst.IP.IsMulticast() {
				continue
			}
			if r.Table != 0 && r.Table != unix.RT_TABLE_MAIN {
				continue
			}
			routes = append(routes, r)
		}
	}
	return routes, nil
}

// L3Config is an interface's own layer-3 configuration: the global
// addresses and the routes through it that the kernel did not derive from
// them. What the agent keeps of the gateway bridge's is a NodeL3.
type L3Config struct {
	// Index is the interface's index when the copy was taken.
	Index int
	// MAC is its address: the flows that deliver to the host use it.
	MAC    net.HardwareAddr
	Addrs  []netlink.Addr
	Routes []netlink.Route
}

// ReadL3Config reads dev's L3Config.
func ReadL3Config(dev string) (L3Config, error) {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return L3Config{}, fmt.Errorf("hostnet: %s: %w", dev, err)
	}
	addrs, err := globalAddrs(link)
	if err != nil {
		return L3Config{}, err
	}
	routes, err := configRoutes(link)
	if err != nil {
		return L3Config{}, err
	}
	return L3Config{Index: link.Attrs().Index, MAC: slices.Clone(link.Attrs().HardwareAddr), Addrs: addrs, Routes: routes}, nil
}

// MoveUplinkConfig moves the global addresses of uplink, and the routes
// through it that the kernel did not derive from an address (default and
// static routes), to bridge, and sets bridge up. It returns what it moved,
// as it was on the uplink. It is idempotent: once the uplink holds no
// global address there is nothing left to move. Addresses are added to the
// bridge before they leave the uplink.
func MoveUplinkConfig(log logrus.FieldLogger, uplink, bridge string) (L3Config, error) {
	var moved L3Config
	ul, err := netlink.LinkByName(uplink)
	if err != nil {
		return moved, fmt.Errorf("hostnet: uplink %s: %w", uplink, err)
	}
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return moved, fmt.Errorf("hostnet: bridge port %s: %w", bridge, err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return moved, fmt.Errorf("hostnet: set %s up: %w", bridge, err)
	}
	addrs, err := globalAddrs(ul)
	if err != nil {
		return moved, err
	}
	if len(addrs) == 0 {
		return moved, nil
	}
	// Routes through the uplink that the kernel did not derive from an
	// address (default routes, static routes), to recreate on the bridge.
	routes, err := configRoutes(ul)
	if err != nil {
		return moved, err
	}
	moved = L3Config{Index: br.Attrs().Index, MAC: slices.Clone(br.Attrs().HardwareAddr), Addrs: addrs, Routes: routes}
	for _, a := range addrs {
		na := &netlink.Addr{IPNet: a.IPNet}
		if a.IP.To4() == nil {
			na.Flags = unix.IFA_F_NODAD
		} else if na.Broadcast = a.Broadcast; na.Broadcast == nil {
			na.Broadcast = net.IPv4zero // as on the uplink: none (netlink would make one up)
		}
		if err := netlink.AddrReplace(br, na); err != nil {
			return moved, fmt.Errorf("hostnet: add %s to %s: %w", a.IPNet, bridge, err)
		}
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(ul, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return moved, fmt.Errorf("hostnet: remove %s from %s: %w", a.IPNet, uplink, err)
		}
		log.WithFields(logrus.Fields{"address": a.IPNet.String(), "from": uplink, "to": bridge}).Info("moved node address")
	}
	for _, r := range routes {
		r.LinkIndex = br.Attrs().Index
		r.ILinkIndex = 0
		if err := netlink.RouteReplace(&r); err != nil {
			return moved, fmt.Errorf("hostnet: move route %s to %s: %w", r, bridge, err)
		}
		log.WithFields(logrus.Fields{"route": r.String(), "to": bridge}).Info("moved route")
	}
	return moved, nil
}

// HostPlan is the host side the agent keeps true.
type HostPlan struct {
	// Gateway and Mgmt name the gateway bridge's interface (breth0) and
	// the management port (mp0).
	Gateway, Mgmt string
	// NodeIPs are the node's addresses, one per family: the source of the
	// route to the router masquerade address.
	NodeIPs []netip.Addr
	// ServiceCIDRs are routed via the masquerade next hop.
	ServiceCIDRs []netip.Prefix
	// ClusterCIDRs are routed via the router address through mp0.
	ClusterCIDRs []netip.Prefix
	// PodCIDRs are this node's pod subnets; mp0 takes the second address
	// of each.
	PodCIDRs []netip.Prefix
	// Masquerade is the masquerade address plan.
	Masquerade conntrack.Plan
	// MgmtMAC is set on mp0; RouterMAC is the permanent neighbour entry
	// for the router address on mp0.
	MgmtMAC, RouterMAC net.HardwareAddr
	// MTU of mp0 and of the routes through it.
	MTU int
}

// The parts of the node's own configuration the agent keeps, as its
// repairs (package hostrepair) name them.
const (
	// RepairNodeAddress: the node's addresses on the gateway bridge (and
	// the bridge up); RepairNodeRoute: its routes there (NodeL3).
	RepairNodeAddress = "node-address"
	RepairNodeRoute   = "node-route"
	// The host side of the masquerade plan (EnsureHost): its addresses on
	// the gateway bridge, the permanent neighbours for the router and the
	// next hop, and the routes through them (the service networks', the
	// router's with the node IP as source).
	RepairMasqueradeAddress   = "masquerade-address"
	RepairMasqueradeNeighbour = "masquerade-neighbour"
	RepairMasqueradeRoute     = "masquerade-route"
	// The management port: its MAC, MTU, state, addresses, sysctls and
	// neighbours; and the routes to the cluster networks through it.
	RepairMgmtPort     = "mgmt-port"
	RepairClusterRoute = "cluster-route"
)

// HostParts are the parts EnsureHost keeps, in its order.
var HostParts = []string{RepairMasqueradeAddress, RepairMasqueradeNeighbour, RepairMasqueradeRoute, RepairMgmtPort, RepairClusterRoute}

// HostPart is what EnsureHost did to one part of the host side.
type HostPart struct {
	// What is one of HostParts.
	What string
	// Changes counts what it had to (re)install.
	Changes int
	// Err is why it could not install the rest.
	Err error
}

// HostReport is one EnsureHost, part by part (every part of HostParts,
// in that order).
type HostReport []HostPart

// Changes counts the changes of every part.
func (r HostReport) Changes() int {
	n := 0
	for _, p := range r {
		n += p.Changes
	}
	return n
}

// Err joins the parts' errors.
func (r HostReport) Err() error {
	var errs []error
	for _, p := range r {
		if p.Err != nil {
			errs = append(errs, p.Err)
		}
	}
	return errors.Join(errs...)
}

// add counts one step of part what.
func (r HostReport) add(what string, n int, err error) {
	for i := range r {
		if r[i].What == what {
			r[i].Changes += n
			r[i].Err = errors.Join(r[i].Err, err)
			return
		}
	}
	panic("hostnet: unknown host part " + what)
}

// to returns add for part what, to take a step's two results.
func (r HostReport) to(what string) func(int, error) {
	return func(n int, err error) { r.add(what, n, err) }
}

// EnsureHost makes the host side match p: on breth0 the masquerade host
// addresses (IPv6 nodad and deprecated), the service routes via the dummy
// next hop (mtu 1400), the route to the router masquerade address with the
// node IP as source, and permanent neighbours for the router masquerade
// address and the next hop; on mp0 its MAC, MTU and addresses, and the
// routes to the cluster networks. It changes only what differs, goes on
// past a failure (one address that cannot be added does not keep the
// routes of the other family away), and reports what it did part by part.
func EnsureHost(p HostPlan) HostReport {
	r := make(HostReport, len(HostParts))
	for i, w := range HostParts {
		r[i].What = w
	}
	gw, err := netlink.LinkByName(p.Gateway)
	if err != nil {
		err = fmt.Errorf("hostnet: host: %s: %w", p.Gateway, err)
		for _, w := range []string{RepairMasqueradeAddress, RepairMasqueradeNeighbour, RepairMasqueradeRoute} {
			r.add(w, 0, err)
		}
	} else {
		ensureMasquerade(p, gw, r)
	}
	mp, err := netlink.LinkByName(p.Mgmt)
	if err != nil {
		err = fmt.Errorf("hostnet: host: %s: %w", p.Mgmt, err)
		r.add(RepairMgmtPort, 0, err)
		r.add(RepairClusterRoute, 0, err)
	} else {
		ensureMgmt(p, mp, r)
	}
	return r
}

// ensureMasquerade is EnsureHost's part on the gateway bridge gw.
func ensureMasquerade(p HostPlan, gw netlink.Link, r HostReport) {
	for _, m := range []conntrack.Masquerade{p.Masquerade.V4, p.Masquerade.V6} {
		if !m.Subnet.IsValid() {
			continue
		}
		var nodeIP netip.Addr
		for _, ip := range p.NodeIPs {
			if ip.Is6() == m.Is6() {
				nodeIP = ip
			}
		}
		if !nodeIP.IsValid() {
			continue
		}
		addr := &netlink.Addr{IPNet: ipNet(m.HostPrefix())}
		if m.Is6() {
			addr.Flags = unix.IFA_F_NODAD
			addr.PreferedLft = 0
			addr.ValidLft = 0xffffffff
		}
		r.to(RepairMasqueradeAddress)(ensureAddr(gw, addr, m.Is6()))
		for _, ip := range []netip.Addr{m.Router, m.NextHop} {
			r.to(RepairMasqueradeNeighbour)(ensureNeigh(gw, ip, conntrack.MAC(ip), false))
		}
		for _, svc := range p.ServiceCIDRs {
			if svc.Addr().Is6() != m.Is6() {
				continue
			}
			r.to(RepairMasqueradeRoute)(ensureRoute(&netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipNet(svc), Gw: m.NextHop.AsSlice(), MTU: ServiceRouteMTU}))
		}
		r.to(RepairMasqueradeRoute)(ensureRoute(&netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipNet(hostPrefix(m.Router)), Src: nodeIP.AsSlice(),
			Scope: netlink.SCOPE_LINK, MTU: ServiceRouteMTU}))
	}
}

// ensureMgmt is EnsureHost's part on the management port mp.
func ensureMgmt(p HostPlan, mp netlink.Link, r HostReport) {
	if len(p.MgmtMAC) == 6 && mp.Attrs().HardwareAddr.String() != p.MgmtMAC.String() {
		if err := netlink.LinkSetHardwareAddr(mp, p.MgmtMAC); err != nil {
			r.add(RepairMgmtPort, 0, fmt.Errorf("hostnet: host: set %s mac: %w", p.Mgmt, err))
		} else {
			r.add(RepairMgmtPort, 1, nil)
		}
	}
	if p.MTU > 0 && mp.Attrs().MTU != p.MTU {
		if err := netlink.LinkSetMTU(mp, p.MTU); err != nil {
			r.add(RepairMgmtPort, 0, fmt.Errorf("hostnet: host: set %s mtu: %w", p.Mgmt, err))
		} else {
			r.add(RepairMgmtPort, 1, nil)
		}
	}
	if mp.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(mp); err != nil {
			r.add(RepairMgmtPort, 0, fmt.Errorf("hostnet: host: set %s up: %w", p.Mgmt, err))
		} else {
			r.add(RepairMgmtPort, 1, nil)
		}
	}
	for _, pc := range p.PodCIDRs {
		addr := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(plan.MgmtIP(pc), pc.Bits()))}
		if pc.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		r.to(RepairMgmtPort)(ensureAddr(mp, addr, false))
		router := plan.RouterIP(pc)
		if pc.Addr().Is6() {
			// br0 answers the pods' neighbour solicitations for the
			// router; the host answers those that reach it (proxy NDP), as
			// it did before br0 did, and knows the router's MAC itself. It
			// answers at once: by default Linux delays a proxied answer to
			// a multicast solicitation by up to 0.8 s (proxy_delay), which
			// a new pod's first reply through the router would wait for.
			for _, sc := range []struct{ path, value string }{
				{filepath.Join("ipv6/conf", p.Mgmt, "proxy_ndp"), "1"},
				{filepath.Join("ipv6/neigh", p.Mgmt, "proxy_delay"), "0"},
			} {
				n, err := ensureSysctl(sc.path, sc.value)
				if err != nil {
					err = fmt.Errorf("hostnet: host: %w", err)
				}
				r.add(RepairMgmtPort, n, err)
			}
			r.to(RepairMgmtPort)(ensureNeigh(mp, router, nil, true))
		}
		r.to(RepairMgmtPort)(ensureNeigh(mp, router, p.RouterMAC, false))
		for _, cc := range p.ClusterCIDRs {
			if cc.Addr().Is6() != pc.Addr().Is6() || cc == pc {
				continue
			}
			r.to(RepairClusterRoute)(ensureRoute(&netlink.Route{LinkIndex: mp.Attrs().Index, Dst: ipNet(cc), Gw: router.AsSlice(), MTU: p.MTU}))
		}
	}
}

// ensureSysctl sets the setting at path under ProcSysNet to value unless it
// has it, and returns 1 when it changed it.
func ensureSysctl(path, value string) (int, error) {
	full := filepath.Join(ProcSysNet, path)
	if have, err := os.ReadFile(full); err == nil && strings.TrimSpace(string(have)) == value {
		return 0, nil
	}
	if err := os.WriteFile(full, []byte(value), 0o644); err != nil {
		return 0, fmt.Errorf("set %s: %w", path, err)
	}
	return 1, nil
}

func ensureAddr(link netlink.Link, want *netlink.Addr, deprecated bool) (int, error) {
	have, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return 0, fmt.Errorf("hostnet: host: list addresses of %s: %w", link.Attrs().Name, err)
	}
	for _, a := range have {
		if a.IPNet.String() == want.IPNet.String() && (!deprecated || a.PreferedLft == 0) {
			return 0, nil
		}
	}
	if err := netlink.AddrReplace(link, want); err != nil {
		return 0, fmt.Errorf("hostnet: host: add %s to %s: %w", want.IPNet, link.Attrs().Name, err)
	}
	return 1, nil
}

func ensureNeigh(link netlink.Link, ip netip.Addr, mac net.HardwareAddr, proxy bool) (int, error) {
	n := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: family(ip), State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
	if proxy {
		n.Flags = netlink.NTF_PROXY
		n.State = 0
	}
	have, err := retryDump(func() ([]netlink.Neigh, error) { return netlink.NeighList(link.Attrs().Index, family(ip)) })
	if err != nil {
		return 0, fmt.Errorf("hostnet: host: list neighbours of %s: %w", link.Attrs().Name, err)
	}
	if proxy {
		have, err = retryDump(func() ([]netlink.Neigh, error) { return netlink.NeighProxyList(link.Attrs().Index, family(ip)) })
		if err != nil {
			return 0, fmt.Errorf("hostnet: host: list proxy neighbours of %s: %w", link.Attrs().Name, err)
		}
	}
	for _, h := range have {
		if toAddr(h.IP) == ip && (proxy || (h.State&netlink.NUD_PERMANENT != 0 && h.HardwareAddr.String() == mac.String())) {
			return 0, nil
		}
	}
	if err := netlink.NeighSet(n); err != nil {
		return 0, fmt.Errorf("hostnet: host: neighbour %s on %s: %w", ip, link.Attrs().Name, err)
	}
	return 1, nil
}

func ensureRoute(want *netlink.Route) (int, error) {
	fam := netlink.FAMILY_V4
	if want.Dst.IP.To4() == nil {
		fam = netlink.FAMILY_V6
	}
	have, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(fam, &netlink.Route{Dst: want.Dst, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return 0, fmt.Errorf("hostnet: host: list routes to %s: %w", want.Dst, err)
	}
	for _, r := range have {
		if r.LinkIndex == want.LinkIndex && r.Gw.Equal(want.Gw) && (want.Src == nil || r.Src.Equal(want.Src)) &&
			(want.MTU == 0 || r.MTU == want.MTU) {
			return 0, nil
		}
	}
	if err := netlink.RouteReplace(want); err != nil {
		return 0, fmt.Errorf("hostnet: host: route %s: %w", want, err)
	}
	return 1, nil
}

// QuietUplink stops the kernel's own IP stack from answering on the
// uplink once its addresses have moved to breth0. With the userspace
// datapath the kernel still receives the uplink's frames: it must neither
// answer ARP for the node IP with the uplink's MAC (arp_ignore=1: only for
// addresses on the receiving interface) nor take part in IPv6 there.
func QuietUplink(uplink string) error {
	for name, value := range QuietSysctls {
		path := UplinkSysctlPath(uplink, name)
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == value {
			continue
		}
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("hostnet: uplink %s: %s: %w", uplink, path, err)
		}
	}
	return nil
}

// ProcSysNet is where the agent sees the host's /proc/sys/net (its
// --proc-sys-net): a container without privileges has /proc/sys read-only
// and mounts the host's /proc/sys/net elsewhere, writable. What the files
// show follows the network namespace of whoever reads them, so the mount
// shows the node's own sysctls to an agent on the host's network.
var ProcSysNet = "/proc/sys/net"

// QuietSysctls are the uplink's sysctls QuietUplink sets, by name, with
// the values it sets.
var QuietSysctls = map[string]string{"arp_ignore": "1", "arp_announce": "2", "disable_ipv6": "1"}

// UplinkSysctlPath is the file under /proc/sys of the uplink's sysctl name
// (one of QuietSysctls).
func UplinkSysctlPath(uplink, name string) string {
	family := "ipv4"
	if name == "disable_ipv6" {
		family = "ipv6"
	}
	return filepath.Join(ProcSysNet, family, "conf", uplink, name)
}

// UplinkStateFile is the file, in the CNI data directory, where the agent
// records the uplink's sysctls and its TX checksum offload before it first
// changes them, so that `nodeflow cleanup` can put them back.
const UplinkStateFile = "nodeflow-uplink-sysctls.json"

// UplinkStatePath is UplinkStateFile in the CNI data directory dataDir; ""
// when dataDir is "".
func UplinkStatePath(dataDir string) string { return dataDirFile(dataDir, UplinkStateFile) }

// UplinkState is the content of UplinkStateFile.
type UplinkState struct {
	// Uplink names the interface.
	Uplink string `json:"uplink"`
	// Sysctls holds the values of QuietSysctls' names before nodeflow
	// changed them.
	Sysctls map[string]string `json:"sysctls"`
	// TxChecksum is whether the uplink's TX checksum offload was on before
	// nodeflow turned it off (the userspace datapath needs it off); nil
	// when it could not be read, or in a record of an agent from before
	// it was recorded: then its original value is unknown.
	TxChecksum *bool `json:"txChecksum,omitempty"`
	// Recorded is when the agent recorded them.
	Recorded time.Time `json:"recorded"`
}

// RecordUplinkSysctls records the uplink's current values of QuietSysctls
// and its TX checksum offload in the file at path, and reports whether it
// wrote it. The agent calls it before it first changes any of them. It
// writes nothing when path is "", when the file exists (a restarted agent
// would record nodeflow's own values), or when every value already is
// nodeflow's: each sysctl the one QuietUplink sets, and the TX checksum
// offload off or unreadable (an agent from before the file existed changed
// them: the original values are not known). An offload that is on is not
// nodeflow's doing, so the values are recorded then even when the sysctls
// hold nodeflow's: they are somebody else's too. An offload that cannot be
// read is logged on log and left out of the record (TxChecksum nil): the
// sysctls are recorded all the same.
func RecordUplinkSysctls(log logrus.FieldLogger, path, uplink string) (bool, error) {
	if path == "" {
		return false, nil
	}
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("hostnet: uplink state %s: %w", path, err)
	}
	st := UplinkState{Uplink: uplink, Sysctls: map[string]string{}, Recorded: time.Now().UTC()}
	quiet := true
	for name, value := range QuietSysctls {
		b, err := os.ReadFile(UplinkSysctlPath(uplink, name))
		if err != nil {
			return false, fmt.Errorf("hostnet: uplink %s: %w", uplink, err)
		}
		st.Sysctls[name] = strings.TrimSpace(string(b))
		quiet = quiet && st.Sysctls[name] == value
	}
	on, txErr := cni.TxChecksum("", uplink)
	if txErr == nil {
		st.TxChecksum = &on
		quiet = quiet && !on
	}
	if quiet {
		return false, nil
	}
	if txErr != nil {
		log.WithError(txErr).WithField("interface", uplink).Warn("cannot read the uplink's TX checksum offload: not recorded; nodeflow cleanup will leave it as it finds it")
	}
	if err := writeRecord("uplink state", path, st); err != nil {
		return false, err
	}
	return true, nil
}
