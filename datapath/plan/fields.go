package plan

import (
	"errors"
	"fmt"
	"slices"
)

// Space is the packet or connection field that a Field is a bit range of.
type Space uint8

// Spaces.
const (
	// SpaceReg is one of the 32-bit registers reg0-reg15.
	SpaceReg Space = iota + 1
	// SpaceXXReg is one of the 128-bit registers xxreg0-xxreg3; xxregN is
	// reg(4N)..reg(4N+3), reg(4N) holding the most significant 32 bits.
	SpaceXXReg
	// SpaceCtMark is the 32-bit ct_mark of the connection in the zone of
	// the last ct() lookup.
	SpaceCtMark
	// SpaceCtLabel is the 128-bit ct_label of that connection.
	SpaceCtLabel
)

func (s Space) width() int {
	switch s {
	case SpaceReg, SpaceCtMark:
		return 32
	case SpaceXXReg, SpaceCtLabel:
		return 128
	}
	return 0
}

func (s Space) count() int {
	switch s {
	case SpaceReg:
		return 16
	case SpaceXXReg:
		return 4
	case SpaceCtMark, SpaceCtLabel:
		return 1
	}
	return 0
}

// Field is a named bit range [Start, End] (inclusive, bit 0 least
// significant) of a register, of ct_mark or of ct_label, on one bridge.
// Registers do not cross patch ports (Open vSwitch clears them), so each
// bridge has its own allocation. Build fields with NewField; the zero Field
// is invalid.
type Field struct {
	name   string
	bridge Bridge
	space  Space
	index  uint8 // register number; 0 for ct_mark and ct_label
	start  uint8
	end    uint8
	doc    string
}

// ErrRange marks a field or value outside its bounds.
var ErrRange = errors.New("out of range")

// NewField declares a field. It rejects an unknown space, a register
// number past the last register, and a bit range that is empty or ends
// past the space's width.
func NewField(name string, b Bridge, s Space, index, start, end int, doc string) (Field, error) {
	w := s.width()
	if w == 0 {
		return Field{}, fmt.Errorf("plan: field %s: unknown space %d", name, s)
	}
	if index < 0 || index >= s.count() {
		return Field{}, fmt.Errorf("plan: field %s: register %d: %w (0-%d)", name, index, ErrRange, s.count()-1)
	}
	if start < 0 || end < start || end >= w {
		return Field{}, fmt.Errorf("plan: field %s: bits %d..%d: %w (0..%d)", name, start, end, ErrRange, w-1)
	}
	return Field{name: name, bridge: b, space: s, index: uint8(index), start: uint8(start), end: uint8(end), doc: doc}, nil
}

// mustField declares a package-level field; a bad declaration is a
// programming error caught by the package's tests at init.
func mustField(name string, b Bridge, s Space, index, start, end int, doc string) Field {
	f, err := NewField(name, b, s, index, start, end, doc)
	if err != nil {
		panic(err)
	}
	return f
}

// Name returns the field's name.
func (f Field) Name() string { return f.name }

// Bridge returns the bridge the field is allocated on.
func (f Field) Bridge() Bridge { return f.bridge }

// Space returns the field's space.
func (f Field) Space() Space { return f.space }

// Index returns the register number (0 for ct_mark and ct_label).
func (f Field) Index() int { return int(f.index) }

// Start returns the field's least significant bit.
func (f Field) Start() int { return int(f.start) }

// End returns the field's most significant bit.
func (f Field) End() int { return int(f.end) }

// Width returns the number of bits.
func (f Field) Width() int { return int(f.end) - int(f.start) + 1 }

// Doc returns what the field holds.
func (f Field) Doc() string { return f.doc }

// Whole reports whether the field spans its whole register.
func (f Field) Whole() bool { return f.start == 0 && int(f.end) == f.space.width()-1 }

// Base returns the name of the whole register in ovs-ofctl syntax:
// "reg3", "xxreg3", "ct_mark" or "ct_label".
func (f Field) Base() string {
	switch f.space {
	case SpaceReg:
		return fmt.Sprintf("reg%d", f.index)
	case SpaceXXReg:
		return fmt.Sprintf("xxreg%d", f.index)
	case SpaceCtMark:
		return "ct_mark"
	case SpaceCtLabel:
		return "ct_label"
	}
	return "invalid"
}

// String renders the field as an ovs-ofctl subfield: "reg0[0..3]",
// "reg0[4]", or the register's name alone when the field spans all of it.
func (f Field) String() string {
	switch {
	case f.Whole():
		return f.Base()
	case f.start == f.end:
		return fmt.Sprintf("%s[%d]", f.Base(), f.start)
	}
	return fmt.Sprintf("%s[%d..%d]", f.Base(), f.start, f.end)
}

// Max returns the largest value the field holds, for fields of at most 64
// bits.
func (f Field) Max() uint64 {
	if f.Width() >= 64 {
		return ^uint64(0)
	}
	return 1<<f.Width() - 1
}

// Check returns an error naming the field when v does not fit in it.
func (f Field) Check(v uint64) error {
	if f.Width() < 64 && v > f.Max() {
		return fmt.Errorf("plan: field %s (%s): value %#x: %w (max %#x)", f.name, f, v, ErrRange, f.Max())
	}
	return nil
}

// Value32 returns v shifted into place in the 32-bit register and the
// field's mask, for matching and loading a field of a 32-bit space.
func (f Field) Value32(v uint32) (value, mask uint32, err error) {
	if f.space.width() != 32 {
		return 0, 0, fmt.Errorf("plan: field %s (%s) is not in a 32-bit register", f.name, f)
	}
	if err := f.Check(uint64(v)); err != nil {
		return 0, 0, err
	}
	mask = uint32(f.Max()) << f.start
	return v << f.start, mask, nil
}

// regBits returns the field's bits as ranges of the bridge's register file,
// numbering reg N's bit b as 32*N+b, so that fields of reg and xxreg
// spaces can be compared. ct_mark and ct_label get their own ranges past
// the register file.
func (f Field) regBits() [][2]int {
	switch f.space {
	case SpaceReg:
		return [][2]int{{32*int(f.index) + int(f.start), 32*int(f.index) + int(f.end)}}
	case SpaceXXReg:
		// Bit b of xxregN is bit b%32 of reg(4N + 3 - b/32).
		var out [][2]int
		for b := int(f.start); b <= int(f.end); {
			reg := 4*int(f.index) + 3 - b/32
			hi := min(int(f.end), (b/32)*32+31)
			out = append(out, [2]int{32*reg + b%32, 32*reg + hi%32})
			b = hi + 1
		}
		return out
	case SpaceCtMark:
		return [][2]int{{1000 + int(f.start), 1000 + int(f.end)}}
	case SpaceCtLabel:
		return [][2]int{{2000 + int(f.start), 2000 + int(f.end)}}
	}
	return nil
}

// Overlaps reports whether f and g share a bit on the same bridge.
func (f Field) Overlaps(g Field) bool {
	if f.bridge != g.bridge {
		return false
	}
	for _, a := range f.regBits() {
		for _, b := range g.regBits() {
			if a[0] <= b[1] && b[0] <= a[1] {
				return true
			}
		}
	}
	return false
}

// Mark is a named value of a field: a flag or an enumerated value.
type Mark struct {
	name  string
	field Field
	value uint64
}

// NewMark declares a mark, rejecting a value that does not fit the field.
func NewMark(name string, f Field, v uint64) (Mark, error) {
	if err := f.Check(v); err != nil {
		return Mark{}, fmt.Errorf("plan: mark %s: %w", name, err)
	}
	return Mark{name: name, field: f, value: v}, nil
}

func mustMark(name string, f Field, v uint64) Mark {
	m, err := NewMark(name, f, v)
	if err != nil {
		panic(err)
	}
	return m
}

// Name returns the mark's name.
func (m Mark) Name() string { return m.name }

// Field returns the field the mark is a value of.
func (m Mark) Field() Field { return m.field }

// Value returns the mark's value, unshifted.
func (m Mark) Value() uint64 { return m.value }

// String renders "reg0[0..3]=0x1 (FromPod)".
func (m Mark) String() string { return fmt.Sprintf("%s=%#x (%s)", m.field, m.value, m.name) }

// br0 fields.
var (
	// PktSource says where a packet entered br0; set by the classifier.
	PktSource = mustField("PktSource", Pod, SpaceReg, 0, 0, 3, "where the packet entered br0 (classifier)")
	// EndpointSelected is set once an endpoint is in EndpointIP/Port
	// (by a group bucket or a learned affinity flow).
	EndpointSelected = mustField("EndpointSelected", Pod, SpaceReg, 0, 4, 4, "an endpoint has been chosen for a new service connection")
	// NamespaceID is the source pod's namespace id, 24 bits so that it can
	// travel as a VXLAN VNI. In the virtual networks' tables it holds the
	// VNI instead: namespace ids are 1..0x7fffff, VNIs 0x800000..0xffffff.
	NamespaceID = mustField("NamespaceID", Pod, SpaceReg, 1, 0, 23, "source namespace id (VNI-sized), from port security or tun_id; a virtual network's VNI in tables 100-110")
	// EndpointIPv4 is the IPv4 endpoint a group bucket chose.
	EndpointIPv4 = mustField("EndpointIPv4", Pod, SpaceReg, 3, 0, 31, "IPv4 endpoint chosen by the service group")
	// EndpointPort is the endpoint's L4 port.
	EndpointPort = mustField("EndpointPort", Pod, SpaceReg, 4, 0, 15, "endpoint L4 port chosen by the service group")
	// ServiceID is the id of the service port a connection is for (its
	// group id); packet-ins carry it to the agent.
	ServiceID = mustField("ServiceID", Pod, SpaceReg, 5, 0, 31, "service port id (its group id), for packet-ins and affinity")
	// EndpointIPv6 is the IPv6 endpoint a group bucket chose.
	EndpointIPv6 = mustField("EndpointIPv6", Pod, SpaceXXReg, 3, 0, 127, "IPv6 endpoint chosen by the service group (reg12-reg15)")
	// SNATKind, in the service zone's ct_mark, is the SNAT a connection
	// needs after its DNAT that its packets cannot tell: set at the DNAT
	// commit and used for the connection's whole life (ANCHORS:
	// SNAT-after-DNAT is remembered in ct_mark).
	SNATKind = mustField("SNATKind", Pod, SpaceCtMark, 0, 0, 3, "zone 65000: SNAT needed after the DNAT")
	// TunnelPeer, in the service zone's ct_mark, says that a connection
	// came in through the tunnel from an address outside the cluster's pod
	// networks (another node's host, SNATed to its node IP): its replies
	// go back through the tunnel to that node, not out of the uplink.
	TunnelPeer = mustField("TunnelPeer", Pod, SpaceCtMark, 0, 4, 4, "zone 65000: came in through the tunnel from another node's host")
)

// breth0 fields.
var (
	// GatewayOrigin, in zone 64000's ct_mark, is the seed's 0x1/0x2 mark:
	// which side of the node a connection to the uplink came from.
	GatewayOrigin = mustField("GatewayOrigin", Gateway, SpaceCtMark, 0, 0, 31, "zone 64000: 0x1 from br0, 0x2 from the host")
)

// Marks.
var (
	FromPod     = mustMark("FromPod", PktSource, 1)
	FromTunnel  = mustMark("FromTunnel", PktSource, 2)
	FromGateway = mustMark("FromGateway", PktSource, 3)
	FromHost    = mustMark("FromHost", PktSource, 4)

	EndpointChosen = mustMark("EndpointChosen", EndpointSelected, 1)

	// SNATToNodeIP: the endpoint is a host address; SNAT to the node IP.
	SNATToNodeIP = mustMark("SNATToNodeIP", SNATKind, 1)
	// Value 2 was SNATToGateway until pipeline 3; table 40 now tells
	// those connections (a pod reaching itself, a remote pod reached from
	// breth0) from the packet, the mark's connections included.

	// ReturnByTunnel: the connection's replies go back through the tunnel
	// (TunnelPeer).
	ReturnByTunnel = mustMark("ReturnByTunnel", TunnelPeer, 1)

	OriginRouter = mustMark("OriginRouter", GatewayOrigin, 1)
	OriginHost   = mustMark("OriginHost", GatewayOrigin, 2)
)

var declaredFields = []Field{
	PktSource, EndpointSelected, NamespaceID, EndpointIPv4, EndpointPort, ServiceID, EndpointIPv6, SNATKind,
	TunnelPeer, GatewayOrigin, AffinityChecked, VNetLocal, FragmentsEgress, FragmentsFirewall, FragmentsIngress,
	PuntCategory, PuntSource, PuntNamespace,
}

var declaredMarks = []Mark{
	FromPod, FromTunnel, FromGateway, FromHost, EndpointChosen,
	SNATToNodeIP, ReturnByTunnel, OriginRouter, OriginHost, AffinityLookedUp, FromLocalAttachment,
	EgressFragmentsMet, FirewallFragmentsMet, IngressFragmentsMet,
	PuntUnidle, PuntReject, PuntDNS, PuntPolicyLog,
}

// Alias declares an intended overlap between two fields.
type Alias struct {
	A, B   string
	Reason string
}

// aliases lists every intended overlap; CheckFields fails on any other.
var aliases []Alias

// Fields returns every declared field.
func Fields() []Field { return slices.Clone(declaredFields) }

// Marks returns every declared mark.
func Marks() []Mark { return slices.Clone(declaredMarks) }

// CheckFields verifies the field plan: names unique, and no two fields
// overlapping unless the pair is declared as an alias.
func CheckFields() error { return checkFields(declaredFields, aliases) }

func checkFields(fs []Field, al []Alias) error {
	names := map[string]bool{}
	for _, f := range fs {
		if names[f.name] {
			return fmt.Errorf("plan: two fields named %s", f.name)
		}
		names[f.name] = true
	}
	allowed := func(a, b string) bool {
		for _, x := range al {
			if (x.A == a && x.B == b) || (x.A == b && x.B == a) {
				return true
			}
		}
		return false
	}
	for i, f := range fs {
		for _, g := range fs[i+1:] {
			if f.Overlaps(g) && !allowed(f.name, g.name) {
				return fmt.Errorf("plan: %s fields %s (%s) and %s (%s) overlap", f.bridge, f.name, f, g.name, g)
			}
		}
	}
	return nil
}
