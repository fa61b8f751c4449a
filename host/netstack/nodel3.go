package netstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/datapath/conntrack"
)

// The node's own addresses and routes on the gateway bridge.
//
// The agent moves the uplink's global addresses, and the routes through it
// that the kernel did not derive from them, to the gateway bridge
// (MoveUplinkConfig). What it moved is what it keeps: a NodeL3, recorded
// in NodeL3File so that a restarted agent keeps the same, and put back
// whenever somebody deletes part of it. What it keeps is decided by
// NextNodeL3; what of it is missing by NodeL3.Missing; both are pure.
//
// The agent puts back what was deleted and leaves what was changed or
// added: an address counts as there when the bridge holds its IP with any
// prefix length, a route when its table holds a route to the same
// destination with the same metric, through any gateway or interface.
// Those are the operator's changes.

// NodeL3File is the file, in the CNI data directory, where the agent
// records the node's addresses and routes it keeps on the gateway bridge.
const NodeL3File = "nodeflow-node-addresses.json"

// NodeL3Path is NodeL3File in the CNI data directory dataDir; "" when
// dataDir is "".
func NodeL3Path(dataDir string) string { return dataDirFile(dataDir, NodeL3File) }

// NodeL3 is the node's own layer-3 configuration that the agent keeps on
// the gateway bridge: the addresses and routes it moved there from the
// uplink. It is the content of NodeL3File.
type NodeL3 struct {
	// Uplink and Bridge name the interfaces it was moved between.
	Uplink string `json:"uplink"`
	Bridge string `json:"bridge"`
	// Addrs are the node's addresses, in the order the uplink listed them
	// (its primary address of each family first).
	Addrs []KeptAddr `json:"addresses"`
	// Routes are the routes through the bridge that the kernel does not
	// derive from an address: default and static routes.
	Routes []KeptRoute `json:"routes,omitempty"`
	// Recorded is when the record was written.
	Recorded time.Time `json:"recorded"`
}

// KeptAddr is one kept address.
type KeptAddr struct {
	// Prefix is the address with its prefix length.
	Prefix netip.Prefix `json:"prefix"`
	// Broadcast is an IPv4 address's broadcast address; none when not
	// valid.
	Broadcast netip.Addr `json:"broadcast,omitzero"`
}

// KeptRoute is one kept route.
type KeptRoute struct {
	// Dst is its destination; 0.0.0.0/0 or ::/0 for a default route.
	Dst netip.Prefix `json:"dst"`
	// Gw is its gateway; none for a route to a directly attached network.
	Gw netip.Addr `json:"gw,omitzero"`
	// Src is its preferred source address, if it has one.
	Src netip.Addr `json:"src,omitzero"`
	// Metric is its priority (the kernel's IPv6 default is 1024).
	Metric int `json:"metric,omitempty"`
	// Table is its routing table; 0 is the main table.
	Table int `json:"table,omitempty"`
	// Protocol, Scope and Type are the kernel's rtm_protocol, rtm_scope
	// and rtm_type.
	Protocol int `json:"protocol,omitempty"`
	Scope    int `json:"scope,omitempty"`
	Type     int `json:"type,omitempty"`
	// MTU is its MTU metric; 0 for none.
	MTU int `json:"mtu,omitempty"`
	// OnLink is set for a gateway the kernel is told is on the link.
	OnLink bool `json:"onlink,omitempty"`
}

// routeKey identifies a route in the kernel: its family, table,
// destination and metric.
type routeKey struct {
	table  int
	dst    netip.Prefix
	metric int
}

func mainTable(t int) int {
	if t == 0 {
		return unix.RT_TABLE_MAIN
	}
	return t
}

func (r KeptRoute) key() routeKey {
	return routeKey{table: mainTable(r.Table), dst: r.Dst, metric: r.Metric}
}

// String reads like ip route: "default via 172.30.0.1 metric 0".
func (r KeptRoute) String() string {
	s := r.Dst.String()
	if r.Dst.Bits() == 0 {
		s = "default"
	}
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	if r.Src.IsValid() {
		s += " src " + r.Src.String()
	}
	s += fmt.Sprintf(" metric %d", r.Metric)
	if t := mainTable(r.Table); t != unix.RT_TABLE_MAIN {
		s += fmt.Sprintf(" table %d", t)
	}
	return s
}

func routeDst(r netlink.Route) (netip.Prefix, bool) {
	if r.Dst != nil {
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			return netip.Prefix{}, false
		}
		ones, _ := r.Dst.Mask.Size()
		return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
	}
	switch {
	case r.Family == netlink.FAMILY_V6, r.Gw != nil && r.Gw.To4() == nil:
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0), true
	case r.Family == netlink.FAMILY_V4, r.Gw != nil:
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0), true
	}
	return netip.Prefix{}, false
}

// keptRoute is r as the agent keeps it; false for what it cannot keep
// (multipath routes, encapsulations, MPLS).
func keptRoute(r netlink.Route) (KeptRoute, bool) {
	dst, ok := routeDst(r)
	if !ok || len(r.MultiPath) > 0 || r.Encap != nil || r.MPLSDst != nil || r.NewDst != nil || r.Via != nil {
		return KeptRoute{}, false
	}
	k := KeptRoute{Dst: dst, Metric: r.Priority, Table: r.Table, Protocol: int(r.Protocol), Scope: int(r.Scope), Type: r.Type,
		MTU: r.MTU, OnLink: r.Flags&int(netlink.FLAG_ONLINK) != 0}
	if k.Table == unix.RT_TABLE_MAIN {
		k.Table = 0
	}
	if k.Type == unix.RTN_UNICAST {
		k.Type = 0
	}
	if gw := toAddr(r.Gw); gw.IsValid() {
		k.Gw = gw
	}
	if src := toAddr(r.Src); src.IsValid() {
		k.Src = src
	}
	return k, true
}

// route is r as netlink adds it on the interface with index link.
func (r KeptRoute) route(link int) *netlink.Route {
	nr := &netlink.Route{LinkIndex: link, Priority: r.Metric, Table: r.Table, Protocol: netlink.RouteProtocol(r.Protocol),
		Scope: netlink.Scope(r.Scope), Type: r.Type, MTU: r.MTU, Family: family(r.Dst.Addr())}
	if r.Dst.Bits() > 0 {
		nr.Dst = ipNet(r.Dst)
	}
	if r.Gw.IsValid() {
		nr.Gw = r.Gw.AsSlice()
	}
	if r.Src.IsValid() {
		nr.Src = r.Src.AsSlice()
	}
	if r.OnLink {
		nr.Flags = int(netlink.FLAG_ONLINK)
	}
	return nr
}

// keptAddr is a as the agent keeps it.
func keptAddr(a netlink.Addr) KeptAddr {
	ip := toAddr(a.IP)
	ones, _ := a.Mask.Size()
	k := KeptAddr{Prefix: netip.PrefixFrom(ip, ones)}
	if b := toAddr(a.Broadcast); ip.Is4() && b.IsValid() && !b.IsUnspecified() {
		k.Broadcast = b
	}
	return k
}

// addr is a as netlink adds it: IPv6 without duplicate address detection
// (the address was in use a moment ago), IPv4 with the broadcast address
// it had (none when it had none: netlink would make one up).
func (a KeptAddr) addr() *netlink.Addr {
	na := &netlink.Addr{IPNet: ipNet(a.Prefix)}
	switch {
	case a.Prefix.Addr().Is6():
		na.Flags = unix.IFA_F_NODAD
	case a.Broadcast.IsValid():
		na.Broadcast = a.Broadcast.AsSlice()
	default:
		na.Broadcast = net.IPv4zero
	}
	return na
}

// inMasquerade reports whether ip is in one of masq's subnets.
func inMasquerade(masq conntrack.Plan, ip netip.Addr) bool {
	for _, s := range []netip.Prefix{masq.V4.Subnet, masq.V6.Subnet} {
		if s.IsValid() && s.Contains(ip) {
			return true
		}
	}
	return false
}

// NodeL3Of returns c as the agent keeps it, less the masquerade addresses
// and the agent's own routes (to a masquerade subnet, or via a masquerade
// next hop: the service networks'), which the host side keeps, and less
// the routes it cannot keep. c's routes are those ReadL3Config reads.
func NodeL3Of(c L3Config, masq conntrack.Plan) NodeL3 {
	var k NodeL3
	for _, a := range c.Addrs {
		ka := keptAddr(a)
		if !ka.Prefix.IsValid() || inMasquerade(masq, ka.Prefix.Addr()) {
			continue
		}
		k.Addrs = append(k.Addrs, ka)
	}
	for _, r := range c.Routes {
		kr, ok := keptRoute(r)
		if !ok || inMasquerade(masq, kr.Gw) || (kr.Dst.Bits() > 0 && inMasquerade(masq, kr.Dst.Addr())) {
			continue
		}
		k.Routes = append(k.Routes, kr)
	}
	return k
}

// Family returns the part of k of one family.
func (k NodeL3) Family(v6 bool) NodeL3 {
	out := NodeL3{Uplink: k.Uplink, Bridge: k.Bridge, Recorded: k.Recorded}
	for _, a := range k.Addrs {
		if a.Prefix.Addr().Is6() == v6 {
			out.Addrs = append(out.Addrs, a)
		}
	}
	for _, r := range k.Routes {
		if r.Dst.Addr().Is6() == v6 {
			out.Routes = append(out.Routes, r)
		}
	}
	return out
}

// Empty reports whether k keeps nothing.
func (k NodeL3) Empty() bool { return len(k.Addrs) == 0 && len(k.Routes) == 0 }

// Equal reports whether k and o keep the same, whatever their interfaces
// and time.
func (k NodeL3) Equal(o NodeL3) bool {
	return slices.Equal(k.Addrs, o.Addrs) && slices.Equal(k.Routes, o.Routes)
}

// hasIP reports whether k keeps an address with ip.
func (k NodeL3) hasIP(ip netip.Addr) bool {
	return slices.ContainsFunc(k.Addrs, func(a KeptAddr) bool { return a.Prefix.Addr() == ip })
}

// IPs returns the node IPs: the first address of each family, IPv4 first.
func (k NodeL3) IPs() []netip.Prefix {
	var out []netip.Prefix
	for _, v6 := range []bool{false, true} {
		if f := k.Family(v6); len(f.Addrs) > 0 {
			out = append(out, f.Addrs[0].Prefix)
		}
	}
	return out
}

// NextNodeL3 decides what the agent keeps from its start on. rec is its
// record (nil when there is none), found what the bridge held before the
// move (NodeL3Of its L3Config), moved what it has just moved from the
// uplink. It is pure.
//
// Without a record, the agent adopts what the bridge holds (an agent from
// before the record, or a record lost): it keeps what is there. A restart
// never forgets: what the record keeps and somebody deleted while no agent
// ran is put back. And the uplink is where the node's configuration is
// stated: addresses found there in one family that the agent does not keep
// yet (the node booted, or its network configuration was applied again,
// with a new address) replace what it kept of that family, and the routes
// found there, if any, the family's routes. Otherwise what was moved is
// added to what is kept (the rest of a move that an earlier agent did not
// finish).
func NextNodeL3(rec *NodeL3, found, moved NodeL3) NodeL3 {
	base := found
	if rec != nil {
		base = *rec
	}
	out := NodeL3{Uplink: moved.Uplink, Bridge: moved.Bridge}
	if out.Uplink == "" {
		out.Uplink, out.Bridge = base.Uplink, base.Bridge
	}
	for _, v6 := range []bool{false, true} {
		b, m := base.Family(v6), moved.Family(v6)
		replaced := slices.ContainsFunc(m.Addrs, func(a KeptAddr) bool { return !b.hasIP(a.Prefix.Addr()) })
		switch {
		case replaced:
			out.Addrs = append(out.Addrs, m.Addrs...)
		default:
			out.Addrs = append(out.Addrs, b.Addrs...)
			for _, a := range m.Addrs {
				if !slices.ContainsFunc(out.Addrs, func(o KeptAddr) bool { return o.Prefix.Addr() == a.Prefix.Addr() }) {
					out.Addrs = append(out.Addrs, a)
				}
			}
		}
		routes := b.Routes
		if replaced && len(m.Routes) > 0 {
			routes = nil
		}
		// A moved route replaces a kept one with its key, as it replaced
		// it in the kernel.
		for _, r := range routes {
			if !slices.ContainsFunc(m.Routes, func(o KeptRoute) bool { return o.key() == r.key() }) {
				out.Routes = append(out.Routes, r)
			}
		}
		out.Routes = append(out.Routes, m.Routes...)
	}
	return out
}

// L3State is what the gateway bridge holds now, as far as a NodeL3 is
// concerned.
type L3State struct {
	// Up is whether the bridge's interface is administratively up.
	Up bool
	// Addrs are the IPs on the bridge.
	Addrs []netip.Addr
	// Routes are the keys of the routes of the main table, on any
	// interface (and of the other tables the kept routes name).
	Routes []routeKey
}

// L3Repair is what a check found missing.
type L3Repair struct {
	// Down is set when the bridge's interface is down.
	Down   bool
	Addrs  []KeptAddr
	Routes []KeptRoute
}

// Empty reports whether nothing is missing.
func (r L3Repair) Empty() bool { return !r.Down && len(r.Addrs) == 0 && len(r.Routes) == 0 }

// Missing returns what of k st lacks: the bridge down, addresses whose IP
// it does not hold (with whatever prefix length), routes whose table holds
// none to the same destination with the same metric. It is pure.
func (k NodeL3) Missing(st L3State) L3Repair {
	var r L3Repair
	r.Down = !st.Up
	for _, a := range k.Addrs {
		if !slices.Contains(st.Addrs, a.Prefix.Addr()) {
			r.Addrs = append(r.Addrs, a)
		}
	}
	for _, kr := range k.Routes {
		if !slices.Contains(st.Routes, kr.key()) {
			r.Routes = append(r.Routes, kr)
		}
	}
	return r
}

// dumpAttempts bounds the retries of a netlink dump that changes (the
// kernel says it was interrupted) while it is read.
const dumpAttempts = 5

func retryDump[T any](f func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpAttempts {
		if v, err = f(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

// ReadL3State reads what bridge holds of k's kind.
func ReadL3State(bridge string, k NodeL3) (L3State, error) {
	link, err := netlink.LinkByName(bridge)
	if err != nil {
		return L3State{}, fmt.Errorf("hostnet: %s: %w", bridge, err)
	}
	st := L3State{Up: link.Attrs().Flags&net.FlagUp != 0}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return st, fmt.Errorf("hostnet: list addresses of %s: %w", bridge, err)
	}
	for _, a := range addrs {
		st.Addrs = append(st.Addrs, toAddr(a.IP))
	}
	tables := []int{unix.RT_TABLE_MAIN}
	for _, r := range k.Routes {
		if t := mainTable(r.Table); !slices.Contains(tables, t) {
			tables = append(tables, t)
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		for _, t := range tables {
			rs, err := retryDump(func() ([]netlink.Route, error) {
				return netlink.RouteListFiltered(fam, &netlink.Route{Table: t}, netlink.RT_FILTER_TABLE)
			})
			if err != nil {
				return st, fmt.Errorf("hostnet: list routes of table %d: %w", t, err)
			}
			for _, r := range rs {
				if dst, ok := routeDst(r); ok {
					st.Routes = append(st.Routes, routeKey{table: mainTable(r.Table), dst: dst, metric: r.Priority})
				}
			}
		}
	}
	return st, nil
}

// L3Restored is what RestoreL3 put back, and why it could not put back
// the rest: AddrErr covers the addresses (and the bridge's state),
// RouteErr the routes.
type L3Restored struct {
	Addrs, Routes     int
	AddrErr, RouteErr error
}

// RestoreL3 puts back on bridge what r lists: the bridge up, then the
// addresses, then the routes (which may need the addresses). It goes on
// past a failure, so that one address that cannot come back (IPv6
// disabled on the bridge) does not keep the others away, and logs each
// thing it put back.
func RestoreL3(log logrus.FieldLogger, bridge string, r L3Repair) L3Restored {
	var out L3Restored
	link, err := netlink.LinkByName(bridge)
	if err != nil {
		err = fmt.Errorf("hostnet: %s: %w", bridge, err)
		out.AddrErr, out.RouteErr = err, err
		return out
	}
	var addrErrs, routeErrs []error
	if r.Down {
		if err := netlink.LinkSetUp(link); err != nil {
			addrErrs = append(addrErrs, fmt.Errorf("hostnet: set %s up: %w", bridge, err))
		} else {
			out.Addrs++
			log.WithField("interface", bridge).Warn("set the gateway bridge up again")
		}
	}
	for _, a := range r.Addrs {
		if err := netlink.AddrReplace(link, a.addr()); err != nil {
			addrErrs = append(addrErrs, fmt.Errorf("hostnet: restore %s on %s: %w", a.Prefix, bridge, err))
			continue
		}
		out.Addrs++
		log.WithFields(logrus.Fields{"address": a.Prefix.String(), "interface": bridge}).Warn("restored a node address somebody deleted")
	}
	for _, kr := range r.Routes {
		if err := netlink.RouteReplace(kr.route(link.Attrs().Index)); err != nil {
			routeErrs = append(routeErrs, fmt.Errorf("hostnet: restore route %s on %s: %w", kr, bridge, err))
			continue
		}
		out.Routes++
		log.WithFields(logrus.Fields{"route": kr.String(), "interface": bridge}).Warn("restored a node route somebody deleted")
	}
	out.AddrErr, out.RouteErr = errors.Join(addrErrs...), errors.Join(routeErrs...)
	return out
}

// LoadNodeL3 reads the record at path; nil without error when there is
// none (or path is "").
func LoadNodeL3(path string) (*NodeL3, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("hostnet: node address record %s: %w", path, err)
	}
	var k NodeL3
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("hostnet: node address record %s: %w (remove it to keep what the gateway bridge holds)", path, err)
	}
	for i, a := range k.Addrs {
		if !a.Prefix.IsValid() {
			return nil, fmt.Errorf("hostnet: node address record %s: addresses[%d]: no prefix", path, i)
		}
	}
	for i, r := range k.Routes {
		if !r.Dst.IsValid() {
			return nil, fmt.Errorf("hostnet: node address record %s: routes[%d]: no destination", path, i)
		}
	}
	return &k, nil
}

// SaveNodeL3 writes k to path (nothing when path is ""), through a
// temporary file and a rename.
func SaveNodeL3(path string, k NodeL3) error {
	if path == "" {
		return nil
	}
	return writeRecord("node address record", path, k)
}
