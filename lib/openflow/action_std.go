package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
)

// OpenFlow 1.3+ reserved port numbers (32-bit). Physical ports are
// 1..0xfeff with Open vSwitch.
const (
	PortMax        uint32 = 0xffffff00
	PortInPort     uint32 = 0xfffffff8 // back out of the ingress port
	PortTable      uint32 = 0xfffffff9 // through the flow tables (packet-out)
	PortNormal     uint32 = 0xfffffffa // the L2 learning switch
	PortFlood      uint32 = 0xfffffffb // all ports but ingress and no-flood ones
	PortAll        uint32 = 0xfffffffc // all ports but ingress
	PortController uint32 = 0xfffffffd // packet-in to the controller
	PortLocal      uint32 = 0xfffffffe // the bridge's internal port
	PortAny        uint32 = 0xffffffff // "no port" in requests; not an output
)

// ControllerMaxLenNoBuffer is the max_len that sends whole packets to the
// controller (OFPCML_NO_BUFFER).
const ControllerMaxLenNoBuffer uint16 = 0xffff

// Output is OFPAT_OUTPUT: send the packet to Port. MaxLen matters only for
// PortController (bytes of the packet to include; ovs-ofctl writes 0 for
// every other port).
//
//	2 bytes: type = 0
//	2 bytes: length = 16
//	4 bytes: port
//	2 bytes: max_len
//	6 bytes: pad
type Output struct {
	Port   uint32
	MaxLen uint16
}

// OutputPort returns an Output to port with max_len as ovs-ofctl writes it
// (65535 for PortController, 0 otherwise).
func OutputPort(port uint32) Output {
	if port == PortController {
		return Output{Port: port, MaxLen: ControllerMaxLenNoBuffer}
	}
	return Output{Port: port}
}

func (a Output) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginAction(b, atOutput)
	b = binary.BigEndian.AppendUint32(b, a.Port)
	b = binary.BigEndian.AppendUint16(b, a.MaxLen)
	return endAction(b, start)
}

// String renders e.g. "output:3", "IN_PORT", "LOCAL" or "CONTROLLER:65535".
func (a Output) String() string {
	if a.Port == PortController {
		return fmt.Sprintf("CONTROLLER:%d", a.MaxLen)
	}
	if s, ok := reservedPortName32(a.Port); ok {
		return s
	}
	return fmt.Sprintf("output:%d", a.Port)
}

func decodeOutput(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 16); err != nil {
		return nil, err
	}
	return Output{Port: binary.BigEndian.Uint32(b[4:8]), MaxLen: binary.BigEndian.Uint16(b[8:10])}, nil
}

// Group is OFPAT_GROUP: process the packet through group ID.
//
//	2 bytes: type = 22
//	2 bytes: length = 8
//	4 bytes: group id
type Group struct {
	ID uint32
}

func (a Group) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginAction(b, atGroup)
	b = binary.BigEndian.AppendUint32(b, a.ID)
	return endAction(b, start)
}

// String renders "group:ID".
func (a Group) String() string { return fmt.Sprintf("group:%d", a.ID) }

func decodeGroup(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 8); err != nil {
		return nil, err
	}
	return Group{ID: binary.BigEndian.Uint32(b[4:8])}, nil
}

// SetQueue is OFPAT_SET_QUEUE.
//
//	2 bytes: type = 21
//	2 bytes: length = 8
//	4 bytes: queue id
type SetQueue struct {
	ID uint32
}

func (a SetQueue) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginAction(b, atSetQueue)
	b = binary.BigEndian.AppendUint32(b, a.ID)
	return endAction(b, start)
}

// String renders "set_queue:ID".
func (a SetQueue) String() string { return fmt.Sprintf("set_queue:%d", a.ID) }

func decodeSetQueue(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 8); err != nil {
		return nil, err
	}
	return SetQueue{ID: binary.BigEndian.Uint32(b[4:8])}, nil
}

// PushVLAN is OFPAT_PUSH_VLAN with EtherType 0x8100 or 0x88a8.
//
//	2 bytes: type = 17
//	2 bytes: length = 8
//	2 bytes: ethertype
//	2 bytes: pad
type PushVLAN struct {
	EtherType uint16
}

func (a PushVLAN) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginAction(b, atPushVLAN)
	b = binary.BigEndian.AppendUint16(b, a.EtherType)
	return endAction(b, start)
}

// String renders e.g. "push_vlan:0x8100".
func (a PushVLAN) String() string { return fmt.Sprintf("push_vlan:0x%x", a.EtherType) }

func decodePushVLAN(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 8); err != nil {
		return nil, err
	}
	return PushVLAN{EtherType: binary.BigEndian.Uint16(b[4:6])}, nil
}

// PopVLAN is OFPAT_POP_VLAN (ovs-ofctl's strip_vlan).
//
//	2 bytes: type = 18
//	2 bytes: length = 8
//	4 bytes: pad
type PopVLAN struct{}

func (a PopVLAN) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginAction(b, atPopVLAN)
	return endAction(b, start)
}

// String renders "pop_vlan".
func (a PopVLAN) String() string { return "pop_vlan" }

func decodePopVLAN(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 8); err != nil {
		return nil, err
	}
	return PopVLAN{}, nil
}

// DecTTL is OFPAT_DEC_NW_TTL: decrement the IPv4 TTL or IPv6 hop limit. The
// flow must match IPv4 or IPv6.
//
//	2 bytes: type = 24
//	2 bytes: length = 8
//	4 bytes: pad
type DecTTL struct{}

func (a DecTTL) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginAction(b, atDecNwTTL)
	return endAction(b, start)
}

// String renders "dec_ttl".
func (a DecTTL) String() string { return "dec_ttl" }

func decodeDecTTL(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 8); err != nil {
		return nil, err
	}
	return DecTTL{}, nil
}

// Meter sends the packet through meter ID. It is both an Instruction and an
// Action: in OF1.3 it encodes as the OFPIT_METER instruction; OF1.5 has no
// meter instruction and uses the OFPAT_METER action instead, which this
// package places at the head of apply_actions. As an action inside an action
// list it exists only in OF1.5.
//
//	OF1.5 action:          OF1.3 instruction:
//	2 bytes: type = 29     2 bytes: type = 6
//	2 bytes: length = 8    2 bytes: length = 8
//	4 bytes: meter id      4 bytes: meter id
type Meter struct {
	ID uint32
}

func (a Meter) appendAction(b []byte, v Version) ([]byte, error) {
	if v < Version15 {
		return b, fmt.Errorf("meter action needs OpenFlow 1.5 (use the meter instruction): %w", ErrUnsupported)
	}
	b, start := beginAction(b, atMeter)
	b = binary.BigEndian.AppendUint32(b, a.ID)
	return endAction(b, start)
}

// String renders "meter:ID".
func (a Meter) String() string { return fmt.Sprintf("meter:%d", a.ID) }

func decodeMeter(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 8); err != nil {
		return nil, err
	}
	return Meter{ID: binary.BigEndian.Uint32(b[4:8])}, nil
}

// SetField is OFPAT_SET_FIELD: write Field's value into the packet field.
//
// A Field without Mask writes the whole field. A masked write is encoded as
// Open vSwitch does: in OF1.5 as a set_field with a masked OXM; before OF1.5
// (whose set_field has no mask) as one NXAST_REG_LOAD per contiguous run of
// mask bits, at most 64 bits each, or as one NXAST_REG_LOAD2 for
// experimenter and variable-length fields.
//
//	2 bytes: type = 25
//	2 bytes: length
//	N bytes: OXM TLV (4- or 8-byte header, value[, mask])
//	0-7 bytes: zero padding to a multiple of 8
type SetField struct {
	Field Field
}

func (a SetField) appendAction(b []byte, v Version) ([]byte, error) {
	f := a.Field
	info := actLookup(f.Class, f.Field, f.Experimenter)
	if err := checkSetFieldValue(f, info); err != nil {
		return b, err
	}
	if f.Mask != nil && allOnes(f.Mask) {
		f.Mask = nil
	}
	if f.Mask == nil || v >= Version15 {
		if info != nil {
			id := oxmIDFor(info, v)
			f.Class, f.Field, f.Experimenter = id.Class, id.Field, id.Experimenter
		}
		b, start := beginAction(b, atSetField)
		b = actAppendOXM(b, f)
		return endAction(b, start)
	}
	if f.Class == 0xffff || isVariableLenField(f.Class, f.Field) || allZero(f.Mask) {
		return appendRegLoad2(b, f)
	}
	return appendRegLoadRuns(b, f)
}

// String renders e.g. "set_field:10.0.0.1->ip_dst" or
// "set_field:0x9/0x9->reg0".
func (a SetField) String() string {
	return "set_field:" + fieldValueText(a.Field) + "->" + fieldOVSName(a.Field.Class, a.Field.Field, a.Field.Experimenter)
}

func decodeSetField(b []byte, v Version) (Action, error) {
	f, n, err := actPullOXM(b[4:])
	if err != nil {
		return nil, err
	}
	if f.Mask != nil && v < Version15 {
		return nil, fmt.Errorf("masked field %s needs OpenFlow 1.5: %w", fieldOVSName(f.Class, f.Field, f.Experimenter), ErrMalformed)
	}
	if err := checkDecodedSetField(&f); err != nil {
		return nil, err
	}
	if 4+n+pad8(4+n) != len(b) {
		return nil, fmt.Errorf("length %d, want %d for a %d-byte field: %w", len(b), 4+n+pad8(4+n), n, ErrMalformed)
	}
	return SetField{Field: setFieldCanonical(f)}, nil
}

// checkDecodedSetField validates the field of a decoded set_field or
// REG_LOAD2: the registry's width, no value bits outside the mask. An
// all-ones mask is dropped, as Open vSwitch does.
func checkDecodedSetField(f *Field) error {
	if f.Mask != nil && allOnes(f.Mask) {
		f.Mask = nil
	}
	if info := actLookup(f.Class, f.Field, f.Experimenter); info != nil && info.Bytes != len(f.Value) {
		return fmt.Errorf("field %s: %d-byte value, want %d: %w", info.Name, len(f.Value), info.Bytes, ErrMalformed)
	}
	for i := range f.Mask {
		if f.Value[i]&^f.Mask[i] != 0 {
			return fmt.Errorf("field %s: value %x has bits outside mask %x: %w",
				fieldOVSName(f.Class, f.Field, f.Experimenter), f.Value, f.Mask, ErrMalformed)
		}
	}
	return nil
}

// checkSetFieldValue checks a field to be written; info is its registry
// entry or nil.
func checkSetFieldValue(f Field, info *FieldInfo) error {
	if err := f.Err(); err != nil {
		return err
	}
	if len(f.Value) == 0 {
		return fmt.Errorf("field %s: empty value: %w", fieldOVSName(f.Class, f.Field, f.Experimenter), ErrMalformed)
	}
	if f.Mask != nil && len(f.Mask) != len(f.Value) {
		return fmt.Errorf("field %s: %d-byte value with %d-byte mask: %w", fieldOVSName(f.Class, f.Field, f.Experimenter), len(f.Value), len(f.Mask), ErrMalformed)
	}
	if f.Field > 0x7f {
		return fmt.Errorf("field number %d: %w", f.Field, ErrMalformed)
	}
	if info != nil && info.Bytes != len(f.Value) {
		return fmt.Errorf("field %s: %d-byte value, want %d: %w", info.Name, len(f.Value), info.Bytes, ErrMalformed)
	}
	n := 2 * len(f.Value)
	if f.Mask == nil {
		n = len(f.Value)
	}
	if f.Class == 0xffff {
		n += 4
	}
	if n > 255 {
		return fmt.Errorf("field %s: %d-byte OXM payload: %w", fieldOVSName(f.Class, f.Field, f.Experimenter), n, ErrMalformed)
	}
	return nil
}

// actAppendOXM appends one OXM TLV: the 32-bit header (class, field,
// has-mask, payload length), the experimenter id for class 0xffff, the value
// (with bits outside the mask cleared, which Open vSwitch insists on) and the
// mask if any.
func actAppendOXM(b []byte, f Field) []byte {
	n := len(f.Value)
	hm := uint32(0)
	if f.Mask != nil {
		n += len(f.Mask)
		hm = 0x100
	}
	if f.Class == 0xffff {
		n += 4
	}
	b = binary.BigEndian.AppendUint32(b, uint32(f.Class)<<16|uint32(f.Field&0x7f)<<9|hm|uint32(n&0xff))
	if f.Class == 0xffff {
		b = binary.BigEndian.AppendUint32(b, f.Experimenter)
	}
	if f.Mask == nil {
		return append(b, f.Value...)
	}
	for i, c := range f.Value {
		b = append(b, c&f.Mask[i])
	}
	return append(b, f.Mask...)
}

// appendBitsOXM appends an OXM TLV for header id of a width-byte field that
// sets bits ofs..ofs+nbits-1 to val: masked unless those are all the bits.
func appendBitsOXM(b []byte, id FieldID, width, ofs, nbits int, val uint64) []byte {
	masked := ofs != 0 || nbits != 8*width
	n := width
	hm := uint32(0)
	if masked {
		n, hm = 2*width, 0x100
	}
	if id.Class == 0xffff {
		n += 4
	}
	b = binary.BigEndian.AppendUint32(b, uint32(id.Class)<<16|uint32(id.Field&0x7f)<<9|hm|uint32(n&0xff))
	if id.Class == 0xffff {
		b = binary.BigEndian.AppendUint32(b, id.Experimenter)
	}
	// byteBits returns the value and mask bits of byte j (0 = most
	// significant).
	byteBits := func(j int) (value, mask byte) {
		lo := (width - 1 - j) * 8
		for k := 0; k < 8; k++ {
			p := lo + k
			if p >= ofs && p < ofs+nbits {
				mask |= 1 << k
				if val>>uint(p-ofs)&1 != 0 {
					value |= 1 << k
				}
			}
		}
		return value, mask
	}
	for j := 0; j < width; j++ {
		v, _ := byteBits(j)
		b = append(b, v)
	}
	if masked {
		for j := 0; j < width; j++ {
			_, m := byteBits(j)
			b = append(b, m)
		}
	}
	return b
}

// actPullOXM decodes one OXM TLV at the start of b and returns it (copied)
// with its encoded length.
func actPullOXM(b []byte) (Field, int, error) {
	if len(b) < 4 {
		return Field{}, 0, fmt.Errorf("oxm header: need 4 bytes, have %d: %w", len(b), io.ErrUnexpectedEOF)
	}
	h := binary.BigEndian.Uint32(b)
	f := Field{Class: uint16(h >> 16), Field: uint8(h>>9) & 0x7f}
	n := int(h & 0xff)
	hdr := 4
	if f.Class == 0xffff {
		if len(b) < 8 {
			return Field{}, 0, fmt.Errorf("oxm 0x%08x: experimenter id: %w", h, io.ErrUnexpectedEOF)
		}
		f.Experimenter = binary.BigEndian.Uint32(b[4:8])
		if n < 4 {
			return Field{}, 0, fmt.Errorf("oxm 0x%08x: length %d leaves no room for the experimenter id: %w", h, n, ErrMalformed)
		}
		hdr, n = 8, n-4
	}
	if len(b) < hdr+n {
		return Field{}, 0, fmt.Errorf("oxm 0x%08x: need %d bytes, have %d: %w", h, hdr+n, len(b), io.ErrUnexpectedEOF)
	}
	p := b[hdr : hdr+n]
	if h&0x100 != 0 {
		if n == 0 || n%2 != 0 {
			return Field{}, 0, fmt.Errorf("oxm 0x%08x: masked payload of %d bytes: %w", h, n, ErrMalformed)
		}
		f.Value = append([]byte(nil), p[:n/2]...)
		f.Mask = append([]byte(nil), p[n/2:]...)
	} else {
		if n == 0 {
			return Field{}, 0, fmt.Errorf("oxm 0x%08x: empty value: %w", h, ErrMalformed)
		}
		f.Value = append([]byte(nil), p...)
	}
	return f, hdr + n, nil
}

// fixedLen checks the length of a fixed-size action.
func fixedLen(b []byte, n int) error {
	if len(b) != n {
		return fmt.Errorf("length %d, want %d: %w", len(b), n, ErrMalformed)
	}
	return nil
}

func allOnes(b []byte) bool {
	for _, c := range b {
		if c != 0xff {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func init() {
	stdDecoders[atOutput] = decodeOutput
	stdDecoders[atGroup] = decodeGroup
	stdDecoders[atSetQueue] = decodeSetQueue
	stdDecoders[atPushVLAN] = decodePushVLAN
	stdDecoders[atPopVLAN] = decodePopVLAN
	stdDecoders[atDecNwTTL] = decodeDecTTL
	stdDecoders[atSetField] = decodeSetField
	stdDecoders[atCopyField] = decodeCopyField
	stdDecoders[atMeter] = decodeMeter
}
