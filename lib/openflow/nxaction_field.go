package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// FieldRef names a bit range of a field: the source or destination of move,
// load and output_reg, the register that holds a ct zone, a multipath result,
// or a field of a learn spec.
//
// The field is identified the way it is on the wire, by its NXM/OXM class,
// field number and (for class 0xffff) experimenter id. Len is the field's
// width in bytes as written in the header's length byte (without the 4-byte
// experimenter id). Bit 0 is the field's least significant bit.
//
// ovs-ofctl writes a FieldRef as NAME[] for the whole field, NAME[ofs] for one
// bit and NAME[ofs..end] otherwise, e.g. NXM_NX_REG0[0..15].
type FieldRef struct {
	Class        uint16
	Field        uint8
	Experimenter uint32 // only for class 0xffff
	Len          int    // field width in bytes
	Ofs          int    // first bit
	NBits        int    // number of bits, at least 1
}

// Whole returns a FieldRef for all bits of the same field.
func (r FieldRef) Whole() FieldRef {
	r.Ofs, r.NBits = 0, fieldRefBits(r)
	return r
}

// Bits returns a FieldRef for bits ofs..ofs+nbits-1 of the same field.
func (r FieldRef) Bits(ofs, nbits int) FieldRef {
	r.Ofs, r.NBits = ofs, nbits
	return r
}

// sameField reports whether r and o name the same field (bit ranges aside).
func (r FieldRef) sameField(o FieldRef) bool {
	return r.Class == o.Class && r.Field == o.Field && r.Experimenter == o.Experimenter && r.Len == o.Len
}

// header returns the 32-bit NXM/OXM header (has-mask clear).
func (r FieldRef) header() uint32 {
	n := r.Len
	if r.Class == 0xffff {
		n += 4
	}
	return uint32(r.Class)<<16 | uint32(r.Field&0x7f)<<9 | uint32(n&0xff)
}

// check validates the field width and the bit range.
func (r FieldRef) check() error {
	if r.Len <= 0 || r.Len > 255 || (r.Class == 0xffff && r.Len > 251) {
		return fmt.Errorf("field %s: width %d bytes: %w", r.fieldName(), r.Len, ErrMalformed)
	}
	if r.Field > 0x7f {
		return fmt.Errorf("field %s: field number %d: %w", r.fieldName(), r.Field, ErrMalformed)
	}
	if info := r.fieldInfo(); info != nil && info.Bytes != r.Len {
		return fmt.Errorf("field %s: width %d bytes, want %d: %w", r.fieldName(), r.Len, info.Bytes, ErrMalformed)
	}
	if r.NBits < 1 || r.Ofs < 0 || r.Ofs+r.NBits > fieldRefBits(r) {
		return fmt.Errorf("field %s: bits %d..%d outside the %d-bit field: %w",
			r.fieldName(), r.Ofs, r.Ofs+r.NBits-1, fieldRefBits(r), ErrMalformed)
	}
	return nil
}

// appendHeader appends the field's header (4 bytes, or 8 for experimenter
// fields: header then experimenter id).
func (r FieldRef) appendHeader(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, r.header())
	if r.Class == 0xffff {
		b = binary.BigEndian.AppendUint32(b, r.Experimenter)
	}
	return b
}

// pullFieldHeader decodes a field header at the start of b (4 bytes, or 8 for
// class 0xffff) and returns the field with Ofs and NBits zero, and the number
// of bytes used. A header with the has-mask bit is malformed.
func pullFieldHeader(b []byte, what string) (FieldRef, int, error) {
	if len(b) < 4 {
		return FieldRef{}, 0, fmt.Errorf("%s: field header: %w", what, io.ErrUnexpectedEOF)
	}
	h := binary.BigEndian.Uint32(b)
	r := FieldRef{Class: uint16(h >> 16), Field: uint8(h>>9) & 0x7f, Len: int(h & 0xff)}
	n := 4
	if r.Class == 0xffff {
		if len(b) < 8 {
			return FieldRef{}, 0, fmt.Errorf("%s: experimenter field header: %w", what, io.ErrUnexpectedEOF)
		}
		r.Experimenter = binary.BigEndian.Uint32(b[4:8])
		r.Len -= 4
		n = 8
	}
	if h&0x100 != 0 {
		return FieldRef{}, 0, fmt.Errorf("%s: field header 0x%08x has a mask: %w", what, h, ErrMalformed)
	}
	if r.Len <= 0 {
		return FieldRef{}, 0, fmt.Errorf("%s: field header 0x%08x: zero width: %w", what, h, ErrMalformed)
	}
	return r, n, nil
}

// ofsNbits packs a bit range as (ofs << 6) | (n_bits - 1).
func ofsNbits(ofs, nbits int) uint16 { return uint16(ofs)<<6 | uint16(nbits-1) }

// unpackOfsNbits splits an ofs_nbits value.
func unpackOfsNbits(v uint16) (ofs, nbits int) { return int(v >> 6), int(v&0x3f) + 1 }

// checkOfsNbits validates a range that must fit into ofs_nbits (and 64 bits).
func (r FieldRef) checkOfsNbits() error {
	if err := r.check(); err != nil {
		return err
	}
	if r.NBits > 64 || r.Ofs > 0x3ff {
		return fmt.Errorf("field %s: bits %d..%d do not fit ofs_nbits: %w", r.fieldName(), r.Ofs, r.Ofs+r.NBits-1, ErrUnsupported)
	}
	return nil
}

// actFields maps a header's identity (class, field, experimenter packed in a
// uint64, which hashes faster than a struct) to its registry entry. It is
// built on first use from RegisteredFields().
var (
	actFieldsOnce sync.Once
	actFields     map[uint64]*FieldInfo
)

func actFieldKey(class uint16, field uint8, experimenter uint32) uint64 {
	if class != ClassExperimenter {
		experimenter = 0
	}
	return uint64(class)<<48 | uint64(experimenter)<<8 | uint64(field)
}

// actLookup returns the registry entry of the field carried by a header, or
// nil.
func actLookup(class uint16, field uint8, experimenter uint32) *FieldInfo {
	actFieldsOnce.Do(func() {
		actFields = map[uint64]*FieldInfo{}
		for _, info := range RegisteredFields() {
			p := &info
			for _, h := range info.Headers {
				actFields[actFieldKey(h.Class, h.Field, h.Experimenter)] = p
			}
		}
	})
	return actFields[actFieldKey(class, field, experimenter)]
}

// fieldInfo returns the registry entry for the field r names, or nil.
func (r FieldRef) fieldInfo() *FieldInfo {
	return actLookup(r.Class, r.Field, r.Experimenter)
}

// knownInfo returns r's registry entry when r's width agrees with it.
func (r FieldRef) knownInfo() *FieldInfo {
	if info := r.fieldInfo(); info != nil && info.Bytes == r.Len {
		return info
	}
	return nil
}

// fieldRefBits returns the width of r's field in bits: the registry's
// significant bits (vlan_tci 16, tcp_flags 12, ...) or 8 bits per byte for a
// field the registry does not know.
func fieldRefBits(r FieldRef) int {
	if info := r.knownInfo(); info != nil {
		return info.Bits
	}
	return 8 * r.Len
}

// fieldName returns the name ovs-ofctl prints for r's field in subfield
// syntax, e.g. NXM_NX_REG0 or OXM_OF_METADATA.
func (r FieldRef) fieldName() string {
	if info := r.fieldInfo(); info != nil && info.NXMName != "" {
		return info.NXMName
	}
	return unknownFieldName(r.Class, r.Field, r.Experimenter)
}

// unknownFieldName names a field the registry does not know by its header.
func unknownFieldName(class uint16, field uint8, experimenter uint32) string {
	if class == 0xffff {
		return fmt.Sprintf("field_0x%x_0x%x_%d", class, experimenter, field)
	}
	return fmt.Sprintf("field_0x%x_%d", class, field)
}

// withID returns r carried by the header id (the field's width comes from the
// registry entry info).
func (r FieldRef) withID(id FieldID, info *FieldInfo) FieldRef {
	r.Class, r.Field, r.Experimenter, r.Len = id.Class, id.Field, id.Experimenter, info.Bytes
	if id.Class != 0xffff {
		r.Experimenter = 0
	}
	return r
}

// canonical returns r under its field's preferred header (the one
// FieldByName gives), so that a field decodes to the same FieldRef whichever
// of its headers carried it. Fields the registry does not know are unchanged.
func (r FieldRef) canonical() FieldRef {
	if info := r.knownInfo(); info != nil {
		return r.withID(info.ID(), info)
	}
	return r
}

// setFieldCanonical is canonical for a set_field's field.
func setFieldCanonical(f Field) Field {
	if info := actLookup(f.Class, f.Field, f.Experimenter); info != nil && info.Bytes == len(f.Value) {
		f.Class, f.Field, f.Experimenter = info.Class, info.Field, info.Experimenter
	}
	return f
}

// nxHeaderFor returns r under the header Open vSwitch writes inside Nicira
// actions (the NXM one when the field has one). Fields the registry does not
// know keep their header.
func nxHeaderFor(r FieldRef) FieldRef {
	if info := r.knownInfo(); info != nil {
		return r.withID(info.NXM, info)
	}
	return r
}

// oxmIDFor returns the header Open vSwitch writes for info in standard
// actions (set_field, copy_field) of version v: the OpenFlow-basic header if
// the field has one valid in v, else the field's preferred header.
func oxmIDFor(info *FieldInfo, v Version) FieldID {
	if v >= Version15 {
		for _, h := range info.Headers {
			if h.Class == ClassOpenFlowBasic {
				return h
			}
		}
	}
	return info.ID()
}

// oxmHeaderFor returns r under the header oxmIDFor picks.
func oxmHeaderFor(r FieldRef, v Version) FieldRef {
	if info := r.knownInfo(); info != nil {
		return r.withID(oxmIDFor(info, v), info)
	}
	return r
}

// isVariableLenField reports the tun_metadata0..63 fields (NXM_1 40..103),
// whose width varies; Open vSwitch writes them with REG_LOAD2.
func isVariableLenField(class uint16, field uint8) bool {
	return class == ClassNXM1 && field >= 40 && field <= 103
}

// fieldOVSName returns Open vSwitch's name of a field, as set_field prints
// it ("ip_dst", "reg0").
func fieldOVSName(class uint16, field uint8, experimenter uint32) string {
	if info := actLookup(class, field, experimenter); info != nil {
		return info.Name
	}
	return unknownFieldName(class, field, experimenter)
}

// ParseFieldRef parses ovs-ofctl's subfield syntax: NAME or NAME[] (the
// whole field), NAME[BIT] (one bit) or NAME[START..END] (inclusive), where
// NAME is any name FieldByName knows ("reg0", "NXM_NX_REG0", "eth_src").
func ParseFieldRef(s string) (FieldRef, error) {
	name, rng, hasRange := strings.Cut(s, "[")
	info, ok := FieldByName(name)
	if !ok {
		return FieldRef{}, fmt.Errorf("openflow: field reference %q: unknown field %q", s, name)
	}
	r := FieldRef{Class: info.Class, Field: info.Field, Experimenter: info.Experimenter, Len: info.Bytes, NBits: info.Bits}
	if hasRange {
		rng, ok = strings.CutSuffix(rng, "]")
		if !ok {
			return FieldRef{}, fmt.Errorf("openflow: field reference %q: missing ]", s)
		}
		if rng != "" {
			lo, hi, isRange := strings.Cut(rng, "..")
			a, err1 := strconv.Atoi(lo)
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || b < a {
				return FieldRef{}, fmt.Errorf("openflow: field reference %q: bad bit range %q", s, rng)
			}
			r.Ofs, r.NBits = a, b-a+1
		}
	}
	if err := r.check(); err != nil {
		return FieldRef{}, fmt.Errorf("openflow: field reference %q: %w", s, err)
	}
	return r, nil
}

// MustParseFieldRef is ParseFieldRef for references fixed in the program; it
// panics on error.
func MustParseFieldRef(s string) FieldRef {
	r, err := ParseFieldRef(s)
	if err != nil {
		panic(err)
	}
	return r
}
