package cleanup

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/lib/ovsdb"
)

// Who created a bridge, as its external_ids "created-by" says: the agent
// (controller.EnsureBridges) or the CNI plugin, which creates a bare pod
// bridge when a pod comes before the agent.
const (
	createdByKey = "created-by"
	agentOwner   = "nodeflow-agent"
)

// CNIConfFile is the name of the CNI configuration file the agent writes
// in its --cni-conf-dir (hostnet.WriteCNIConfig).
const CNIConfFile = "10-nodeflow.conf"

// agentReservation is the owner the agent writes in the IPAM store for the
// addresses it reserves for mp0 (hostnet.WriteCNIConfig).
const agentReservation = "nodeflow-agent"

// KernelDefaults are the kernel's own values of hostnet.QuietSysctls, put
// back when the agent left no record of the uplink's values.
var KernelDefaults = map[string]string{"arp_ignore": "0", "arp_announce": "0", "disable_ipv6": "0"}

// sysctlOrder is the order in which the uplink's sysctls are restored:
// IPv6 first, so that the uplink can take its IPv6 addresses back.
var sysctlOrder = []string{"disable_ipv6", "arp_ignore", "arp_announce"}

// Options say where the agent kept what it put on the node: the agent's
// own settings.
type Options struct {
	// OVSRundir holds db.sock.
	OVSRundir string
	// PodBridge and GatewayBridge are the bridges' names (br0, breth0).
	PodBridge, GatewayBridge string
	// Uplink is the node's uplink interface (eth0).
	Uplink string
	// Masquerade are the masquerade subnets: the agent's addresses and
	// routes on the gateway bridge.
	Masquerade []netip.Prefix
	// CNIConfDir holds the agent's CNI configuration file; "": none.
	CNIConfDir string
	// CNIDataDir is the CNI plugin's IPAM directory; the agent's record of
	// the uplink's sysctls is there too.
	CNIDataDir string
	// CNIBin is the installed CNI plugin; "": left alone.
	CNIBin string
	// Socket is the agent's introspection socket; "": none.
	Socket string
	// NFTables are the nftables tables the features create
	// (features.NFTables): those present are deleted.
	NFTables []string
	// VNet are the virtual-network attachments' interfaces and
	// namespaces, as the feature list declares them (features.Links);
	// nil: not looked at.
	VNet Links
	// HealthAddr is the agent's health address; "": not asked.
	HealthAddr string
	// AgentLock is the OVSDB lock an agent holds while it programs the
	// switch (controller.AgentLock): cleanup refuses while another client
	// holds it, and holds it while it runs; "": not asked.
	AgentLock string
	// Purge removes the IPAM store and the CNI plugin even when pods still
	// hold addresses from it.
	Purge bool
	// Force runs even while an agent answers on the node or holds the
	// switch.
	Force bool
	// DryRun plans and prints, and changes nothing.
	DryRun bool
}

// Links are the network interfaces and namespaces a feature keeps on the
// node besides the bridges: the virtual networks' attachments, a veth each
// with its peer in a namespace of its own. The feature list declares them
// (features.Links), so that cleanup imports no feature.
type Links interface {
	// HostEnds returns the host ends of the veths.
	HostEnds() ([]string, error)
	// Namespaces returns the names of the namespaces in Dir that are the
	// feature's: holding nothing but peers of hostEnds, or nothing at
	// all.
	Namespaces(hostEnds []string) ([]string, error)
	// Remove removes the interface link (its peer goes with it) and the
	// namespace netns, either of which may be "" (none); what is missing
	// is not an error.
	Remove(link, netns string) error
	// Dir is the directory of the namespaces.
	Dir() string
}

// DBSocket is the OVSDB endpoint's path.
func (o Options) DBSocket() string { return o.OVSRundir + "/db.sock" }

// Bridge is a bridge in OVSDB.
type Bridge struct {
	Name        string
	UUID        ovsdb.UUID
	ExternalIDs map[string]string
	// Interfaces are the names of its internal interfaces (its own, mp0):
	// kernel interfaces that go with it.
	Interfaces []string
	// PodPorts counts the ports the CNI plugin added for pods.
	PodPorts int
}

// Owned reports whether nodeflow created the bridge.
func (b Bridge) Owned() bool {
	switch b.ExternalIDs[createdByKey] {
	case agentOwner, cni.OwnerCNI:
		return true
	}
	return false
}

// ConfFile is a file in the CNI configuration directory that may be the
// agent's.
type ConfFile struct {
	Path string
	// Ours is set when the file is the agent's (its network and plugin are
	// nodeflow's); Reason says why it is not.
	Ours   bool
	Reason string
}

// IPAMStore is the CNI plugin's IPAM store of nodeflow's network.
type IPAMStore struct {
	Dir string
	// PodAddrs counts the addresses pods hold (the agent's reservations
	// for mp0 excepted).
	PodAddrs int
}

// Facts are what Inspect found on the node.
type Facts struct {
	// OVSDB tells whether an OVSDB server answered; without one no bridge
	// was looked at.
	OVSDB bool
	// Bridges are every bridge in OVSDB.
	Bridges []Bridge
	// Gateway is the gateway bridge's interface's addresses and routes;
	// nil when the interface does not exist.
	Gateway *netstack.L3Config
	// Uplink is the uplink's; nil when the uplink does not exist.
	Uplink *netstack.L3Config
	// UplinkPromisc is set when the uplink's promiscuous mode is on (Open
	// vSwitch turns it on for a port of the userspace datapath).
	UplinkPromisc bool
	// SysctlLink is the interface whose sysctls Sysctls holds: the one the
	// agent recorded, else Options.Uplink.
	SysctlLink string
	// Sysctls are its current values of hostnet.QuietSysctls' names; a
	// name is missing when it could not be read.
	Sysctls map[string]string
	// TxChecksum is whether its TX checksum offload is on now; nil when it
	// could not be read.
	TxChecksum *bool
	// StateFile is the agent's record of the uplink's sysctls and TX
	// checksum offload, State its content; "" and nil when there is none.
	StateFile string
	State     *netstack.UplinkState
	// NodeL3File is the agent's record of the node's addresses it keeps
	// on the gateway bridge (hostnet.NodeL3File); "" when there is none.
	NodeL3File string
	// NFTables are nodeflow's nftables tables present (Options.NFTables).
	NFTables []NFTable
	// CNIConf are the agent's CNI configuration file, and its temporary
	// file, where they exist.
	CNIConf []ConfFile
	// Socket is the introspection socket's path when it exists; NotSocket
	// is set when something else is there.
	Socket    string
	NotSocket bool
	// IPAM is the IPAM store; nil when it does not exist.
	IPAM *IPAMStore
	// CNIBin is set when the CNI plugin's binary exists.
	CNIBin bool
	// VNetInterfaces are the host ends of virtual-network attachments'
	// veths (Options.VNet's HostEnds), VNetNamespaces the attachments'
	// namespaces whose interfaces are their peers, or that hold none
	// (its Namespaces).
	VNetInterfaces, VNetNamespaces []string
}

// Kind is what a step does.
type Kind string

// The kinds of step, in the order a plan takes them.
const (
	RemoveCNIConf   Kind = "remove CNI configuration"
	SetSysctl       Kind = "restore sysctl"
	SetTxChecksum   Kind = "restore TX checksum offload"
	AddAddress      Kind = "give address back"
	AddRoute        Kind = "give route back"
	DeleteBridge    Kind = "delete bridge"
	DeleteVNetLink  Kind = "delete virtual-network interface"
	DeleteVNetNetns Kind = "delete virtual-network namespace"
	PromiscOff      Kind = "turn promiscuous mode off"
	DeleteNFTable   Kind = "delete nftables table"
	RemoveSocket    Kind = "remove introspection socket"
	RemoveIPAM      Kind = "remove IPAM store"
	RemoveCNIBin    Kind = "remove CNI plugin"
	RemoveStateFile Kind = "remove uplink record"
	RemoveNodeL3    Kind = "remove node address record"
)

// Step is one change to the node.
type Step struct {
	Kind Kind
	// Path is the file or directory of the Remove kinds.
	Path string
	// Link is the interface of SetSysctl, SetTxChecksum, AddAddress,
	// AddRoute, PromiscOff and DeleteVNetLink. Path is also
	// DeleteVNetNetns's namespace's.
	Link string
	// Sysctl, From and To: SetSysctl's name and values. From and To are
	// SetTxChecksum's states too: "on" or "off".
	Sysctl, From, To string
	// Addr is AddAddress's address.
	Addr netlink.Addr
	// Route is AddRoute's route (its interface is Link).
	Route netlink.Route
	// Bridge is DeleteBridge's bridge.
	Bridge Bridge
	// Links remove DeleteVNetLink's interface and DeleteVNetNetns's
	// namespace (Options.VNet).
	Links Links
	// Family is DeleteNFTable's family ("ip", "ip6"), Table its table.
	Family, Table string
}

// NFTable is one nftables table: its family ("ip", "ip6") and name.
type NFTable struct {
	Family, Name string
}

// String describes the step in one line.
func (s Step) String() string {
	switch s.Kind {
	case SetSysctl:
		return fmt.Sprintf("%s %s of %s: %s -> %s", s.Kind, s.Sysctl, s.Link, s.From, s.To)
	case SetTxChecksum:
		return fmt.Sprintf("%s of %s: %s -> %s", s.Kind, s.Link, s.From, s.To)
	case AddAddress:
		return fmt.Sprintf("%s %s to %s", s.Kind, s.Addr.IPNet, s.Link)
	case AddRoute:
		return fmt.Sprintf("%s %s to %s", s.Kind, routeString(s.Route), s.Link)
	case DeleteBridge:
		return fmt.Sprintf("%s %s", s.Kind, s.Bridge.Name)
	case DeleteNFTable:
		return fmt.Sprintf("%s %s %s", s.Kind, s.Family, s.Table)
	case PromiscOff:
		return fmt.Sprintf("%s on %s", s.Kind, s.Link)
	case DeleteVNetLink:
		return fmt.Sprintf("%s %s", s.Kind, s.Link)
	}
	return fmt.Sprintf("%s %s", s.Kind, s.Path)
}

// Plan is what Make decided.
type Plan struct {
	Steps []Step
	// Notes say what is left on the node and why, or what could not be
	// known.
	Notes []string
}

// Empty reports whether there is nothing to do.
func (p Plan) Empty() bool { return len(p.Steps) == 0 }

// Make plans the cleanup of a node with facts f. It is pure.
func Make(o Options, f Facts) Plan {
	var p Plan
	// 1. The CNI configuration: no new pod on a bridge about to go.
	for _, c := range f.CNIConf {
		if c.Ours {
			p.Steps = append(p.Steps, Step{Kind: RemoveCNIConf, Path: c.Path})
		} else {
			p.note("%s is not nodeflow's CNI configuration (%s): left", c.Path, c.Reason)
		}
	}
	br := p.bridges(o, f)

	// 2. The uplink's sysctls and TX checksum offload, unless the uplink
	// stays in a bridge.
	ipv6, txKept := true, false
	if br.gatewayKept {
		if f.State != nil {
			p.note("the uplink stays in bridge %s: its sysctls and TX checksum offload, and %s, are left", o.GatewayBridge, f.StateFile)
		}
	} else {
		ipv6, txKept = p.uplink(f, br.gatewayGoes)
	}

	// 3. The node's addresses and routes, back from the gateway bridge.
	if br.gatewayGoes && f.Gateway != nil {
		steps, notes := l3Steps(o, *f.Gateway, *f.Uplink, ipv6)
		p.add(steps, notes)
	}

	// 4. The bridges, the pod bridge first. Open vSwitch gives the uplink
	// its promiscuous mode back when it leaves the gateway bridge, as it
	// found it: an ovs-vswitchd that was killed leaves it on, and the next
	// one finds it on.
	for _, b := range br.del {
		p.Steps = append(p.Steps, Step{Kind: DeleteBridge, Bridge: b})
	}
	if br.gatewayGoes && f.UplinkPromisc {
		p.Steps = append(p.Steps, Step{Kind: PromiscOff, Link: o.Uplink})
	}
	p.vnet(o, f)

	// 5. The rest.
	p.rest(o, f, br.gatewayKept, txKept)
	return p
}

// note adds a note.
func (p *Plan) note(format string, args ...any) {
	p.Notes = append(p.Notes, fmt.Sprintf(format, args...))
}

// add adds steps and notes.
func (p *Plan) add(steps []Step, notes []string) {
	p.Steps = append(p.Steps, steps...)
	p.Notes = append(p.Notes, notes...)
}

// bridgePlan is what becomes of the bridges: those to delete, and whether
// the gateway bridge goes or is kept (neither when there is none).
type bridgePlan struct {
	del                      []Bridge
	gatewayGoes, gatewayKept bool
}

// bridges decides which bridges go: the pod and gateway bridges nodeflow
// created, the gateway bridge only while the uplink exists.
func (p *Plan) bridges(o Options, f Facts) bridgePlan {
	var br bridgePlan
	if !f.OVSDB {
		p.note("no OVSDB server at %s: no bridge looked at", o.DBSocket())
	}
	for _, name := range []string{o.PodBridge, o.GatewayBridge} {
		i := slices.IndexFunc(f.Bridges, func(b Bridge) bool { return b.Name == name })
		if i < 0 || name == "" {
			continue
		}
		b := f.Bridges[i]
		if !b.Owned() {
			p.note("bridge %s was not created by nodeflow (external_ids %s=%q): left as it is", name, createdByKey, b.ExternalIDs[createdByKey])
			br.gatewayKept = br.gatewayKept || name == o.GatewayBridge
			continue
		}
		if name == o.GatewayBridge {
			switch {
			case f.Uplink == nil:
				p.note("uplink %s does not exist: bridge %s, which holds the node's addresses, is left", o.Uplink, name)
				br.gatewayKept = true
				continue
			case f.Gateway == nil && len(b.Interfaces) > 0:
				p.note("bridge %s has no interface (is ovs-vswitchd running?): the node's addresses cannot be read from it", name)
			}
			br.gatewayGoes = true
		}
		if b.PodPorts > 0 {
			p.note("bridge %s holds %d pod ports: those pods lose their network (their veths are the kubelet's)", name, b.PodPorts)
		}
		br.del = append(br.del, b)
	}
	for _, b := range f.Bridges {
		if b.Owned() && b.Name != o.PodBridge && b.Name != o.GatewayBridge {
			p.note("bridge %s was created by nodeflow but is neither --pod-bridge nor --gateway-bridge: left (run cleanup with the names the agent used)", b.Name)
		}
	}
	return br
}

// uplink restores the uplink's sysctls and TX checksum offload. It
// reports whether the uplink will have IPv6, and whether the recorded TX
// checksum offload could not be given back.
func (p *Plan) uplink(f Facts, gatewayGoes bool) (ipv6, txKept bool) {
	steps, ipv6, notes := sysctlSteps(f)
	p.add(steps, notes)
	// nodeflow was on the node: the uplink was, or may still be, in its
	// gateway bridge.
	wasHere := f.State != nil || gatewayGoes
	for name, v := range netstack.QuietSysctls {
		wasHere = wasHere || f.Sysctls[name] == v
	}
	steps, notes, txKept = txChecksumSteps(f, wasHere)
	p.add(steps, notes)
	return ipv6, txKept
}

// vnet removes the virtual-network attachments' veths (each takes its
// peer with it), then their namespaces, once the pod bridge no longer has
// them as ports. While the pod bridge stays, so do they.
func (p *Plan) vnet(o Options, f Facts) {
	if podBridgeKept := slices.ContainsFunc(f.Bridges, func(b Bridge) bool { return b.Name == o.PodBridge && !b.Owned() }); podBridgeKept {
		if len(f.VNetInterfaces)+len(f.VNetNamespaces) > 0 {
			p.note("bridge %s stays: its %d virtual-network interfaces and %d namespaces are left", o.PodBridge, len(f.VNetInterfaces), len(f.VNetNamespaces))
		}
		return
	}
	for _, l := range f.VNetInterfaces {
		p.Steps = append(p.Steps, Step{Kind: DeleteVNetLink, Link: l, Links: o.VNet})
	}
	for _, ns := range f.VNetNamespaces {
		p.Steps = append(p.Steps, Step{Kind: DeleteVNetNetns, Path: filepath.Join(o.VNet.Dir(), ns), Links: o.VNet})
	}
}

// rest removes nodeflow's nftables tables, the introspection socket, the
// IPAM store and the CNI plugin (unless pods still hold addresses, without
// Purge), and the agent's records, the uplink's last.
func (p *Plan) rest(o Options, f Facts, gatewayKept, txKept bool) {
	for _, t := range f.NFTables {
		p.Steps = append(p.Steps, Step{Kind: DeleteNFTable, Family: t.Family, Table: t.Name})
	}
	if f.Socket != "" {
		if f.NotSocket {
			p.note("%s is not a socket: left", f.Socket)
		} else {
			p.Steps = append(p.Steps, Step{Kind: RemoveSocket, Path: f.Socket})
		}
	}
	podsLeft := f.IPAM != nil && f.IPAM.PodAddrs > 0
	if f.IPAM != nil {
		if !podsLeft || o.Purge {
			p.Steps = append(p.Steps, Step{Kind: RemoveIPAM, Path: f.IPAM.Dir})
		} else {
			p.note("IPAM store %s left: pods on this node still hold %d addresses from it (remove them first, or --purge)", f.IPAM.Dir, f.IPAM.PodAddrs)
		}
	}
	if f.CNIBin {
		if !podsLeft || o.Purge {
			p.Steps = append(p.Steps, Step{Kind: RemoveCNIBin, Path: o.CNIBin})
		} else {
			p.note("CNI plugin %s left: pods on this node still need it to be torn down (or --purge)", o.CNIBin)
		}
	}
	if f.NodeL3File != "" {
		if gatewayKept {
			p.note("the uplink stays in bridge %s: %s, the node's addresses the agent keeps there, is left", o.GatewayBridge, f.NodeL3File)
		} else {
			p.Steps = append(p.Steps, Step{Kind: RemoveNodeL3, Path: f.NodeL3File})
		}
	}
	if f.State != nil && !gatewayKept && len(f.Sysctls) == len(netstack.QuietSysctls) && !txKept {
		p.Steps = append(p.Steps, Step{Kind: RemoveStateFile, Path: f.StateFile})
	}
}

// sysctlSteps restores the uplink's sysctls: the recorded values, or
// without a record the kernel's defaults of those that hold the value
// nodeflow sets. It reports whether the uplink will have IPv6.
func sysctlSteps(f Facts) (steps []Step, ipv6 bool, notes []string) {
	ipv6 = f.Sysctls["disable_ipv6"] != "1"
	if f.Uplink == nil && f.State == nil {
		return nil, ipv6, nil
	}
	if len(f.Sysctls) == 0 {
		if f.State != nil {
			notes = append(notes, fmt.Sprintf("cannot read the sysctls of %s: %s left", f.SysctlLink, f.StateFile))
		}
		return nil, ipv6, notes
	}
	defaulted := []string{}
	for _, name := range sysctlOrder {
		cur, ok := f.Sysctls[name]
		if !ok {
			notes = append(notes, fmt.Sprintf("cannot read sysctl %s of %s: left", name, f.SysctlLink))
			continue
		}
		var want string
		if f.State != nil {
			if want, ok = f.State.Sysctls[name]; !ok {
				continue
			}
		} else if cur == netstack.QuietSysctls[name] {
			want = KernelDefaults[name]
			defaulted = append(defaulted, name)
		} else {
			continue
		}
		if name == "disable_ipv6" {
			ipv6 = want != "1"
		}
		if cur != want {
			steps = append(steps, Step{Kind: SetSysctl, Link: f.SysctlLink, Sysctl: name, From: cur, To: want})
		}
	}
	if len(defaulted) > 0 {
		notes = append(notes, fmt.Sprintf("no record of the original sysctls of %s (%s): %s get the kernel's defaults",
			f.SysctlLink, netstack.UplinkStateFile, strings.Join(defaulted, ", ")))
	}
	return steps, ipv6, notes
}

// txChecksumSteps gives the uplink the TX checksum offload the agent
// recorded before it turned it off. Without a recorded value (no record, or
// one from an agent that did not record it) the offload is left as it is:
// its original value is unknown, and when it is off and nodeflow was on
// the node (wasHere) the note says so. keep is set when the recorded value
// could not be given back, so that the record stays for another run.
func txChecksumSteps(f Facts, wasHere bool) (steps []Step, notes []string, keep bool) {
	var want *bool
	if f.State != nil {
		want = f.State.TxChecksum
	}
	switch {
	case want == nil:
		if f.TxChecksum != nil && !*f.TxChecksum && wasHere {
			notes = append(notes, fmt.Sprintf("no record of the original TX checksum offload of %s (%s): it is off, as nodeflow's userspace datapath "+
				"sets it, and is left off; its original value is unknown (`ethtool -K %s tx on` turns it on)",
				f.SysctlLink, netstack.UplinkStateFile, f.SysctlLink))
		}
	case f.TxChecksum == nil:
		notes = append(notes, fmt.Sprintf("cannot read the TX checksum offload of %s: not restored (recorded: %s); %s left", f.SysctlLink, onOff(*want), f.StateFile))
		keep = true
	case *f.TxChecksum != *want:
		steps = append(steps, Step{Kind: SetTxChecksum, Link: f.SysctlLink, From: onOff(*f.TxChecksum), To: onOff(*want)})
	}
	return steps, notes, keep
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// l3Steps gives the uplink the node's addresses and routes that are on the
// gateway bridge, less nodeflow's own and less those it has.
func l3Steps(o Options, gw, uplink netstack.L3Config, ipv6 bool) (steps []Step, notes []string) {
	have := map[string]bool{}
	for _, a := range uplink.Addrs {
		have[a.IPNet.String()] = true
	}
	skipped6 := 0
	for _, a := range gw.Addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		ip = ip.Unmap()
		if masquerade(o.Masquerade, ip) || have[a.IPNet.String()] {
			continue
		}
		if ip.Is6() && !ipv6 {
			skipped6++
			continue
		}
		steps = append(steps, Step{Kind: AddAddress, Link: o.Uplink, Addr: a})
	}
	haveRoute := map[string]bool{}
	for _, r := range uplink.Routes {
		haveRoute[routeKey(r)] = true
	}
	for _, r := range gw.Routes {
		if ownRoute(o.Masquerade, r) || haveRoute[routeKey(r)] {
			continue
		}
		if isIPv6Route(r) && !ipv6 {
			skipped6++
			continue
		}
		steps = append(steps, Step{Kind: AddRoute, Link: o.Uplink, Route: r})
	}
	if skipped6 > 0 {
		notes = append(notes, fmt.Sprintf("IPv6 stays disabled on %s (as recorded): %d IPv6 addresses and routes of %s are not given back", o.Uplink, skipped6, o.GatewayBridge))
	}
	return steps, notes
}

func masquerade(subnets []netip.Prefix, ip netip.Addr) bool {
	for _, s := range subnets {
		if s.IsValid() && s.Contains(ip) {
			return true
		}
	}
	return false
}

// ownRoute reports whether r is one of the agent's routes on the gateway
// bridge: to the masquerade subnet, or via a masquerade next hop (the
// service networks').
func ownRoute(subnets []netip.Prefix, r netlink.Route) bool {
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && masquerade(subnets, gw.Unmap()) {
		return true
	}
	if r.Dst != nil {
		dst, ok := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		for _, s := range subnets {
			if ok && s.IsValid() && s.Contains(dst.Unmap()) && ones >= s.Bits() {
				return true
			}
		}
	}
	return false
}

func isIPv6Route(r netlink.Route) bool {
	if r.Dst != nil {
		return r.Dst.IP.To4() == nil
	}
	if r.Gw != nil {
		return r.Gw.To4() == nil
	}
	return r.Family == netlink.FAMILY_V6
}

// routeKey identifies a route in its table, whatever its interface.
func routeKey(r netlink.Route) string {
	table := r.Table
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	fam := "4"
	if isIPv6Route(r) {
		fam = "6"
	}
	return fmt.Sprintf("%s %d %s %s %d", fam, table, dstString(r.Dst), r.Gw, r.Priority)
}

func dstString(d *net.IPNet) string {
	if d == nil {
		return "default"
	}
	if ones, _ := d.Mask.Size(); ones == 0 && d.IP.IsUnspecified() {
		return "default"
	}
	return d.String()
}

// routeString is a route as `ip route` shows it, without its interface.
func routeString(r netlink.Route) string {
	s := dstString(r.Dst)
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	if r.Src != nil {
		s += " src " + r.Src.String()
	}
	if r.Priority != 0 {
		s += fmt.Sprintf(" metric %d", r.Priority)
	}
	return s
}
