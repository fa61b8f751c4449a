package openflow

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
)

// Nicira action subtypes (NXAST_*), vendor 0x00002320.
const (
	nxastResubmit        uint16 = 1
	nxastRegMove         uint16 = 6
	nxastRegLoad         uint16 = 7
	nxastNote            uint16 = 8
	nxastMultipath       uint16 = 10
	nxastResubmitTable   uint16 = 14
	nxastOutputReg       uint16 = 15
	nxastLearn           uint16 = 16
	nxastExit            uint16 = 17
	nxastController      uint16 = 20
	nxastDecTTLCntIDs    uint16 = 21
	nxastOutputReg2      uint16 = 32
	nxastRegLoad2        uint16 = 33
	nxastConjunction     uint16 = 34
	nxastCT              uint16 = 35
	nxastNAT             uint16 = 36
	nxastController2     uint16 = 37
	nxastOutputTrunc     uint16 = 39
	nxastCTClear         uint16 = 43
	nxastResubmitTableCT uint16 = 44
	nxastLearn2          uint16 = 45
)

// onfCopyField is the ONF experimenter action type of the OF1.3 copy_field
// extension.
const onfCopyField uint16 = 3200

// 16-bit (OpenFlow 1.0 style) port numbers that Nicira actions use.
const (
	Port16InPort     uint16 = 0xfff8 // the packet's current in_port
	Port16Table      uint16 = 0xfff9
	Port16Normal     uint16 = 0xfffa
	Port16Flood      uint16 = 0xfffb
	Port16All        uint16 = 0xfffc
	Port16Controller uint16 = 0xfffd
	Port16Local      uint16 = 0xfffe
	Port16None       uint16 = 0xffff
)

// ResubmitCurrentTable as Resubmit.Table means the table the flow is in.
const ResubmitCurrentTable uint8 = 0xff

// Resubmit is NXAST_RESUBMIT_TABLE (or NXAST_RESUBMIT_TABLE_CT when CT is
// set): look the packet up again in Table as if it had arrived on InPort,
// then continue with the next action. NXAST_RESUBMIT (subtype 1) decodes to a
// Resubmit with Table ResubmitCurrentTable.
//
//	 0: 2 bytes: type = 0xffff
//	 2: 2 bytes: length = 16
//	 4: 4 bytes: vendor = 0x00002320
//	 8: 2 bytes: subtype = 14 (44 with CT)
//	10: 2 bytes: in_port (16-bit; 0xfff8 keeps the current one)
//	12: 1 byte:  table (0xff = current table)
//	13: 3 bytes: pad
type Resubmit struct {
	InPort uint16 // Port16InPort to keep the packet's in_port
	Table  uint8  // ResubmitCurrentTable for the current table
	CT     bool   // look up with the conntrack original-direction tuple
}

// ResubmitTable returns resubmit(,table): the packet keeps its in_port.
func ResubmitTable(table uint8) Resubmit {
	return Resubmit{InPort: Port16InPort, Table: table}
}

func (a Resubmit) appendAction(b []byte, v Version) ([]byte, error) {
	st := nxastResubmitTable
	if a.CT {
		st = nxastResubmitTableCT
	}
	b, start := beginNX(b, st)
	b = binary.BigEndian.AppendUint16(b, a.InPort)
	b = append(b, a.Table)
	return endAction(b, start)
}

// String renders e.g. "resubmit(,10)", "resubmit(2,10)", "resubmit:3" or
// "resubmit(,10,ct)".
func (a Resubmit) String() string {
	if a.InPort != Port16InPort && a.Table == ResubmitCurrentTable {
		return "resubmit:" + port16Name(a.InPort)
	}
	var sb strings.Builder
	sb.WriteString("resubmit(")
	if a.InPort != Port16InPort {
		sb.WriteString(port16Name(a.InPort))
	}
	sb.WriteByte(',')
	if a.Table != ResubmitCurrentTable {
		fmt.Fprintf(&sb, "%d", a.Table)
	}
	if a.CT {
		sb.WriteString(",ct")
	}
	sb.WriteByte(')')
	return sb.String()
}

func decodeResubmit(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 16); err != nil {
		return nil, err
	}
	st := binary.BigEndian.Uint16(b[8:10])
	a := Resubmit{InPort: binary.BigEndian.Uint16(b[10:12]), Table: b[12], CT: st == nxastResubmitTableCT}
	if st == nxastResubmit {
		a.Table = ResubmitCurrentTable
	} else if b[13] != 0 || b[14] != 0 || b[15] != 0 {
		return nil, fmt.Errorf("pad %x: %w", b[13:16], ErrMalformed)
	}
	return a, nil
}

// RegMove copies Src's bits into Dst's (ovs-ofctl's move). Src and Dst must
// have the same NBits. Before OF1.5 it encodes as NXAST_REG_MOVE; OF1.5
// dropped that in favour of the standard OFPAT_COPY_FIELD. Both, and the ONF
// OF1.3 copy_field extension, decode to RegMove.
//
//	NXAST_REG_MOVE:                  OFPAT_COPY_FIELD (OF1.5):
//	 0: type 0xffff, length, vendor   0: 2 bytes: type = 28
//	 8: 2 bytes: subtype = 6          2: 2 bytes: length
//	10: 2 bytes: n_bits               4: 2 bytes: n_bits
//	12: 2 bytes: src_ofs              6: 2 bytes: src_ofs
//	14: 2 bytes: dst_ofs              8: 2 bytes: dst_ofs
//	16: src header (4 or 8 bytes)    10: 2 bytes: pad
//	 .. dst header (4 or 8 bytes)    12: src header, dst header
//	 .. zero pad to a multiple of 8   .. zero pad to a multiple of 8
type RegMove struct {
	Src, Dst FieldRef
}

func (a RegMove) appendAction(b []byte, v Version) ([]byte, error) {
	if err := a.Src.check(); err != nil {
		return b, fmt.Errorf("src: %w", err)
	}
	if err := a.Dst.check(); err != nil {
		return b, fmt.Errorf("dst: %w", err)
	}
	if a.Src.NBits != a.Dst.NBits {
		return b, fmt.Errorf("source has %d bits, destination %d: %w", a.Src.NBits, a.Dst.NBits, ErrMalformed)
	}
	if a.Src.Ofs > 0xffff || a.Dst.Ofs > 0xffff || a.Src.NBits > 0xffff {
		return b, fmt.Errorf("bit offsets beyond 65535: %w", ErrMalformed)
	}
	var start int
	src, dst := a.Src, a.Dst
	if v >= Version15 {
		src, dst = oxmHeaderFor(src, v), oxmHeaderFor(dst, v)
		b, start = beginAction(b, atCopyField)
	} else {
		src, dst = nxHeaderFor(src), nxHeaderFor(dst)
		b, start = beginNX(b, nxastRegMove)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(a.Src.NBits))
	b = binary.BigEndian.AppendUint16(b, uint16(a.Src.Ofs))
	b = binary.BigEndian.AppendUint16(b, uint16(a.Dst.Ofs))
	if v >= Version15 {
		b = append(b, 0, 0)
	}
	b = src.appendHeader(b)
	b = dst.appendHeader(b)
	return endAction(b, start)
}

// String renders e.g. "move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31]".
func (a RegMove) String() string {
	return "move:" + a.Src.String() + "->" + a.Dst.String()
}

func decodeRegMove(b []byte, v Version) (Action, error) {
	return pullMove(b, 10, 16)
}

func decodeCopyField(b []byte, v Version) (Action, error) {
	return pullMove(b, 4, 12)
}

func decodeONFCopyField(b []byte, v Version) (Action, error) {
	// 0: type, length, experimenter; 8: exp_type(2) pad(2); 12: n_bits,
	// src_ofs, dst_ofs, pad(2); 20: src, dst headers.
	return pullMove(b, 12, 20)
}

// pullMove decodes n_bits, src_ofs, dst_ofs at off and the two headers at
// hdrs.
func pullMove(b []byte, off, hdrs int) (Action, error) {
	if len(b) < hdrs {
		return nil, fmt.Errorf("length %d, want at least %d: %w", len(b), hdrs+8, ErrMalformed)
	}
	nbits := int(binary.BigEndian.Uint16(b[off:]))
	sofs := int(binary.BigEndian.Uint16(b[off+2:]))
	dofs := int(binary.BigEndian.Uint16(b[off+4:]))
	src, n, err := pullFieldHeader(b[hdrs:], "src")
	if err != nil {
		return nil, err
	}
	dst, m, err := pullFieldHeader(b[hdrs+n:], "dst")
	if err != nil {
		return nil, err
	}
	if want := hdrs + n + m + pad8(hdrs+n+m); len(b) != want {
		return nil, fmt.Errorf("length %d, want %d: %w", len(b), want, ErrMalformed)
	}
	src.Ofs, src.NBits = sofs, nbits
	dst.Ofs, dst.NBits = dofs, nbits
	if err := src.check(); err != nil {
		return nil, fmt.Errorf("src: %w", err)
	}
	if err := dst.check(); err != nil {
		return nil, fmt.Errorf("dst: %w", err)
	}
	return RegMove{Src: src.canonical(), Dst: dst.canonical()}, nil
}

// RegLoad writes the immediate Value into Dst's bits (ovs-ofctl's load).
// Before OF1.5 it encodes as NXAST_REG_LOAD (NXAST_REG_LOAD2 for an
// experimenter field); OF1.5 has no REG_LOAD, so there it encodes as a
// set_field with a masked OXM, which decodes back as a SetField.
//
//	 0: type 0xffff, length = 24, vendor
//	 8: 2 bytes: subtype = 7
//	10: 2 bytes: ofs_nbits = ofs << 6 | (n_bits - 1)
//	12: 4 bytes: dst field header
//	16: 8 bytes: value, right-aligned
type RegLoad struct {
	Dst   FieldRef // at most 64 bits
	Value uint64
}

func (a RegLoad) appendAction(b []byte, v Version) ([]byte, error) {
	if err := a.Dst.checkOfsNbits(); err != nil {
		return b, fmt.Errorf("dst: %w", err)
	}
	if a.Dst.NBits < 64 && a.Value>>uint(a.Dst.NBits) != 0 {
		return b, fmt.Errorf("value 0x%x does not fit %d bits: %w", a.Value, a.Dst.NBits, ErrMalformed)
	}
	if v >= Version15 || a.Dst.Class == 0xffff {
		// OF1.5: a set_field with a masked OXM; an experimenter field
		// before OF1.5: REG_LOAD2, which carries the same OXM at offset 10.
		id := FieldID{Class: a.Dst.Class, Field: a.Dst.Field, Experimenter: a.Dst.Experimenter}
		if info := a.Dst.knownInfo(); info != nil {
			id = oxmIDFor(info, v)
		}
		var start int
		if v >= Version15 {
			b, start = beginAction(b, atSetField)
		} else {
			b, start = beginNX(b, nxastRegLoad2)
		}
		b = appendBitsOXM(b, id, a.Dst.Len, a.Dst.Ofs, a.Dst.NBits, a.Value)
		return endAction(b, start)
	}
	dst := nxHeaderFor(a.Dst)
	b, start := beginNX(b, nxastRegLoad)
	b = binary.BigEndian.AppendUint16(b, ofsNbits(a.Dst.Ofs, a.Dst.NBits))
	b = binary.BigEndian.AppendUint32(b, dst.header())
	b = binary.BigEndian.AppendUint64(b, a.Value)
	return endAction(b, start)
}

// String renders e.g. "load:0x5->NXM_NX_REG0[8..15]".
func (a RegLoad) String() string {
	return "load:" + cHex(a.Value) + "->" + a.Dst.String()
}

func decodeRegLoad(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 24); err != nil {
		return nil, err
	}
	ofs, nbits := unpackOfsNbits(binary.BigEndian.Uint16(b[10:12]))
	if binary.BigEndian.Uint16(b[12:14]) == 0xffff {
		return nil, fmt.Errorf("experimenter field header 0x%08x does not fit: %w", binary.BigEndian.Uint32(b[12:16]), ErrMalformed)
	}
	dst, _, err := pullFieldHeader(b[12:16], "dst")
	if err != nil {
		return nil, err
	}
	dst.Ofs, dst.NBits = ofs, nbits
	if err := dst.check(); err != nil {
		return nil, fmt.Errorf("dst: %w", err)
	}
	a := RegLoad{Dst: dst.canonical(), Value: binary.BigEndian.Uint64(b[16:24])}
	if nbits < 64 && a.Value>>uint(nbits) != 0 {
		return nil, fmt.Errorf("value 0x%x does not fit %d bits: %w", a.Value, nbits, ErrMalformed)
	}
	return a, nil
}

// decodeRegLoad2 decodes NXAST_REG_LOAD2 (an OXM, masked or not, at offset
// 10) into the SetField it is.
func decodeRegLoad2(b []byte, v Version) (Action, error) {
	f, n, err := actPullOXM(b[10:])
	if err != nil {
		return nil, err
	}
	if want := 10 + n + pad8(10+n); len(b) != want {
		return nil, fmt.Errorf("length %d, want %d: %w", len(b), want, ErrMalformed)
	}
	if err := checkDecodedSetField(&f); err != nil {
		return nil, err
	}
	return SetField{Field: setFieldCanonical(f)}, nil
}

// appendRegLoad2 appends NXAST_REG_LOAD2 for f.
//
//	 0: type 0xffff, length, vendor
//	 8: 2 bytes: subtype = 33
//	10: OXM TLV (header, value[, mask])
//	 .. zero pad to a multiple of 8
func appendRegLoad2(b []byte, f Field) ([]byte, error) {
	b, start := beginNX(b, nxastRegLoad2)
	b = actAppendOXM(b, f)
	return endAction(b, start)
}

// appendRegLoadRuns appends one NXAST_REG_LOAD per contiguous run of mask
// bits of f (runs longer than 64 bits are split), lowest bits first.
func appendRegLoadRuns(b []byte, f Field) ([]byte, error) {
	ref := nxHeaderFor(FieldRef{Class: f.Class, Field: f.Field, Len: len(f.Value)})
	width := 8 * len(f.Value)
	start := len(b)
	for i := 0; i < width; {
		if !bitSet(f.Mask, i) {
			i++
			continue
		}
		n := 0
		var val uint64
		for i+n < width && n < 64 && bitSet(f.Mask, i+n) {
			if bitSet(f.Value, i+n) {
				val |= 1 << uint(n)
			}
			n++
		}
		var err error
		b, err = RegLoad{Dst: ref.Bits(i, n), Value: val}.appendAction(b, Version13)
		if err != nil {
			return b[:start], err
		}
		i += n
	}
	return b, nil
}

// bitSet reports bit i (0 = least significant) of big-endian bytes p.
func bitSet(p []byte, i int) bool { return p[len(p)-1-i/8]>>(uint(i)%8)&1 != 0 }

// Conjunction is NXAST_CONJUNCTION: the flow is clause Clause (1-based) of
// NClauses of conjunctive match ID.
//
//	 0: type 0xffff, length = 16, vendor
//	 8: 2 bytes: subtype = 34
//	10: 1 byte:  clause, 0-based
//	11: 1 byte:  n_clauses
//	12: 4 bytes: id
type Conjunction struct {
	ID       uint32
	Clause   uint8 // 1..NClauses
	NClauses uint8 // 2..64
}

func (a Conjunction) appendAction(b []byte, v Version) ([]byte, error) {
	if a.NClauses < 2 || a.NClauses > 64 || a.Clause < 1 || a.Clause > a.NClauses {
		return b, fmt.Errorf("clause %d of %d: %w", a.Clause, a.NClauses, ErrMalformed)
	}
	b, start := beginNX(b, nxastConjunction)
	b = append(b, a.Clause-1, a.NClauses)
	b = binary.BigEndian.AppendUint32(b, a.ID)
	return endAction(b, start)
}

// String renders e.g. "conjunction(1,2/2)".
func (a Conjunction) String() string {
	return fmt.Sprintf("conjunction(%d,%d/%d)", a.ID, a.Clause, a.NClauses)
}

func decodeConjunction(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 16); err != nil {
		return nil, err
	}
	a := Conjunction{Clause: b[10] + 1, NClauses: b[11], ID: binary.BigEndian.Uint32(b[12:16])}
	if a.NClauses < 2 || a.NClauses > 64 || b[10] >= a.NClauses {
		return nil, fmt.Errorf("clause %d of %d: %w", int(b[10])+1, a.NClauses, ErrMalformed)
	}
	return a, nil
}

// Note is NXAST_NOTE: opaque bytes kept with the flow. The encoding pads
// Data with zeros to a multiple of 8 (and at least 6 bytes); the padding
// becomes part of the note, as ovs-ofctl shows.
//
//	 0: type 0xffff, length, vendor
//	 8: 2 bytes: subtype = 8
//	10: note bytes, zero padded
type Note struct {
	Data []byte
}

func (a Note) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginNX(b, nxastNote)
	b = append(b, a.Data...)
	return endAction(b, start)
}

// String renders e.g. "note:01.02.03.00.00.00" (padding included).
func (a Note) String() string {
	n := len(a.Data) + pad8(10+len(a.Data))
	p := make([]byte, n)
	copy(p, a.Data)
	return "note:" + dottedHex(p)
}

func decodeNote(b []byte, v Version) (Action, error) {
	return Note{Data: clone(b[10:])}, nil
}

// CTClear is NXAST_CT_CLEAR: forget the packet's conntrack state.
//
//	 0: type 0xffff, length = 16, vendor
//	 8: 2 bytes: subtype = 43
//	10: 6 bytes: pad
type CTClear struct{}

func (a CTClear) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginNX(b, nxastCTClear)
	return endAction(b, start)
}

// String renders "ct_clear".
func (a CTClear) String() string { return "ct_clear" }

// Exit is NXAST_EXIT: stop processing actions (and resubmits).
//
//	 0: type 0xffff, length = 16, vendor
//	 8: 2 bytes: subtype = 17
//	10: 6 bytes: pad
type Exit struct{}

func (a Exit) appendAction(b []byte, v Version) ([]byte, error) {
	b, start := beginNX(b, nxastExit)
	return endAction(b, start)
}

// String renders "exit".
func (a Exit) String() string { return "exit" }

func decodeVoid(a Action) actionDecoder {
	return func(b []byte, v Version) (Action, error) {
		if err := fixedLen(b, 16); err != nil {
			return nil, err
		}
		return a, nil
	}
}

// OutputReg is NXAST_OUTPUT_REG: output to the port number held in Src's
// bits (16-bit port space). Experimenter fields use NXAST_OUTPUT_REG2.
// MaxLen is what goes to the controller if the port is CONTROLLER.
//
//	NXAST_OUTPUT_REG:                NXAST_OUTPUT_REG2:
//	 0: type, length = 24, vendor     0: type, length = 24, vendor
//	 8: 2 bytes: subtype = 15         8: 2 bytes: subtype = 32
//	10: 2 bytes: ofs_nbits           10: 2 bytes: ofs_nbits
//	12: 4 bytes: src header          12: 2 bytes: max_len
//	16: 2 bytes: max_len             14: src header (4 or 8 bytes)
//	18: 6 bytes: zero                 .. zero pad to 24
type OutputReg struct {
	Src    FieldRef
	MaxLen uint16
}

// OutputRegister returns output:src with max_len 65535, as ovs-ofctl writes it.
func OutputRegister(src FieldRef) OutputReg {
	return OutputReg{Src: src, MaxLen: ControllerMaxLenNoBuffer}
}

func (a OutputReg) appendAction(b []byte, v Version) ([]byte, error) {
	if err := a.Src.checkOfsNbits(); err != nil {
		return b, fmt.Errorf("src: %w", err)
	}
	src := nxHeaderFor(a.Src)
	if src.Class == 0xffff {
		b, start := beginNX(b, nxastOutputReg2)
		b = binary.BigEndian.AppendUint16(b, ofsNbits(src.Ofs, src.NBits))
		b = binary.BigEndian.AppendUint16(b, a.MaxLen)
		b = src.appendHeader(b)
		return endAction(b, start)
	}
	b, start := beginNX(b, nxastOutputReg)
	b = binary.BigEndian.AppendUint16(b, ofsNbits(src.Ofs, src.NBits))
	b = binary.BigEndian.AppendUint32(b, src.header())
	b = binary.BigEndian.AppendUint16(b, a.MaxLen)
	return endAction(b, start)
}

// String renders e.g. "output:NXM_NX_REG0[0..15]".
func (a OutputReg) String() string { return "output:" + a.Src.String() }

func decodeOutputReg(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 24); err != nil {
		return nil, err
	}
	ofs, nbits := unpackOfsNbits(binary.BigEndian.Uint16(b[10:12]))
	var src FieldRef
	var err error
	var maxLen uint16
	if binary.BigEndian.Uint16(b[8:10]) == nxastOutputReg2 {
		maxLen = binary.BigEndian.Uint16(b[12:14])
		src, _, err = pullFieldHeader(b[14:], "src")
	} else {
		if binary.BigEndian.Uint16(b[12:14]) == 0xffff {
			return nil, fmt.Errorf("experimenter field header 0x%08x does not fit: %w", binary.BigEndian.Uint32(b[12:16]), ErrMalformed)
		}
		src, _, err = pullFieldHeader(b[12:16], "src")
		maxLen = binary.BigEndian.Uint16(b[16:18])
	}
	if err != nil {
		return nil, err
	}
	src.Ofs, src.NBits = ofs, nbits
	if err := src.check(); err != nil {
		return nil, fmt.Errorf("src: %w", err)
	}
	return OutputReg{Src: src.canonical(), MaxLen: maxLen}, nil
}

// MultipathFields selects the packet fields multipath hashes (NX_HASH_FIELDS_*).
type MultipathFields uint16

// Hash field sets.
const (
	HashEthSrc           MultipathFields = 0
	HashSymmetricL4      MultipathFields = 1
	HashSymmetricL3L4    MultipathFields = 2
	HashSymmetricL3L4UDP MultipathFields = 3
	HashNwSrc            MultipathFields = 4
	HashNwDst            MultipathFields = 5
	HashSymmetricL3      MultipathFields = 6
)

var multipathFieldNames = []string{"eth_src", "symmetric_l4", "symmetric_l3l4", "symmetric_l3l4+udp", "nw_src", "nw_dst", "symmetric_l3"}

// MultipathAlgorithm is how multipath maps the hash to a link (NX_MP_ALG_*).
type MultipathAlgorithm uint16

// Multipath algorithms.
const (
	MultipathModuloN       MultipathAlgorithm = 0
	MultipathHashThreshold MultipathAlgorithm = 1
	MultipathHRW           MultipathAlgorithm = 2
	MultipathIterHash      MultipathAlgorithm = 3
)

var multipathAlgNames = []string{"modulo_n", "hash_threshold", "hrw", "iter_hash"}

// Multipath is NXAST_MULTIPATH: hash Fields (with Basis), pick one of
// MaxLink+1 links with Algorithm (Arg is its parameter) and store the link
// number in Dst.
//
//	 0: type 0xffff, length = 32, vendor
//	 8: 2 bytes: subtype = 10
//	10: 2 bytes: fields
//	12: 2 bytes: basis
//	14: 2 bytes: pad
//	16: 2 bytes: algorithm
//	18: 2 bytes: max_link (number of links - 1)
//	20: 4 bytes: arg
//	24: 2 bytes: pad
//	26: 2 bytes: dst ofs_nbits
//	28: 4 bytes: dst header
type Multipath struct {
	Fields    MultipathFields
	Basis     uint16
	Algorithm MultipathAlgorithm
	MaxLink   uint16
	Arg       uint32
	Dst       FieldRef
}

func (a Multipath) appendAction(b []byte, v Version) ([]byte, error) {
	if int(a.Fields) >= len(multipathFieldNames) {
		return b, fmt.Errorf("fields %d: %w", a.Fields, ErrMalformed)
	}
	if int(a.Algorithm) >= len(multipathAlgNames) {
		return b, fmt.Errorf("algorithm %d: %w", a.Algorithm, ErrMalformed)
	}
	if err := a.Dst.checkOfsNbits(); err != nil {
		return b, fmt.Errorf("dst: %w", err)
	}
	if a.Dst.NBits < 64 && uint64(a.MaxLink)>>uint(a.Dst.NBits) != 0 {
		return b, fmt.Errorf("%d links do not fit %d bits: %w", int(a.MaxLink)+1, a.Dst.NBits, ErrMalformed)
	}
	dst := nxHeaderFor(a.Dst)
	if dst.Class == 0xffff {
		return b, fmt.Errorf("dst: experimenter field: %w", ErrUnsupported)
	}
	b, start := beginNX(b, nxastMultipath)
	b = binary.BigEndian.AppendUint16(b, uint16(a.Fields))
	b = binary.BigEndian.AppendUint16(b, a.Basis)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(a.Algorithm))
	b = binary.BigEndian.AppendUint16(b, a.MaxLink)
	b = binary.BigEndian.AppendUint32(b, a.Arg)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, ofsNbits(dst.Ofs, dst.NBits))
	b = binary.BigEndian.AppendUint32(b, dst.header())
	return endAction(b, start)
}

// String renders e.g. "multipath(symmetric_l4,1024,hrw,2,0,NXM_NX_REG0[0..1])".
func (a Multipath) String() string {
	f := fmt.Sprint(uint16(a.Fields))
	if int(a.Fields) < len(multipathFieldNames) {
		f = multipathFieldNames[a.Fields]
	}
	alg := fmt.Sprint(uint16(a.Algorithm))
	if int(a.Algorithm) < len(multipathAlgNames) {
		alg = multipathAlgNames[a.Algorithm]
	}
	return fmt.Sprintf("multipath(%s,%d,%s,%d,%d,%s)", f, a.Basis, alg, int(a.MaxLink)+1, a.Arg, a.Dst)
}

func decodeMultipath(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 32); err != nil {
		return nil, err
	}
	a := Multipath{
		Fields:    MultipathFields(binary.BigEndian.Uint16(b[10:12])),
		Basis:     binary.BigEndian.Uint16(b[12:14]),
		Algorithm: MultipathAlgorithm(binary.BigEndian.Uint16(b[16:18])),
		MaxLink:   binary.BigEndian.Uint16(b[18:20]),
		Arg:       binary.BigEndian.Uint32(b[20:24]),
	}
	if int(a.Fields) >= len(multipathFieldNames) {
		return nil, fmt.Errorf("fields %d: %w", a.Fields, ErrMalformed)
	}
	if int(a.Algorithm) >= len(multipathAlgNames) {
		return nil, fmt.Errorf("algorithm %d: %w", a.Algorithm, ErrMalformed)
	}
	if binary.BigEndian.Uint16(b[28:30]) == 0xffff {
		return nil, fmt.Errorf("experimenter field header does not fit: %w", ErrMalformed)
	}
	dst, _, err := pullFieldHeader(b[28:32], "dst")
	if err != nil {
		return nil, err
	}
	dst.Ofs, dst.NBits = unpackOfsNbits(binary.BigEndian.Uint16(b[26:28]))
	if err := dst.check(); err != nil {
		return nil, fmt.Errorf("dst: %w", err)
	}
	if dst.NBits < 16 && bits.Len16(a.MaxLink) > dst.NBits {
		return nil, fmt.Errorf("%d links do not fit %d bits: %w", int(a.MaxLink)+1, dst.NBits, ErrMalformed)
	}
	a.Dst = dst.canonical()
	return a, nil
}

func init() {
	nxDecoders[nxastResubmit] = decodeResubmit
	nxDecoders[nxastResubmitTable] = decodeResubmit
	nxDecoders[nxastResubmitTableCT] = decodeResubmit
	nxDecoders[nxastRegMove] = decodeRegMove
	nxDecoders[nxastRegLoad] = decodeRegLoad
	nxDecoders[nxastRegLoad2] = decodeRegLoad2
	nxDecoders[nxastConjunction] = decodeConjunction
	nxDecoders[nxastNote] = decodeNote
	nxDecoders[nxastCTClear] = decodeVoid(CTClear{})
	nxDecoders[nxastExit] = decodeVoid(Exit{})
	nxDecoders[nxastOutputReg] = decodeOutputReg
	nxDecoders[nxastOutputReg2] = decodeOutputReg
	nxDecoders[nxastMultipath] = decodeMultipath
}
