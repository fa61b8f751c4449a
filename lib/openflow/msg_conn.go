package openflow

import (
	"encoding/binary"
	"fmt"
)

// This file holds the connection-level messages: HELLO, ECHO, FEATURES,
// switch configuration, BARRIER, role, asynchronous-message configuration
// and the Nicira session settings (packet-in format, controller id).

// Nicira (NXT_*) experimenter message subtypes used by this file.
const (
	nxtSetPacketInFormat uint32 = 16
	nxtSetAsyncConfig    uint32 = 19
	nxtSetControllerID   uint32 = 20
	nxtSetAsyncConfig2   uint32 = 27
)

func init() {
	registerType(TypeHello, decodeHello)
	registerType(TypeEchoRequest, func(_ Header, b []byte) (Message, error) { return &EchoRequest{Data: clone(b)}, nil })
	registerType(TypeEchoReply, func(_ Header, b []byte) (Message, error) { return &EchoReply{Data: clone(b)}, nil })
	registerType(TypeFeaturesRequest, emptyDecoder("features request", func() Message { return &FeaturesRequest{} }))
	registerType(TypeFeaturesReply, decodeFeaturesReply)
	registerType(TypeGetConfigRequest, emptyDecoder("get config request", func() Message { return &GetConfigRequest{} }))
	registerType(TypeGetConfigReply, func(_ Header, b []byte) (Message, error) {
		c, err := decodeSwitchConfig("get config reply", b)
		if err != nil {
			return nil, err
		}
		return &GetConfigReply{Flags: c.Flags, MissSendLen: c.MissSendLen}, nil
	})
	registerType(TypeSetConfig, func(_ Header, b []byte) (Message, error) {
		c, err := decodeSwitchConfig("set config", b)
		if err != nil {
			return nil, err
		}
		return &SetConfig{Flags: c.Flags, MissSendLen: c.MissSendLen}, nil
	})
	registerType(TypeBarrierRequest, emptyDecoder("barrier request", func() Message { return &BarrierRequest{} }))
	registerType(TypeBarrierReply, emptyDecoder("barrier reply", func() Message { return &BarrierReply{} }))
	registerType(TypeRoleRequest, func(_ Header, b []byte) (Message, error) {
		r, err := decodeRole("role request", b)
		if err != nil {
			return nil, err
		}
		return &RoleRequest{Role: r.Role, GenerationID: r.GenerationID}, nil
	})
	registerType(TypeRoleReply, func(_ Header, b []byte) (Message, error) {
		r, err := decodeRole("role reply", b)
		if err != nil {
			return nil, err
		}
		return &RoleReply{Role: r.Role, GenerationID: r.GenerationID}, nil
	})
	registerType(TypeGetAsyncRequest, emptyDecoder("get async request", func() Message { return &GetAsyncRequest{} }))
	registerType(TypeGetAsyncReply, func(h Header, b []byte) (Message, error) {
		c, err := decodeAsyncForVersion("get async reply", h.Version, b)
		if err != nil {
			return nil, err
		}
		return &GetAsyncReply{Config: c}, nil
	})
	registerType(TypeSetAsync, func(h Header, b []byte) (Message, error) {
		c, err := decodeAsyncForVersion("set async", h.Version, b)
		if err != nil {
			return nil, err
		}
		return &SetAsync{Config: c}, nil
	})
	registerExperimenter(ExperimenterNicira, nxtSetAsyncConfig, func(_ Header, b []byte) (Message, error) {
		c, err := decodeAsyncFixed("nxt set async config", b)
		if err != nil {
			return nil, err
		}
		return &NXSetAsyncConfig{Config: c}, nil
	})
	registerExperimenter(ExperimenterNicira, nxtSetAsyncConfig2, func(_ Header, b []byte) (Message, error) {
		c, err := decodeAsyncProps("nxt set async config2", b)
		if err != nil {
			return nil, err
		}
		return &NXSetAsyncConfig2{Config: c}, nil
	})
	registerExperimenter(ExperimenterNicira, nxtSetPacketInFormat, decodeSetPacketInFormat)
	registerExperimenter(ExperimenterNicira, nxtSetControllerID, decodeSetControllerID)
}

// emptyDecoder returns a decoder for a header-only message.
func emptyDecoder(what string, mk func() Message) decodeFunc {
	return func(_ Header, b []byte) (Message, error) {
		if len(b) != 0 {
			return nil, fmt.Errorf("%s: %d bytes after the header: %w", what, len(b), ErrMalformed)
		}
		return mk(), nil
	}
}

// exactLen checks a fixed-size body.
func exactLen(b []byte, n int, what string) error {
	if err := need(b, n, what); err != nil {
		return err
	}
	if len(b) > n {
		return fmt.Errorf("%s: length %d, want %d: %w", what, len(b), n, ErrMalformed)
	}
	return nil
}

// ---------------------------------------------------------------- HELLO

// Hello element types.
const helloElemVersionBitmap uint16 = 1

// HelloElement is a HELLO element this package does not interpret, kept
// verbatim (Data excludes the 4-byte element header and the padding).
type HelloElement struct {
	Type uint16
	Data []byte
}

// Hello is OFPT_HELLO. The header's version is the highest version the
// sender speaks; the optional version bitmap lists all of them.
//
// Body: a list of elements, each
//
//	2 bytes: type (1 = OFPHET_VERSIONBITMAP)
//	2 bytes: length, header included, padding excluded
//	payload (the bitmap: 32-bit words, bit n set = version n supported)
//	zero padding to a multiple of 8
type Hello struct {
	// Bitmap is the version bitmap payload; nil when the HELLO has none.
	Bitmap []uint32
	// Elements are the other elements, in order.
	Elements []HelloElement
}

// NewHello returns a HELLO whose bitmap lists versions. Marshal it with the
// highest of them.
func NewHello(versions ...Version) *Hello {
	h := &Hello{}
	for _, v := range versions {
		w := int(v) / 32
		for len(h.Bitmap) <= w {
			h.Bitmap = append(h.Bitmap, 0)
		}
		h.Bitmap[w] |= 1 << (uint(v) % 32)
	}
	return h
}

// Supports reports whether a peer that sent this HELLO with header version
// hv speaks version v: by the bitmap when there is one, else every version
// up to hv.
func (h *Hello) Supports(hv, v Version) bool {
	if h != nil && len(h.Bitmap) > 0 {
		w := int(v) / 32
		return w < len(h.Bitmap) && h.Bitmap[w]&(1<<(uint(v)%32)) != 0
	}
	return v >= Version10 && v <= hv
}

// NegotiateVersion returns the highest of ours that the peer, which sent
// peer with header version hv, also speaks; false if there is none.
func NegotiateVersion(ours []Version, hv Version, peer *Hello) (Version, bool) {
	var best Version
	for _, v := range ours {
		if v > best && peer.Supports(hv, v) {
			best = v
		}
	}
	return best, best != 0
}

func decodeHello(_ Header, b []byte) (Message, error) {
	h := &Hello{}
	for i := 0; len(b) > 0; i++ {
		if err := need(b, 4, fmt.Sprintf("hello: element %d header", i)); err != nil {
			return nil, err
		}
		typ := binary.BigEndian.Uint16(b[0:2])
		n := int(binary.BigEndian.Uint16(b[2:4]))
		if n < 4 {
			return nil, fmt.Errorf("hello: element %d (type %d): length %d: %w", i, typ, n, ErrMalformed)
		}
		if err := need(b, n, fmt.Sprintf("hello: element %d (type %d)", i, typ)); err != nil {
			return nil, err
		}
		data := b[4:n]
		if typ == helloElemVersionBitmap && h.Bitmap == nil {
			if len(data)%4 != 0 || len(data) == 0 {
				return nil, fmt.Errorf("hello: version bitmap: %d bytes, want a positive multiple of 4: %w", len(data), ErrMalformed)
			}
			h.Bitmap = make([]uint32, len(data)/4)
			for j := range h.Bitmap {
				h.Bitmap[j] = binary.BigEndian.Uint32(data[4*j:])
			}
		} else {
			h.Elements = append(h.Elements, HelloElement{Type: typ, Data: clone(data)})
		}
		// The last element's padding may be missing.
		n += pad8(n)
		if n > len(b) {
			n = len(b)
		}
		b = b[n:]
	}
	return h, nil
}

func (h *Hello) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	appendElem := func(b []byte, typ uint16, payload int, fill func([]byte) []byte) ([]byte, error) {
		n := 4 + payload
		if n > 0xffff {
			return b, fmt.Errorf("hello element type %d: %d bytes: %w", typ, n, ErrTooLong)
		}
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = fill(b)
		return appendZeros(b, pad8(n)), nil
	}
	var err error
	if len(h.Bitmap) > 0 {
		b, err = appendElem(b, helloElemVersionBitmap, 4*len(h.Bitmap), func(b []byte) []byte {
			for _, w := range h.Bitmap {
				b = binary.BigEndian.AppendUint32(b, w)
			}
			return b
		})
		if err != nil {
			return TypeHello, b, err
		}
	}
	for _, e := range h.Elements {
		b, err = appendElem(b, e.Type, len(e.Data), func(b []byte) []byte { return append(b, e.Data...) })
		if err != nil {
			return TypeHello, b, err
		}
	}
	return TypeHello, b, nil
}

// ----------------------------------------------------------------- ECHO

// EchoRequest is OFPT_ECHO_REQUEST: an arbitrary payload that the peer
// copies into its EchoReply (with the same xid).
type EchoRequest struct {
	Data []byte
}

func (m *EchoRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeEchoRequest, append(b, m.Data...), nil
}

// EchoReply is OFPT_ECHO_REPLY.
type EchoReply struct {
	Data []byte
}

func (m *EchoReply) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeEchoReply, append(b, m.Data...), nil
}

// ------------------------------------------------------------- FEATURES

// FeaturesRequest is OFPT_FEATURES_REQUEST (header only).
type FeaturesRequest struct{}

func (m *FeaturesRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeFeaturesRequest, b, nil
}

// Capabilities are the OFPC_* switch capability bits of a FeaturesReply.
type Capabilities uint32

// Capability bits (OF1.3-OF1.5).
const (
	CapFlowStats   Capabilities = 1 << 0
	CapTableStats  Capabilities = 1 << 1
	CapPortStats   Capabilities = 1 << 2
	CapGroupStats  Capabilities = 1 << 3
	CapIPReasm     Capabilities = 1 << 5
	CapQueueStats  Capabilities = 1 << 6
	CapPortBlocked Capabilities = 1 << 8
	CapBundles     Capabilities = 1 << 9 // OF1.5
	CapFlowMonitor Capabilities = 1 << 10
)

// FeaturesReply is OFPT_FEATURES_REPLY.
//
// Body (OF1.3-OF1.5, 24 bytes):
//
//	8 bytes: datapath_id
//	4 bytes: n_buffers (OVS: 0)
//	1 byte:  n_tables (OVS: 254)
//	1 byte:  auxiliary_id
//	2 bytes: pad
//	4 bytes: capabilities
//	4 bytes: reserved
//
// Before OF1.3 the reply also lists the ports, which are not decoded.
type FeaturesReply struct {
	DatapathID   uint64
	NBuffers     uint32
	NTables      uint8
	AuxiliaryID  uint8
	Capabilities Capabilities
	Reserved     uint32
}

func decodeFeaturesReply(h Header, b []byte) (Message, error) {
	if h.Version >= Version13 {
		if err := exactLen(b, 24, "features reply"); err != nil {
			return nil, err
		}
	} else if err := need(b, 24, "features reply"); err != nil {
		return nil, err
	}
	return &FeaturesReply{
		DatapathID:   binary.BigEndian.Uint64(b[0:8]),
		NBuffers:     binary.BigEndian.Uint32(b[8:12]),
		NTables:      b[12],
		AuxiliaryID:  b[13],
		Capabilities: Capabilities(binary.BigEndian.Uint32(b[16:20])),
		Reserved:     binary.BigEndian.Uint32(b[20:24]),
	}, nil
}

func (m *FeaturesReply) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = binary.BigEndian.AppendUint64(b, m.DatapathID)
	b = binary.BigEndian.AppendUint32(b, m.NBuffers)
	b = append(b, m.NTables, m.AuxiliaryID, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(m.Capabilities))
	b = binary.BigEndian.AppendUint32(b, m.Reserved)
	return TypeFeaturesReply, b, nil
}

// --------------------------------------------------------- SWITCH CONFIG

// ConfigFlags are the OFPC_FRAG_* flags of the switch configuration.
type ConfigFlags uint16

// Fragment handling (the low two bits of ConfigFlags).
const (
	ConfigFragNormal ConfigFlags = 0
	ConfigFragDrop   ConfigFlags = 1
	ConfigFragReasm  ConfigFlags = 2
	ConfigFragMask   ConfigFlags = 3
)

// Special miss_send_len values.
const (
	// MissSendLenMax is the largest byte count (OFPCML_MAX).
	MissSendLenMax uint16 = 0xffe5
	// MissSendLenNoBuffer asks for whole packets (OFPCML_NO_BUFFER).
	MissSendLenNoBuffer uint16 = 0xffff
)

type switchConfig struct {
	Flags       ConfigFlags
	MissSendLen uint16
}

// Switch configuration body (4 bytes):
//
//	2 bytes: flags
//	2 bytes: miss_send_len
func decodeSwitchConfig(what string, b []byte) (switchConfig, error) {
	if err := exactLen(b, 4, what); err != nil {
		return switchConfig{}, err
	}
	return switchConfig{ConfigFlags(binary.BigEndian.Uint16(b[0:2])), binary.BigEndian.Uint16(b[2:4])}, nil
}

func appendSwitchConfig(b []byte, flags ConfigFlags, missSendLen uint16) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(flags))
	return binary.BigEndian.AppendUint16(b, missSendLen)
}

// GetConfigRequest is OFPT_GET_CONFIG_REQUEST (header only).
type GetConfigRequest struct{}

func (m *GetConfigRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeGetConfigRequest, b, nil
}

// GetConfigReply is OFPT_GET_CONFIG_REPLY.
type GetConfigReply struct {
	Flags ConfigFlags
	// MissSendLen is how many bytes of a packet a table-miss packet-in
	// carries. On an OVS service connection (the bridge's .mgmt socket) zero
	// also turns off every asynchronous message.
	MissSendLen uint16
}

func (m *GetConfigReply) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeGetConfigReply, appendSwitchConfig(b, m.Flags, m.MissSendLen), nil
}

// SetConfig is OFPT_SET_CONFIG. On an OVS service connection a non-zero
// MissSendLen is what turns on asynchronous messages (packet-ins included).
type SetConfig struct {
	Flags       ConfigFlags
	MissSendLen uint16
}

func (m *SetConfig) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeSetConfig, appendSwitchConfig(b, m.Flags, m.MissSendLen), nil
}

// -------------------------------------------------------------- BARRIER

// BarrierRequest is OFPT_BARRIER_REQUEST (header only). The switch answers
// after it has processed, and reported errors for, every earlier message.
type BarrierRequest struct{}

func (m *BarrierRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeBarrierRequest, b, nil
}

// BarrierReply is OFPT_BARRIER_REPLY (header only).
type BarrierReply struct{}

func (m *BarrierReply) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeBarrierReply, b, nil
}

// ----------------------------------------------------------------- ROLE

// ControllerRole is a controller role (OFPCR_ROLE_*).
type ControllerRole uint32

// Controller roles. OVS calls master and slave "primary" and "secondary".
const (
	RoleNoChange  ControllerRole = 0
	RoleEqual     ControllerRole = 1
	RolePrimary   ControllerRole = 2
	RoleSecondary ControllerRole = 3
)

// String returns the role as ovs-ofctl prints it.
func (r ControllerRole) String() string {
	switch r {
	case RoleNoChange:
		return "nochange"
	case RoleEqual:
		return "equal"
	case RolePrimary:
		return "primary"
	case RoleSecondary:
		return "secondary"
	}
	return fmt.Sprintf("role(%d)", uint32(r))
}

type roleBody struct {
	Role         ControllerRole
	GenerationID uint64
}

// Role body (16 bytes):
//
//	4 bytes: role
//	4 bytes: pad (OF1.5: short_id and pad, unused by OVS)
//	8 bytes: generation_id
func decodeRole(what string, b []byte) (roleBody, error) {
	if err := exactLen(b, 16, what); err != nil {
		return roleBody{}, err
	}
	return roleBody{ControllerRole(binary.BigEndian.Uint32(b[0:4])), binary.BigEndian.Uint64(b[8:16])}, nil
}

func appendRole(b []byte, r ControllerRole, gen uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(r))
	b = appendZeros(b, 4)
	return binary.BigEndian.AppendUint64(b, gen)
}

// RoleRequest is OFPT_ROLE_REQUEST. GenerationID matters only for the
// primary and secondary roles.
type RoleRequest struct {
	Role         ControllerRole
	GenerationID uint64
}

func (m *RoleRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeRoleRequest, appendRole(b, m.Role, m.GenerationID), nil
}

// RoleReply is OFPT_ROLE_REPLY.
type RoleReply struct {
	Role         ControllerRole
	GenerationID uint64
}

func (m *RoleReply) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeRoleReply, appendRole(b, m.Role, m.GenerationID), nil
}

// --------------------------------------------------------- ASYNC CONFIG

// Packet-in reasons, as bits of AsyncConfig.PacketIn masks (bit n enables
// reason n). OF1.3 knows the first three; OVS maps the others onto ACTION
// for OF1.3 connections.
const (
	PacketInReasonNoMatch    = 0 // OF1.4+: TABLE_MISS
	PacketInReasonAction     = 1 // OF1.4+: APPLY_ACTION
	PacketInReasonInvalidTTL = 2
	PacketInReasonActionSet  = 3 // OF1.4+
	PacketInReasonGroup      = 4 // OF1.4+
	PacketInReasonPacketOut  = 5 // OF1.4+
)

// Port-status reasons, as bits of AsyncConfig.PortStatus masks.
const (
	PortStatusReasonAdd    = 0
	PortStatusReasonDelete = 1
	PortStatusReasonModify = 2
)

// Flow-removed reasons, as bits of AsyncConfig.FlowRemoved masks.
const (
	FlowRemovedReasonIdleTimeout = 0
	FlowRemovedReasonHardTimeout = 1
	FlowRemovedReasonDelete      = 2
	FlowRemovedReasonGroupDelete = 3
	FlowRemovedReasonMeterDelete = 4 // OF1.4+
	FlowRemovedReasonEviction    = 5 // OF1.4+
)

// AsyncMasks are the reasons enabled for one kind of asynchronous message:
// Primary applies to connections in the equal and primary roles, Secondary
// to the secondary role. Bit n enables reason n.
type AsyncMasks struct {
	Primary   uint32
	Secondary uint32
}

// AsyncConfig selects which asynchronous messages a connection receives.
//
// OF1.3's OFPT_SET_ASYNC, OFPT_GET_ASYNC_REPLY and NXT_SET_ASYNC_CONFIG carry
// a fixed 24-byte body:
//
//	4 bytes: packet_in_mask[0] (equal/primary)
//	4 bytes: packet_in_mask[1] (secondary)
//	4 bytes: port_status_mask[0], 4 bytes: port_status_mask[1]
//	4 bytes: flow_removed_mask[0], 4 bytes: flow_removed_mask[1]
//
// OF1.4+ (and NXT_SET_ASYNC_CONFIG2) carry properties instead, each
//
//	2 bytes: type (even = secondary, odd = primary: 0/1 packet-in,
//	         2/3 port status, 4/5 flow removed, 6/7 role status,
//	         8/9 table status, 10/11 request forward)
//	2 bytes: length (8)
//	4 bytes: mask
//
// The property form can also set the role-status, table-status and
// request-forward masks; nil means "absent". Decoding ignores unknown
// property types; a property missing from the input decodes as a zero mask.
type AsyncConfig struct {
	PacketIn    AsyncMasks
	PortStatus  AsyncMasks
	FlowRemoved AsyncMasks

	RoleStatus     *AsyncMasks // property form only
	TableStatus    *AsyncMasks // property form only
	RequestForward *AsyncMasks // property form only
}

func decodeAsyncForVersion(what string, v Version, b []byte) (AsyncConfig, error) {
	if v >= Version14 {
		return decodeAsyncProps(what, b)
	}
	return decodeAsyncFixed(what, b)
}

func decodeAsyncFixed(what string, b []byte) (AsyncConfig, error) {
	if err := exactLen(b, 24, what); err != nil {
		return AsyncConfig{}, err
	}
	u := func(i int) uint32 { return binary.BigEndian.Uint32(b[4*i:]) }
	return AsyncConfig{
		PacketIn:    AsyncMasks{u(0), u(1)},
		PortStatus:  AsyncMasks{u(2), u(3)},
		FlowRemoved: AsyncMasks{u(4), u(5)},
	}, nil
}

// asyncPropSlot returns where property type t is stored, or nil for
// unknown types.
func (c *AsyncConfig) asyncPropSlot(t uint16) *uint32 {
	var m *AsyncMasks
	switch t / 2 {
	case 0:
		m = &c.PacketIn
	case 1:
		m = &c.PortStatus
	case 2:
		m = &c.FlowRemoved
	case 3:
		if c.RoleStatus == nil {
			c.RoleStatus = &AsyncMasks{}
		}
		m = c.RoleStatus
	case 4:
		if c.TableStatus == nil {
			c.TableStatus = &AsyncMasks{}
		}
		m = c.TableStatus
	case 5:
		if c.RequestForward == nil {
			c.RequestForward = &AsyncMasks{}
		}
		m = c.RequestForward
	default:
		return nil
	}
	if t%2 == 0 {
		return &m.Secondary
	}
	return &m.Primary
}

func decodeAsyncProps(what string, b []byte) (AsyncConfig, error) {
	var c AsyncConfig
	for i := 0; len(b) > 0; i++ {
		if err := need(b, 4, fmt.Sprintf("%s: property %d header", what, i)); err != nil {
			return AsyncConfig{}, err
		}
		t := binary.BigEndian.Uint16(b[0:2])
		n := int(binary.BigEndian.Uint16(b[2:4]))
		if n < 4 {
			return AsyncConfig{}, fmt.Errorf("%s: property %d (type %d): length %d: %w", what, i, t, n, ErrMalformed)
		}
		padded := n + pad8(n)
		if err := need(b, padded, fmt.Sprintf("%s: property %d (type %d)", what, i, t)); err != nil {
			return AsyncConfig{}, err
		}
		if t < 12 {
			if n != 8 {
				return AsyncConfig{}, fmt.Errorf("%s: property %d (type %d): length %d, want 8: %w", what, i, t, n, ErrMalformed)
			}
			*c.asyncPropSlot(t) = binary.BigEndian.Uint32(b[4:8])
		}
		b = b[padded:]
	}
	return c, nil
}

func (c *AsyncConfig) appendFixed(b []byte) ([]byte, error) {
	if c.RoleStatus != nil || c.TableStatus != nil || c.RequestForward != nil {
		return b, fmt.Errorf("async config: role status, table status and request forward masks need the property form (OF1.4+ or NXT_SET_ASYNC_CONFIG2): %w", ErrUnsupported)
	}
	for _, m := range []AsyncMasks{c.PacketIn, c.PortStatus, c.FlowRemoved} {
		b = binary.BigEndian.AppendUint32(b, m.Primary)
		b = binary.BigEndian.AppendUint32(b, m.Secondary)
	}
	return b, nil
}

func (c *AsyncConfig) appendProps(b []byte) []byte {
	all := []*AsyncMasks{&c.PacketIn, &c.PortStatus, &c.FlowRemoved, c.RoleStatus, c.TableStatus, c.RequestForward}
	for i, m := range all {
		if m == nil {
			continue
		}
		for j, mask := range []uint32{m.Secondary, m.Primary} {
			b = binary.BigEndian.AppendUint16(b, uint16(2*i+j))
			b = binary.BigEndian.AppendUint16(b, 8)
			b = binary.BigEndian.AppendUint32(b, mask)
		}
	}
	return b
}

func (c *AsyncConfig) appendForVersion(b []byte, v Version) ([]byte, error) {
	if v >= Version14 {
		return c.appendProps(b), nil
	}
	return c.appendFixed(b)
}

// GetAsyncRequest is OFPT_GET_ASYNC_REQUEST (header only).
type GetAsyncRequest struct{}

func (m *GetAsyncRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	return TypeGetAsyncRequest, b, nil
}

// GetAsyncReply is OFPT_GET_ASYNC_REPLY: fixed layout in OF1.3, properties
// in OF1.4+.
type GetAsyncReply struct {
	Config AsyncConfig
}

func (m *GetAsyncReply) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b, err := m.Config.appendForVersion(b, v)
	return TypeGetAsyncReply, b, err
}

// SetAsync is OFPT_SET_ASYNC: fixed layout in OF1.3, properties in OF1.4+.
// On an OVS service connection it also raises a zero miss_send_len to 128.
type SetAsync struct {
	Config AsyncConfig
}

func (m *SetAsync) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b, err := m.Config.appendForVersion(b, v)
	return TypeSetAsync, b, err
}

// NXSetAsyncConfig is NXT_SET_ASYNC_CONFIG (Nicira subtype 19): the OF1.3
// fixed layout in any version.
type NXSetAsyncConfig struct {
	Config AsyncConfig
}

func (m *NXSetAsyncConfig) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendExperimenterPrefix(b, ExperimenterNicira, nxtSetAsyncConfig)
	b, err := m.Config.appendFixed(b)
	return TypeExperimenter, b, err
}

// NXSetAsyncConfig2 is NXT_SET_ASYNC_CONFIG2 (Nicira subtype 27): the
// OF1.4 property layout in any version. Only the properties present change.
type NXSetAsyncConfig2 struct {
	Config AsyncConfig
}

func (m *NXSetAsyncConfig2) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendExperimenterPrefix(b, ExperimenterNicira, nxtSetAsyncConfig2)
	return TypeExperimenter, m.Config.appendProps(b), nil
}

// ------------------------------------------------- NICIRA SESSION SETUP

// PacketInFormat selects how OVS sends packet-ins on a connection.
type PacketInFormat uint32

// Packet-in formats for NXSetPacketInFormat.
const (
	PacketInFormatStandard PacketInFormat = 0 // OFPT_PACKET_IN
	PacketInFormatNXT      PacketInFormat = 1 // NXT_PACKET_IN
	PacketInFormatNXT2     PacketInFormat = 2 // NXT_PACKET_IN2: userdata, continuations
)

// NXSetPacketInFormat is NXT_SET_PACKET_IN_FORMAT (Nicira subtype 16).
//
// Body after the 16-byte experimenter header: 4 bytes: format.
type NXSetPacketInFormat struct {
	Format PacketInFormat
}

func decodeSetPacketInFormat(_ Header, b []byte) (Message, error) {
	if err := exactLen(b, 4, "nxt set packet-in format"); err != nil {
		return nil, err
	}
	return &NXSetPacketInFormat{Format: PacketInFormat(binary.BigEndian.Uint32(b))}, nil
}

func (m *NXSetPacketInFormat) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendExperimenterPrefix(b, ExperimenterNicira, nxtSetPacketInFormat)
	return TypeExperimenter, binary.BigEndian.AppendUint32(b, uint32(m.Format)), nil
}

// NXSetControllerID is NXT_SET_CONTROLLER_ID (Nicira subtype 20). A
// packet-in from a controller(id=N) action reaches only connections that set
// id N; every connection starts with id 0.
//
// Body after the 16-byte experimenter header:
//
//	6 bytes: zero
//	2 bytes: controller id
type NXSetControllerID struct {
	ID uint16
}

func decodeSetControllerID(_ Header, b []byte) (Message, error) {
	if err := exactLen(b, 8, "nxt set controller id"); err != nil {
		return nil, err
	}
	for i, c := range b[:6] {
		if c != 0 {
			return nil, fmt.Errorf("nxt set controller id: byte %d of the zero field is 0x%02x: %w", i, c, ErrMalformed)
		}
	}
	return &NXSetControllerID{ID: binary.BigEndian.Uint16(b[6:8])}, nil
}

func (m *NXSetControllerID) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendExperimenterPrefix(b, ExperimenterNicira, nxtSetControllerID)
	b = appendZeros(b, 6)
	return TypeExperimenter, binary.BigEndian.AppendUint16(b, m.ID), nil
}
