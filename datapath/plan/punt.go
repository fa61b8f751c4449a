package plan

import "fmt"

// The punt stage: every flow that sends a packet to the agent (a reject,
// an unidling packet-in, a DNS reply held for learning, a denied packet's
// log sample) first loads its category into PuntCategory and resubmits to
// table PodPunt, where one flow per source applies that source's own meter
// of the category (meter:N) and records it in PuntSource; a pod's flow then
// loads the pod's namespace id into PuntNamespace and resubmits to
// PodPuntNamespace, where the namespace's meter of the category applies
// (Open vSwitch takes one meter per flow, so each level has its table).
// Then the calling flow runs its own controller action, whose userdata
// stays per flow (the ServiceID of a reject) and whose meter_id is the
// category's node-wide ceiling (MeterUnidle, MeterReject,
// MeterEgressFirewallDNS, MeterPolicyLog). A packet a meter drops inside
// the resubmits is dropped whole: the controller action after them never
// runs (the datapath executes meter(source), meter(namespace), then the
// controller's meter and userspace actions).
//
// The source is who pays for the packet-in: the port it came in by for
// what a pod (or the tunnel, the patch port, mp0) sends; the pod it goes
// to for a DNS reply, since a pod that floods queries floods replies to
// itself. So one pod's flood costs that pod's share of the category, one
// tenant's pods together cost its namespace's share, and nobody else's.

// PuntCategory is the packet-in category a flow resubmits to the punt
// table with: the table picks the category's meter of the source.
var PuntCategory = mustField("PuntCategory", Pod, SpaceReg, 0, 12, 15, "packet-in category of the punt stage (table 120): which of the source's meters applies")

// PuntSource is the per-source meter that let a packet-in through, set by
// the punt table. The agent reads it from the packet-in's metadata: its
// queues are per source, keyed by it, so a flood that passes its meter
// cannot fill a shared queue either.
var PuntSource = mustField("PuntSource", Pod, SpaceReg, 2, 0, 31, "the per-source meter a packet-in passed (punt table), the agent's queue key")

// PuntNamespace is the namespace id of the pod a packet-in is charged to,
// set by the pod's punt flow for the namespace's meter (PodPuntNamespace).
// It is not NamespaceID: a DNS reply is charged to the pod it goes to, and
// NamespaceID holds its sender's namespace, which the rest of the pipeline
// still needs.
var PuntNamespace = mustField("PuntNamespace", Pod, SpaceReg, 6, 0, 23, "namespace id of the pod a packet-in is charged to (punt table), for the namespace's meter (table 121)")

// PuntCategory values: the packet-in categories.
var (
	PuntUnidle    = mustMark("PuntUnidle", PuntCategory, uint64(PacketInUnidle))
	PuntReject    = mustMark("PuntReject", PuntCategory, uint64(PacketInReject))
	PuntDNS       = mustMark("PuntDNS", PuntCategory, uint64(PacketInDNS))
	PuntPolicyLog = mustMark("PuntPolicyLog", PuntCategory, uint64(PacketInPolicyDenied))
)

// PuntMark returns the PuntCategory mark of packet-in category c.
func PuntMark(c PacketInCategory) (Mark, error) {
	for _, m := range []Mark{PuntUnidle, PuntReject, PuntDNS, PuntPolicyLog} {
		if m.value == uint64(c) {
			return m, nil
		}
	}
	return Mark{}, fmt.Errorf("plan: packet-in category %s: no punt stage", c)
}

// PuntCategories lists the categories that go through the punt stage, in
// numeric order.
var PuntCategories = []PacketInCategory{PacketInUnidle, PacketInReject, PacketInDNS, PacketInPolicyDenied}

// Per-source meter ids. A source's meter of category c is c<<16 | key,
// where key is the source's ofport on br0 (1 to SourcePortMax; OpenFlow
// ports stop below 0xff00) or SourceShared for the single node-wide meter
// of the previous design. They never collide with the ceilings (1-4), and
// a pod's meters are known from its port alone: they are deterministic
// across agent restarts, and released with the pod's flows. Open vSwitch's
// userspace datapath accepts any id up to 0xffff0000 and holds up to
// 262,144 meters (ovs-ofctl meter-features: max_meter), 4 per port here.
const (
	// SourcePortMax is the largest ofport a per-source meter is keyed by.
	SourcePortMax uint32 = 0xfeff
	// SourceShared is the key of a category's one node-wide meter when
	// the agent runs the previous design (--packet-in-meters=shared).
	SourceShared uint32 = 0xffff
)

// SourceMeter returns the id of source key's meter of category c.
func SourceMeter(c PacketInCategory, key uint32) (uint32, error) {
	if _, err := PuntMark(c); err != nil {
		return 0, err
	}
	if (key == 0 || key > SourcePortMax) && key != SourceShared {
		return 0, fmt.Errorf("plan: %s meter of source %d: %w (ports 1-%d, or %d)", c, key, ErrRange, SourcePortMax, SourceShared)
	}
	return uint32(c)<<16 | key, nil
}

// SplitSourceMeter returns the category and source key of a per-source
// meter id; false for any other id (the ceilings among them).
func SplitSourceMeter(id uint32) (PacketInCategory, uint32, bool) {
	c, key := PacketInCategory(id>>16), id&0xffff
	if id>>16 > 0xff || key == 0 || (key > SourcePortMax && key != SourceShared) {
		return 0, 0, false
	}
	if _, err := PuntMark(c); err != nil {
		return 0, 0, false
	}
	return c, key, true
}

// Per-namespace meter ids: NamespaceMetersBase | c<<24 | namespace id,
// apart from the per-source meters (below 2^24) and below the largest id
// Open vSwitch accepts (0xffff0000).
const NamespaceMetersBase uint32 = 0x8000_0000

// NamespaceMeter returns the id of namespace id ns's meter of category c.
func NamespaceMeter(c PacketInCategory, ns uint32) (uint32, error) {
	if _, err := PuntMark(c); err != nil {
		return 0, err
	}
	if ns == 0 || uint64(ns) >= TunnelKeyVNIBit {
		return 0, fmt.Errorf("plan: %s meter of namespace id %d: %w (1-%d)", c, ns, ErrRange, TunnelKeyVNIBit-1)
	}
	return NamespaceMetersBase | uint32(c)<<24 | ns, nil
}

// SplitNamespaceMeter returns the category and namespace id of a
// per-namespace meter id; false for any other id.
func SplitNamespaceMeter(id uint32) (PacketInCategory, uint32, bool) {
	if id&NamespaceMetersBase == 0 {
		return 0, 0, false
	}
	c, ns := PacketInCategory(id>>24&0x7f), id&0xffffff
	if ns == 0 || uint64(ns) >= TunnelKeyVNIBit {
		return 0, 0, false
	}
	if _, err := PuntMark(c); err != nil {
		return 0, 0, false
	}
	return c, ns, true
}

// Ceiling returns the node-wide meter of category c, which its controller
// actions name (meter_id): the aggregate bound behind the sources' meters.
func Ceiling(c PacketInCategory) (uint32, bool) {
	switch c {
	case PacketInUnidle:
		return MeterUnidle, true
	case PacketInReject:
		return MeterReject, true
	case PacketInDNS:
		return MeterEgressFirewallDNS, true
	case PacketInPolicyDenied:
		return MeterPolicyLog, true
	}
	return 0, false
}

// PriorityPuntSource is the punt tables' per-source and per-namespace
// flows; PriorityPuntShared the per-category flows of the previous
// design's shared meters, below them.
const (
	PriorityPuntSource Priority = PriorityNormal
	PriorityPuntShared Priority = PriorityLow
)
