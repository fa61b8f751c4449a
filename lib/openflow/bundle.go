package openflow

import (
	"encoding/binary"
	"fmt"
)

// ONF experimenter subtypes of the OF1.3 bundle extension (EXT-230).
const (
	onftBundleControl    uint32 = 2300
	onftBundleAddMessage uint32 = 2301
)

func init() {
	registerType(TypeBundleControl, bundleForm(true, decodeBundleControl))
	registerExperimenter(ExperimenterONF, onftBundleControl, bundleForm(false, decodeBundleControl))
	registerType(TypeBundleAddMessage, bundleForm(true, decodeBundleAdd))
	registerExperimenter(ExperimenterONF, onftBundleAddMessage, bundleForm(false, decodeBundleAdd))
}

// bundleForm accepts, as OVS does, the standard message types (33, 34) only
// in OF1.4+ and the ONF experimenter form only before OF1.4.
func bundleForm(standard bool, fn decodeFunc) decodeFunc {
	return func(h Header, b []byte) (Message, error) {
		if standard && h.Version < Version14 {
			return nil, fmt.Errorf("bundle message type %d needs OF1.4 or later, not %s: %w", h.Type, h.Version, ErrMalformed)
		}
		if !standard && h.Version >= Version14 {
			return nil, fmt.Errorf("onf bundle extension in %s, which has bundle message types 33 and 34: %w", h.Version, ErrMalformed)
		}
		return fn(h, b)
	}
}

// BundleCtrlType is the type of a bundle control message.
type BundleCtrlType uint16

// Bundle control types. Requests are even, their replies odd.
const (
	BundleOpenRequest    BundleCtrlType = 0
	BundleOpenReply      BundleCtrlType = 1
	BundleCloseRequest   BundleCtrlType = 2
	BundleCloseReply     BundleCtrlType = 3
	BundleCommitRequest  BundleCtrlType = 4
	BundleCommitReply    BundleCtrlType = 5
	BundleDiscardRequest BundleCtrlType = 6
	BundleDiscardReply   BundleCtrlType = 7
)

// String returns the type as ovs-ofctl prints it, e.g. "OPEN_REQUEST".
func (t BundleCtrlType) String() string {
	names := [...]string{"OPEN_REQUEST", "OPEN_REPLY", "CLOSE_REQUEST", "CLOSE_REPLY",
		"COMMIT_REQUEST", "COMMIT_REPLY", "DISCARD_REQUEST", "DISCARD_REPLY"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("bundle_ctrl_type(%d)", uint16(t))
}

// BundleFlags are the flags of a bundle. Every message of a bundle must
// carry the flags of its first message, or OVS discards the bundle.
type BundleFlags uint16

// Bundle flags.
const (
	// BundleAtomic applies all of the bundle or nothing.
	BundleAtomic BundleFlags = 1 << 0
	// BundleOrdered applies the messages in the order they were added.
	BundleOrdered BundleFlags = 1 << 1
)

// BundleControl is a bundle control message: OFPT_BUNDLE_CONTROL (type 33)
// in OF1.4+, the ONF experimenter message 2300 in OF1.3. Marshal picks the
// encoding by version.
//
// Body (after the header, or after the 16-byte experimenter header):
//
//	4 bytes: bundle_id
//	2 bytes: type (BundleCtrlType)
//	2 bytes: flags (BundleFlags)
//	rest:    properties (OVS sends none)
//
// The decoded Properties are a copy of the input.
type BundleControl struct {
	BundleID   uint32
	Type       BundleCtrlType
	Flags      BundleFlags
	Properties []byte
}

func decodeBundleControl(_ Header, b []byte) (Message, error) {
	if err := need(b, 8, "bundle control"); err != nil {
		return nil, err
	}
	return &BundleControl{
		BundleID:   binary.BigEndian.Uint32(b[0:4]),
		Type:       BundleCtrlType(binary.BigEndian.Uint16(b[4:6])),
		Flags:      BundleFlags(binary.BigEndian.Uint16(b[6:8])),
		Properties: clone(b[8:]),
	}, nil
}

func (m *BundleControl) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	t := TypeBundleControl
	if v < Version14 {
		t = TypeExperimenter
		b = appendExperimenterPrefix(b, ExperimenterONF, onftBundleControl)
	}
	b = binary.BigEndian.AppendUint32(b, m.BundleID)
	b = binary.BigEndian.AppendUint16(b, uint16(m.Type))
	b = binary.BigEndian.AppendUint16(b, uint16(m.Flags))
	return t, append(b, m.Properties...), nil
}

// BundleAdd adds one message to a bundle: OFPT_BUNDLE_ADD_MESSAGE (type 34)
// in OF1.4+, the ONF experimenter message 2301 in OF1.3. OVS accepts flow
// mods, group mods, port mods and packet-outs inside bundles.
//
// Body (after the header, or after the 16-byte experimenter header):
//
//	4 bytes: bundle_id
//	2 bytes: pad
//	2 bytes: flags (BundleFlags)
//	n bytes: the inner message, with its own 8-byte header: the same version
//	         as the outer message and the same xid
//	only when properties follow: zero padding to a multiple of 8, properties
//
// Xid is the inner message's xid. The switch requires it to equal the outer
// message's xid, so set it to the xid you Marshal the BundleAdd with.
type BundleAdd struct {
	BundleID   uint32
	Flags      BundleFlags
	Xid        uint32
	Message    Message
	Properties []byte
}

func decodeBundleAdd(h Header, b []byte) (Message, error) {
	if err := need(b, 8+HeaderLen, "bundle add"); err != nil {
		return nil, err
	}
	m := &BundleAdd{
		BundleID: binary.BigEndian.Uint32(b[0:4]),
		Flags:    BundleFlags(binary.BigEndian.Uint16(b[6:8])),
	}
	inner := b[8:]
	var ih Header
	if err := ih.UnmarshalBinary(inner); err != nil {
		return nil, fmt.Errorf("bundle add: inner message: %w", err)
	}
	if ih.Version != h.Version {
		return nil, fmt.Errorf("bundle add: inner message version %s, outer %s: %w", ih.Version, h.Version, ErrMalformed)
	}
	n := int(ih.Length)
	if err := need(inner, n, "bundle add: inner message"); err != nil {
		return nil, err
	}
	_, msg, err := Unmarshal(inner[:n])
	if err != nil {
		return nil, fmt.Errorf("bundle add: inner message: %w", err)
	}
	m.Xid = ih.Xid
	m.Message = msg
	rest := inner[n:]
	if len(rest) > 0 {
		p := pad8(8 + n)
		if len(rest) < p {
			return nil, fmt.Errorf("bundle add: %d bytes after the inner message, want %d padding bytes before properties: %w", len(rest), p, ErrMalformed)
		}
		for i, c := range rest[:p] {
			if c != 0 {
				return nil, fmt.Errorf("bundle add: padding byte %d is 0x%02x: %w", i, c, ErrMalformed)
			}
		}
		m.Properties = clone(rest[p:])
	}
	return m, nil
}

func (m *BundleAdd) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if m.Message == nil {
		return TypeBundleAddMessage, b, fmt.Errorf("bundle add: no inner message: %w", ErrMalformed)
	}
	t := TypeBundleAddMessage
	if v < Version14 {
		t = TypeExperimenter
		b = appendExperimenterPrefix(b, ExperimenterONF, onftBundleAddMessage)
	}
	start := len(b)
	b = binary.BigEndian.AppendUint32(b, m.BundleID)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(m.Flags))
	b, err := AppendMessage(b, v, m.Xid, m.Message)
	if err != nil {
		return t, b, fmt.Errorf("bundle add: %w", err)
	}
	if len(m.Properties) > 0 {
		b = appendZeros(b, pad8(len(b)-start))
		b = append(b, m.Properties...)
	}
	return t, b, nil
}
