package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
)

// OXM TLV layout (OpenFlow 1.3 section 7.2.3.2):
//
//	2 bytes: oxm_class
//	7 bits:  oxm_field
//	1 bit:   oxm_hasmask
//	1 byte:  oxm_length, the payload length in bytes
//	4 bytes: experimenter id (class 0xffff only; counted in oxm_length)
//	N bytes: value
//	N bytes: mask (oxm_hasmask only)
//
// ofp_match of type OXM:
//
//	2 bytes: type, 1 (OFPMT_OXM)
//	2 bytes: length of type, length and the TLVs, padding excluded
//	TLVs
//	0-7 zero bytes padding the match to a multiple of 8

const (
	mfOXMHeaderLen  = 4
	mfMatchTypeOXM  = 1
	mfMatchFixedLen = 4
)

// mfEncodeOrder is the order Open vSwitch's encoder writes fields in, which
// also puts every prerequisite (eth_type, ip_proto, vlan_vid, ct_state)
// before the fields that need it. Register overlays sit with their first
// register.
var mfEncodeOrder = func() []mfID {
	ids := []mfID{
		mfPacketType, mfDpHash, mfRecircID, mfConjID, mfInPort, mfInPortOXM, mfActsetOutput,
		mfEthSrc, mfEthDst, mfEthType, mfVlanTCI, mfVlanVID, mfVlanPCP,
		mfMPLSTC, mfMPLSBOS, mfMPLSTTL, mfMPLSLabel,
		mfIPv4Src, mfIPv4Dst, mfIPv6Src, mfIPv6Dst, mfIPFrag, mfIPDSCP, mfNwTOS, mfIPECN, mfNwTTL, mfIPv6Label, mfIPProto,
		mfTCPSrc, mfTCPDst, mfUDPSrc, mfUDPDst, mfSCTPSrc, mfSCTPDst, mfTCPFlags,
		mfICMPv4Type, mfICMPv4Code, mfICMPv6Type, mfICMPv6Code, mfNDTarget, mfNDSLL, mfNDTLL,
		mfARPOp, mfARPSpa, mfARPTpa, mfARPSha, mfARPTha,
		mfTunID, mfTunFlags, mfTunSrc, mfTunDst, mfTunIPv6Src, mfTunIPv6Dst, mfTunGBPID, mfTunGBPFlags,
	}
	for n := mfID(0); n < 16; n++ {
		if n%4 == 0 {
			ids = append(ids, mfXXReg0+n/4)
		}
		if n%2 == 0 {
			ids = append(ids, mfXReg0+n/2)
		}
		ids = append(ids, mfReg0+n)
	}
	return append(ids, mfPktMark, mfCtState, mfCtZone, mfCtMark, mfCtLabel,
		mfCtNwSrc, mfCtIPv6Src, mfCtNwDst, mfCtIPv6Dst, mfCtNwProto, mfCtTpSrc, mfCtTpDst, mfMetadata)
}()

// mfEncodeRank gives each field its position in mfEncodeOrder; unknown
// fields go last.
var mfEncodeRank = func() (r [mfCount]uint8) {
	for i := range r {
		r[i] = 0xff
	}
	for i, id := range mfEncodeOrder {
		r[id] = uint8(i)
	}
	return r
}()

// mfName names a field in errors: its Open vSwitch name, or its header.
func mfName(f *Field, info *FieldInfo) string {
	if info != nil {
		return info.Name
	}
	return FieldID{Class: f.Class, Field: f.Field, Experimenter: f.Experimenter}.String()
}

// AppendOXM appends f as one OXM/NXM TLV.
//
// For a field in the registry the value and mask must have the field's
// width. An all-ones mask (or one that covers every significant bit) is sent
// as an exact match, value bits outside the mask are cleared, and a mask on
// a field that is not maskable is an error naming the field. A value with
// bits the field cannot hold (vlan_vid above 0x1fff, ip_dscp above 63) is an
// error too. Fields not in the registry are written as they are.
func AppendOXM(b []byte, f Field) ([]byte, error) {
	if f.err != nil {
		return b, fmt.Errorf("oxm: %w", f.err)
	}
	info := mfOf(&f)
	out, _, err := mfAppend(b, &f, info, false)
	if err != nil {
		return b, fmt.Errorf("oxm %s: %w", mfName(&f, info), err)
	}
	return out, nil
}

// mfAppend appends one normalised TLV. With omitWild, a field whose mask is
// all zeros is left out and wild reports it.
func mfAppend(b []byte, f *Field, info *FieldInfo, omitWild bool) (out []byte, wild bool, err error) {
	if f.Field > 0x7f {
		return b, false, fmt.Errorf("field number %d exceeds 7 bits: %w", f.Field, ErrMalformed)
	}
	if info == nil {
		return mfAppendRaw(b, f)
	}
	if len(f.Value) != info.Bytes {
		return b, false, fmt.Errorf("%d-byte value, want %d: %w", len(f.Value), info.Bytes, ErrMalformed)
	}
	masked := f.Mask != nil
	if masked {
		if len(f.Mask) != info.Bytes {
			return b, false, fmt.Errorf("%d-byte mask, want %d: %w", len(f.Mask), info.Bytes, ErrMalformed)
		}
		full, zero, ones := true, true, true
		for i, m := range f.Mask {
			v := m & info.valid[i]
			if v != info.valid[i] {
				full = false
			}
			if v != 0 {
				zero = false
			}
			if m != 0xff {
				ones = false
			}
		}
		switch {
		case ones || (full && !info.keepFul):
			masked = false
		case zero && omitWild:
			return b, true, nil
		case !info.Maskable:
			return b, false, fmt.Errorf("field %s is not maskable: %w", info.Name, ErrMalformed)
		}
	}
	for i, v := range f.Value {
		if masked {
			v &= f.Mask[i]
		}
		if v&^info.valid[i] != 0 {
			return b, false, fmt.Errorf("value 0x%x has bits outside the field's mask 0x%x: %w", f.Value, info.valid, ErrMalformed)
		}
	}
	n := info.Bytes
	if masked {
		n *= 2
	}
	b, err = mfAppendHeader(b, f, n, masked)
	if err != nil {
		return b, false, err
	}
	if !masked {
		return append(b, f.Value...), false, nil
	}
	for i, v := range f.Value {
		b = append(b, v&f.Mask[i]&info.valid[i])
	}
	for i, m := range f.Mask {
		b = append(b, m&info.valid[i])
	}
	return b, false, nil
}

// mfAppendHeader writes the OXM header of f, whose payload (value and
// mask, when masked) is n bytes, and the experimenter id of an
// experimenter field: 4 bytes class (16 bits), field (7), hasmask (1),
// length (8); then 4 bytes experimenter.
func mfAppendHeader(b []byte, f *Field, n int, masked bool) ([]byte, error) {
	hm := uint32(0)
	if masked {
		hm = 0x100
	}
	if f.Class == ClassExperimenter {
		n += 4
	}
	if n > 0xff {
		return b, fmt.Errorf("%d-byte payload exceeds oxm_length: %w", n, ErrMalformed)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(f.Class)<<16|uint32(f.Field)<<9|hm|uint32(n))
	if f.Class == ClassExperimenter {
		b = binary.BigEndian.AppendUint32(b, f.Experimenter)
	}
	return b, nil
}

// mfAppendRaw writes a field that is not in the registry as it is.
func mfAppendRaw(b []byte, f *Field) ([]byte, bool, error) {
	if f.Mask != nil && len(f.Mask) != len(f.Value) {
		return b, false, fmt.Errorf("%d-byte value with %d-byte mask: %w", len(f.Value), len(f.Mask), ErrMalformed)
	}
	b, err := mfAppendHeader(b, f, len(f.Value)+len(f.Mask), f.Mask != nil)
	if err != nil {
		return b, false, err
	}
	b = append(b, f.Value...)
	return append(b, f.Mask...), false, nil
}

// UnmarshalOXM decodes the OXM/NXM TLV at the start of b and returns it with
// the number of bytes it took. The field's Value and Mask are copies; Mask
// is nil unless the TLV had oxm_hasmask set.
//
// A field in the registry must have its exact width and may carry a mask
// only if it is maskable; fields not in the registry are kept as raw bytes.
func UnmarshalOXM(b []byte) (Field, int, error) {
	f, n, err := viewOXM(b)
	if err != nil {
		return f, n, err
	}
	f.Value = clone(f.Value)
	if f.Mask != nil {
		f.Mask = append([]byte{}, f.Mask...)
	}
	return f, n, nil
}

// viewOXM is UnmarshalOXM with Value and Mask pointing into b.
func viewOXM(b []byte) (Field, int, error) {
	if len(b) < mfOXMHeaderLen {
		return Field{}, 0, fmt.Errorf("oxm header: need %d bytes, have %d: %w", mfOXMHeaderLen, len(b), io.ErrUnexpectedEOF)
	}
	hdr := binary.BigEndian.Uint32(b)
	f := Field{Class: uint16(hdr >> 16), Field: uint8(hdr>>9) & 0x7f}
	hasMask := hdr&0x100 != 0
	n := int(hdr & 0xff)
	if len(b) < mfOXMHeaderLen+n {
		return Field{}, 0, fmt.Errorf("oxm %s: oxm_length %d, have %d bytes: %w",
			FieldID{Class: f.Class, Field: f.Field}, n, len(b)-mfOXMHeaderLen, io.ErrUnexpectedEOF)
	}
	payload := b[mfOXMHeaderLen : mfOXMHeaderLen+n]
	if f.Class == ClassExperimenter {
		if n < 4 {
			return Field{}, 0, fmt.Errorf("oxm %s: oxm_length %d leaves no room for the experimenter id: %w",
				FieldID{Class: f.Class, Field: f.Field}, n, ErrMalformed)
		}
		f.Experimenter = binary.BigEndian.Uint32(payload)
		payload = payload[4:]
	}
	info := mfOf(&f)
	if info != nil {
		want := info.Bytes
		if hasMask {
			want *= 2
		}
		if len(payload) != want {
			return Field{}, 0, fmt.Errorf("oxm %s (%s): %d-byte payload, want %d: %w",
				info.Name, FieldID{Class: f.Class, Field: f.Field, Experimenter: f.Experimenter}, len(payload), want, ErrMalformed)
		}
		if hasMask && !info.Maskable {
			return Field{}, 0, fmt.Errorf("oxm %s (%s): has a mask but the field is not maskable: %w",
				info.Name, FieldID{Class: f.Class, Field: f.Field, Experimenter: f.Experimenter}, ErrMalformed)
		}
	} else if hasMask && len(payload)%2 != 0 {
		return Field{}, 0, fmt.Errorf("oxm %s: masked field with odd payload length %d: %w",
			FieldID{Class: f.Class, Field: f.Field, Experimenter: f.Experimenter}, len(payload), ErrMalformed)
	}
	if hasMask {
		half := len(payload) / 2
		f.Value, f.Mask = payload[:half:half], payload[half:]
	} else {
		f.Value = payload
	}
	return f, mfOXMHeaderLen + n, nil
}

// mfSortItem is one field of a match being encoded.
type mfSortItem struct {
	rank uint8
	idx  int
	info *FieldInfo
}

// AppendBinary appends m as an ofp_match of type OXM, padded to a multiple
// of 8 bytes.
//
// Fields are written in Open vSwitch's canonical order, which puts
// prerequisites first, whatever their order in m.Fields. Each field is
// normalised as AppendOXM describes; a field whose mask is all zeros is a
// wildcard and is left out. A field that appears twice is an error, as are
// two fields over the same packet data (reg0 and xreg0, vlan_tci and
// vlan_vid, in_port and in_port_oxm, nw_tos and ip_dscp).
func (m Match) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, 0, mfMatchTypeOXM, 0, 0)

	var buf [24]mfSortItem
	items := buf[:0]
	for i := range m.Fields {
		info := mfOf(&m.Fields[i])
		rank := uint8(0xff)
		if info != nil {
			rank = mfEncodeRank[info.id]
		}
		items = append(items, mfSortItem{rank: rank, idx: i, info: info})
	}
	// Insertion sort: stable, allocation-free, and matches are short.
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].rank < items[j-1].rank; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
	var seen mfSlots
	for _, it := range items {
		f := &m.Fields[it.idx]
		if f.err != nil {
			return b[:start], fmt.Errorf("match: field %d: %w", it.idx, f.err)
		}
		var err error
		var wild bool
		b, wild, err = mfAppend(b, f, it.info, true)
		if err != nil {
			return b[:start], fmt.Errorf("match: field %d (%s): %w", it.idx, mfName(f, it.info), err)
		}
		if it.info != nil && !wild {
			if seen.overlaps(&it.info.slots) {
				return b[:start], fmt.Errorf("match: field %d (%s): %w", it.idx, it.info.Name, errDuplicateField)
			}
			seen.union(&it.info.slots)
		}
	}
	n := len(b) - start
	if n > 0xffff {
		return b[:start], fmt.Errorf("match: %d bytes: %w", n, ErrTooLong)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	return appendZeros(b, pad8(n)), nil
}

// errDuplicateField reports a field that appears twice in a match, or two
// fields that match the same packet data (reg0 and xreg0, vlan_tci and
// vlan_vid, in_port and in_port_oxm, nw_tos and ip_dscp).
var errDuplicateField = fmt.Errorf("field appears twice: %w", ErrMalformed)

// UnmarshalMatch decodes the ofp_match at the start of b and returns it with
// the number of bytes it takes, padding included. Fields come back in wire
// order with copied bytes; see UnmarshalOXM. A field that appears twice is
// malformed, as Open vSwitch holds.
func UnmarshalMatch(b []byte) (Match, int, error) {
	if len(b) < mfMatchFixedLen {
		return Match{}, 0, fmt.Errorf("match: need %d bytes, have %d: %w", mfMatchFixedLen, len(b), io.ErrUnexpectedEOF)
	}
	typ := binary.BigEndian.Uint16(b)
	length := int(binary.BigEndian.Uint16(b[2:]))
	if typ != mfMatchTypeOXM {
		return Match{}, 0, fmt.Errorf("match: type %d, want %d (OXM): %w", typ, mfMatchTypeOXM, ErrMalformed)
	}
	if length < mfMatchFixedLen {
		return Match{}, 0, fmt.Errorf("match: length %d: %w", length, ErrMalformed)
	}
	total := length + pad8(length)
	if len(b) < total {
		return Match{}, 0, fmt.Errorf("match: length %d (%d padded), have %d bytes: %w", length, total, len(b), io.ErrUnexpectedEOF)
	}
	body := b[mfMatchFixedLen:length]
	var m Match
	if len(body) > 0 {
		m.Fields = make([]Field, 0, len(body)/8+1)
	}
	var seen mfSlots
	for i := 0; len(body) > 0; i++ {
		if len(body) < mfOXMHeaderLen {
			return Match{}, 0, fmt.Errorf("match: oxm %d: %d bytes left, need a %d-byte header: %w", i, len(body), mfOXMHeaderLen, ErrMalformed)
		}
		if n := int(body[3]); mfOXMHeaderLen+n > len(body) {
			return Match{}, 0, fmt.Errorf("match: oxm %d (%s): oxm_length %d runs past the match end: %w",
				i, FieldID{Class: binary.BigEndian.Uint16(body), Field: body[2] >> 1}, n, ErrMalformed)
		}
		f, n, err := UnmarshalOXM(body)
		if err != nil {
			return Match{}, 0, fmt.Errorf("match: oxm %d: %w", i, err)
		}
		if info := mfOf(&f); info != nil {
			if seen.overlaps(&info.slots) {
				return Match{}, 0, fmt.Errorf("match: oxm %d (%s): %w", i, info.Name, errDuplicateField)
			}
			seen.union(&info.slots)
		}
		m.Fields = append(m.Fields, f)
		body = body[n:]
	}
	return m, total, nil
}
