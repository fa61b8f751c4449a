package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/host/cni"
	"nodeflow/testbed/nsutil"
)

// SnapshotBeforeAgent is the file, in a node's directory, of the node's
// NodeSnapshot taken before its agent first started: what `nodeflow
// cleanup` must give back.
const SnapshotBeforeAgent = "snapshot-before-agent.json"

// NodeSnapshot is what a node's network namespace, its OVS and its CNI
// configuration directory hold of what the agent changes. Each item is
// one line, as `ip` would show it, without counters or interface indexes,
// so that two snapshots compare line by line.
type NodeSnapshot struct {
	// Links: name, type, MTU, up or down, MAC, promiscuity.
	Links []string `json:"links"`
	// Addresses of every interface, with their scope, broadcast and flags.
	Addresses []string `json:"addresses"`
	// Routes of all tables.
	Routes []string `json:"routes"`
	// Neighbours are the permanent and proxy entries.
	Neighbours []string `json:"neighbours"`
	// NFTables is `nft list ruleset`.
	NFTables string `json:"nftables"`
	// Sysctls are the uplink's arp_ignore, arp_announce and disable_ipv6.
	Sysctls map[string]string `json:"sysctls"`
	// TxChecksum is the uplink's TX checksum offload: "on" or "off" (as
	// `ethtool -k` shows tx-checksumming).
	TxChecksum string `json:"txChecksum"`
	// Bridges are OVS's bridges (`ovs-vsctl list-br`).
	Bridges []string `json:"bridges"`
	// CNIConf lists the CNI configuration directory.
	CNIConf []string `json:"cniConf"`
}

// TakeNodeSnapshot takes the snapshot of the node whose namespace is
// netns, whose OVS runs in ovsRundir, whose CNI configuration directory is
// confDir and whose uplink is uplink.
func TakeNodeSnapshot(netns, ovsRundir, confDir, uplink string) (*NodeSnapshot, error) {
	s := &NodeSnapshot{Sysctls: map[string]string{}}
	err := nsutil.Do(netns, func() error { return s.readNetlink(uplink) })
	if err != nil {
		return nil, fmt.Errorf("testbed: snapshot of %s: %w", netns, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", netns, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("testbed: snapshot of %s: nft list ruleset: %v: %s", netns, err, bytes.TrimSpace(out))
	}
	s.NFTables = string(out)
	out, err = exec.CommandContext(ctx, "ovs-vsctl", "--timeout=10", "--db=unix:"+filepath.Join(ovsRundir, "db.sock"), "list-br").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("testbed: snapshot of %s: ovs-vsctl list-br: %v: %s", netns, err, bytes.TrimSpace(out))
	}
	s.Bridges = strings.Fields(string(out))
	s.CNIConf = []string{}
	entries, err := os.ReadDir(confDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("testbed: snapshot of %s: %w", netns, err)
	}
	for _, e := range entries {
		s.CNIConf = append(s.CNIConf, e.Name())
	}
	return s, nil
}

// readNetlink reads the links, addresses, routes, neighbours, the uplink's
// sysctls and its TX checksum offload of the calling thread's namespace.
func (s *NodeSnapshot) readNetlink(uplink string) error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	names := map[int]string{}
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		state := "down"
		if a.Flags&net.FlagUp != 0 {
			state = "up"
		}
		s.Links = append(s.Links, fmt.Sprintf("%s type %s mtu %d %s mac %s promisc %d", a.Name, l.Type(), a.MTU, state, a.HardwareAddr, a.Promisc))
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		line := fmt.Sprintf("%s %s scope %s", names[a.LinkIndex], a.IPNet, netlink.Scope(a.Scope))
		if a.Broadcast != nil {
			line += " brd " + a.Broadcast.String()
		}
		if f := addrFlags(a.Flags); f != "" {
			line += " " + f
		}
		s.Addresses = append(s.Addresses, line)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err
	}
	for _, r := range routes {
		s.Routes = append(s.Routes, routeLine(r, names))
	}
	neighs, err := netlink.NeighList(0, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, n := range neighs {
		if n.State&netlink.NUD_PERMANENT != 0 {
			s.Neighbours = append(s.Neighbours, fmt.Sprintf("%s %s lladdr %s permanent", names[n.LinkIndex], n.IP, n.HardwareAddr))
		}
	}
	proxies, err := netlink.NeighProxyList(0, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, n := range proxies {
		s.Neighbours = append(s.Neighbours, fmt.Sprintf("%s %s proxy", names[n.LinkIndex], n.IP))
	}
	for _, p := range []string{"ipv4/conf/" + uplink + "/arp_ignore", "ipv4/conf/" + uplink + "/arp_announce", "ipv6/conf/" + uplink + "/disable_ipv6"} {
		b, err := os.ReadFile("/proc/sys/net/" + p)
		if err != nil {
			return err
		}
		s.Sysctls[p] = strings.TrimSpace(string(b))
	}
	on, err := cni.TxChecksum("", uplink)
	if err != nil {
		return err
	}
	s.TxChecksum = "off"
	if on {
		s.TxChecksum = "on"
	}
	for _, l := range [][]string{s.Links, s.Addresses, s.Routes, s.Neighbours} {
		slices.Sort(l)
	}
	return nil
}

var addrFlagNames = []struct {
	flag int
	name string
}{
	{unix.IFA_F_SECONDARY, "secondary"}, {unix.IFA_F_NODAD, "nodad"}, {unix.IFA_F_OPTIMISTIC, "optimistic"},
	{unix.IFA_F_DADFAILED, "dadfailed"}, {unix.IFA_F_HOMEADDRESS, "home"}, {unix.IFA_F_DEPRECATED, "deprecated"},
	{unix.IFA_F_TENTATIVE, "tentative"}, {unix.IFA_F_PERMANENT, "permanent"}, {unix.IFA_F_MANAGETEMPADDR, "mngtmpaddr"},
	{unix.IFA_F_NOPREFIXROUTE, "noprefixroute"}, {unix.IFA_F_MCAUTOJOIN, "autojoin"},
}

func addrFlags(f int) string {
	var out []string
	for _, n := range addrFlagNames {
		if f&n.flag != 0 {
			out = append(out, n.name)
		}
	}
	return strings.Join(out, " ")
}

var tableNames = map[int]string{unix.RT_TABLE_MAIN: "main", unix.RT_TABLE_LOCAL: "local", unix.RT_TABLE_DEFAULT: "default"}

var routeTypes = map[int]string{unix.RTN_UNICAST: "unicast", unix.RTN_LOCAL: "local", unix.RTN_BROADCAST: "broadcast",
	unix.RTN_ANYCAST: "anycast", unix.RTN_MULTICAST: "multicast", unix.RTN_BLACKHOLE: "blackhole", unix.RTN_UNREACHABLE: "unreachable",
	unix.RTN_PROHIBIT: "prohibit"}

// routeLine is a route as `ip route show table all` shows it.
func routeLine(r netlink.Route, names map[int]string) string {
	table, ok := tableNames[r.Table]
	if !ok {
		table = fmt.Sprint(r.Table)
	}
	typ, ok := routeTypes[r.Type]
	if !ok {
		typ = fmt.Sprint(r.Type)
	}
	dst := "default"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	fam := "inet"
	if r.Family == netlink.FAMILY_V6 {
		fam = "inet6"
	}
	line := fmt.Sprintf("table %s %s %s %s", table, fam, typ, dst)
	if r.Gw != nil {
		line += " via " + r.Gw.String()
	}
	for _, nh := range r.MultiPath {
		line += fmt.Sprintf(" nexthop via %s dev %s", nh.Gw, names[nh.LinkIndex])
	}
	if r.LinkIndex != 0 {
		line += " dev " + names[r.LinkIndex]
	}
	line += fmt.Sprintf(" proto %s scope %s", r.Protocol, r.Scope)
	if r.Src != nil {
		line += " src " + r.Src.String()
	}
	if r.Priority != 0 {
		line += fmt.Sprintf(" metric %d", r.Priority)
	}
	if r.MTU != 0 {
		line += fmt.Sprintf(" mtu %d", r.MTU)
	}
	if r.Flags != 0 {
		line += fmt.Sprintf(" flags %#x", r.Flags)
	}
	return line
}

// Write stores the snapshot as JSON at path.
func (s *NodeSnapshot) Write(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadNodeSnapshot reads a snapshot Write stored.
func ReadNodeSnapshot(path string) (*NodeSnapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var s NodeSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("testbed: %s: %w", path, err)
	}
	return &s, nil
}

// Diff lists how other differs from s, one line per item: "-" what only s
// has, "+" what only other has, each under its section's name. It is
// empty when they are equal.
func (s *NodeSnapshot) Diff(other *NodeSnapshot) []string {
	var out []string
	lines := func(section string, a, b []string) {
		for _, l := range a {
			if !slices.Contains(b, l) {
				out = append(out, fmt.Sprintf("- %s: %s", section, l))
			}
		}
		for _, l := range b {
			if !slices.Contains(a, l) {
				out = append(out, fmt.Sprintf("+ %s: %s", section, l))
			}
		}
	}
	lines("link", s.Links, other.Links)
	lines("address", s.Addresses, other.Addresses)
	lines("route", s.Routes, other.Routes)
	lines("neighbour", s.Neighbours, other.Neighbours)
	lines("nft", strings.Split(strings.TrimSpace(s.NFTables), "\n"), strings.Split(strings.TrimSpace(other.NFTables), "\n"))
	var sysA, sysB []string
	for _, k := range slices.Sorted(maps.Keys(s.Sysctls)) {
		sysA = append(sysA, k+"="+s.Sysctls[k])
	}
	for _, k := range slices.Sorted(maps.Keys(other.Sysctls)) {
		sysB = append(sysB, k+"="+other.Sysctls[k])
	}
	lines("sysctl", sysA, sysB)
	lines("tx checksum offload", []string{s.TxChecksum}, []string{other.TxChecksum})
	lines("ovs bridge", s.Bridges, other.Bridges)
	lines("cni conf", s.CNIConf, other.CNIConf)
	return out
}

// snapshotNodes records each node's snapshot before its agent starts
// (SnapshotBeforeAgent); a failure is logged, and the test that needs the
// file fails on its absence.
func (s *supervisor) snapshotNodes(nodes []string) {
	for _, n := range nodes {
		sb := s.sandboxes[n]
		if sb == nil {
			continue
		}
		snap, err := TakeNodeSnapshot(memberNetns(s.top.Name, n), sb.Dir, filepath.Join(s.nodeDir(n), "net.d"), "eth0")
		if err == nil {
			err = snap.Write(filepath.Join(s.nodeDir(n), SnapshotBeforeAgent))
		}
		if err != nil {
			s.log.WithError(err).WithField("node", n).Warn("cannot take the node's snapshot before its agent starts")
		}
	}
}
