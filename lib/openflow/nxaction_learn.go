package openflow

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// LearnFlags are the flags of a learn action.
type LearnFlags uint16

// Learn flags.
const (
	LearnSendFlowRem   LearnFlags = 1 << 0 // learned flows have send_flow_rem
	LearnDeleteLearned LearnFlags = 1 << 1 // delete learned flows with the learning flow
	LearnWriteResult   LearnFlags = 1 << 2 // write success into Learn.ResultDst (LEARN2)
)

// LearnDefaultPriority is the priority ovs-ofctl gives learned flows.
const LearnDefaultPriority uint16 = 0x8000

// LearnSpecKind says what a learn spec adds to the learned flow.
type LearnSpecKind uint8

// Learn spec kinds (the spec header's dst bits).
const (
	LearnMatch  LearnSpecKind = 0 // a match on Dst
	LearnLoad   LearnSpecKind = 1 // a load into Dst
	LearnOutput LearnSpecKind = 2 // an output to the port in Src
)

// LearnSpec is one flow_mod_spec of a learn action. The source is the field
// bits Src when Src.Len != 0, else the immediate Value (big-endian,
// right-aligned; it encodes in 2*ceil(n/16) bytes). The bit count is Dst's
// for matches and loads, Src's for outputs (whose source must be a field).
type LearnSpec struct {
	Kind  LearnSpecKind
	Src   FieldRef
	Value []byte
	Dst   FieldRef
}

// LearnMatchField returns the spec "dst=src": the learned flow matches dst
// against the value src has in the packet being processed. Pass the same
// FieldRef twice for ovs-ofctl's "NXM_OF_VLAN_TCI[0..11]" form.
func LearnMatchField(dst, src FieldRef) LearnSpec {
	return LearnSpec{Kind: LearnMatch, Src: src, Dst: dst}
}

// LearnMatchValue returns the spec "dst=value" with an immediate value.
func LearnMatchValue(dst FieldRef, value []byte) LearnSpec {
	return LearnSpec{Kind: LearnMatch, Value: value, Dst: dst}
}

// LearnLoadField returns the spec "load:src->dst".
func LearnLoadField(src, dst FieldRef) LearnSpec {
	return LearnSpec{Kind: LearnLoad, Src: src, Dst: dst}
}

// LearnLoadValue returns the spec "load:value->dst".
func LearnLoadValue(value []byte, dst FieldRef) LearnSpec {
	return LearnSpec{Kind: LearnLoad, Value: value, Dst: dst}
}

// LearnOutputField returns the spec "output:src".
func LearnOutputField(src FieldRef) LearnSpec {
	return LearnSpec{Kind: LearnOutput, Src: src}
}

func (s LearnSpec) nbits() int {
	if s.Kind == LearnOutput {
		return s.Src.NBits
	}
	return s.Dst.NBits
}

// immLen is the size of an immediate source of n bits.
func immLen(n int) int { return 2 * ((n + 15) / 16) }

// appendSpec appends one flow_mod_spec.
//
//	2 bytes: header: bit 13 src (0 field, 1 immediate), bits 12..11 dst
//	         (0 match, 1 load, 2 output), bits 9..0 n_bits
//	src:     field header (4 or 8) + ofs(2), or the immediate value
//	dst:     field header (4 or 8) + ofs(2) for match and load; none for output
func (s LearnSpec) appendSpec(b []byte) ([]byte, error) {
	if s.Kind > LearnOutput {
		return b, fmt.Errorf("kind %d: %w", s.Kind, ErrMalformed)
	}
	imm := s.Src.Len == 0
	if s.Kind == LearnOutput && imm {
		return b, fmt.Errorf("output needs a field source: %w", ErrMalformed)
	}
	n := s.nbits()
	if n < 1 || n > 0x3ff {
		return b, fmt.Errorf("%d bits: %w", n, ErrMalformed)
	}
	if !imm {
		if err := s.Src.check(); err != nil {
			return b, fmt.Errorf("src: %w", err)
		}
		if s.Src.NBits != n {
			return b, fmt.Errorf("src has %d bits, dst %d: %w", s.Src.NBits, n, ErrMalformed)
		}
	}
	if s.Kind != LearnOutput {
		if err := s.Dst.check(); err != nil {
			return b, fmt.Errorf("dst: %w", err)
		}
	}
	h := uint16(s.Kind)<<11 | uint16(n)
	if imm {
		h |= 1 << 13
	}
	b = binary.BigEndian.AppendUint16(b, h)
	if imm {
		w := immLen(n)
		v := s.Value
		for len(v) > w {
			if v[0] != 0 {
				return b, fmt.Errorf("immediate value 0x%x wider than %d bits: %w", s.Value, n, ErrMalformed)
			}
			v = v[1:]
		}
		b = appendZeros(b, w-len(v))
		b = append(b, v...)
	} else {
		src := nxHeaderFor(s.Src)
		b = src.appendHeader(b)
		b = binary.BigEndian.AppendUint16(b, uint16(src.Ofs))
	}
	if s.Kind != LearnOutput {
		dst := nxHeaderFor(s.Dst)
		b = dst.appendHeader(b)
		b = binary.BigEndian.AppendUint16(b, uint16(dst.Ofs))
	}
	return b, nil
}

// String renders the spec as ovs-ofctl does inside learn(...).
func (s LearnSpec) String() string {
	imm := s.Src.Len == 0
	switch s.Kind {
	case LearnMatch:
		if !imm {
			if s.Src.sameField(s.Dst) && s.Src.Ofs == s.Dst.Ofs {
				return s.Dst.String()
			}
			return s.Dst.String() + "=" + s.Src.String()
		}
		if s.Dst.Ofs == 0 && s.Dst.NBits == fieldRefBits(s.Dst) {
			f := Field{Class: s.Dst.Class, Field: s.Dst.Field, Experimenter: s.Dst.Experimenter, Value: fitBytes(s.Value, s.Dst.Len)}
			return fieldOVSName(f.Class, f.Field, f.Experimenter) + "=" + fieldValueText(f)
		}
		return s.Dst.String() + "=" + hexBytes(s.Value)
	case LearnLoad:
		if imm {
			return "load:" + hexBytes(s.Value) + "->" + s.Dst.String()
		}
		return "load:" + s.Src.String() + "->" + s.Dst.String()
	case LearnOutput:
		return "output:" + s.Src.String()
	}
	return fmt.Sprintf("spec(kind=%d)", s.Kind)
}

// pullSpec decodes one flow_mod_spec; ok is false at the terminating zero
// header.
func pullSpec(b []byte) (s LearnSpec, n int, ok bool, err error) {
	if len(b) < 2 {
		return s, 0, false, fmt.Errorf("spec header: %w", ErrMalformed)
	}
	h := binary.BigEndian.Uint16(b)
	if h == 0 {
		return s, 0, false, nil
	}
	nbits := int(h & 0x3ff)
	imm := h&(1<<13) != 0
	s.Kind = LearnSpecKind(h >> 11 & 3)
	if h&0xc400 != 0 || s.Kind > LearnOutput || nbits == 0 {
		return s, 0, false, fmt.Errorf("spec header 0x%04x: %w", h, ErrMalformed)
	}
	if imm && s.Kind == LearnOutput {
		return s, 0, false, fmt.Errorf("spec header 0x%04x: output of an immediate: %w", h, ErrMalformed)
	}
	p := 2
	field := func(what string) (FieldRef, error) {
		r, m, err := pullFieldHeader(b[p:], what)
		if err != nil {
			return r, fmt.Errorf("spec: %w", wrapShort(err))
		}
		if len(b) < p+m+2 {
			return r, fmt.Errorf("spec: %s ofs: %w", what, ErrMalformed)
		}
		r.Ofs, r.NBits = int(binary.BigEndian.Uint16(b[p+m:])), nbits
		p += m + 2
		if err := r.check(); err != nil {
			return r, fmt.Errorf("spec %s: %w", what, err)
		}
		return r.canonical(), nil
	}
	if imm {
		w := immLen(nbits)
		if len(b) < p+w {
			return s, 0, false, fmt.Errorf("spec: %d-byte immediate: %w", w, ErrMalformed)
		}
		s.Value = clone(b[p : p+w])
		if s.Value == nil {
			s.Value = []byte{}
		}
		p += w
	} else if s.Src, err = field("src"); err != nil {
		return s, 0, false, err
	}
	if s.Kind != LearnOutput {
		if s.Dst, err = field("dst"); err != nil {
			return s, 0, false, err
		}
	}
	return s, p, true, nil
}

// wrapShort turns a truncation inside a learn action (whose length is known
// to be complete) into a malformed-input error.
func wrapShort(err error) error {
	return fmt.Errorf("%v: %w", err, ErrMalformed)
}

// Learn is NXAST_LEARN (or NXAST_LEARN2 when Limit or ResultDst is set): add
// or replace a flow in table TableID built from Specs and the packet being
// processed.
//
//	 0: type 0xffff, length, vendor
//	 8: 2 bytes: subtype = 16 (45 for LEARN2)
//	10: 2 bytes: idle_timeout
//	12: 2 bytes: hard_timeout
//	14: 2 bytes: priority
//	16: 8 bytes: cookie
//	24: 2 bytes: flags
//	26: 1 byte:  table_id
//	27: 1 byte:  pad
//	28: 2 bytes: fin_idle_timeout
//	30: 2 bytes: fin_hard_timeout
//	LEARN2 only:
//	32: 4 bytes: limit (0 = none)
//	36: 2 bytes: result_dst ofs
//	38: 2 bytes: pad
//	40: result_dst header (4 or 8), only with LearnWriteResult
//	then flow_mod_specs, zero padded to a multiple of 8
type Learn struct {
	IdleTimeout uint16
	HardTimeout uint16
	Priority    uint16 // LearnDefaultPriority is ovs-ofctl's default
	Cookie      uint64
	Flags       LearnFlags
	TableID     uint8
	FinIdle     uint16
	FinHard     uint16
	Limit       uint32   // maximum number of learned flows, 0 = none
	ResultDst   FieldRef // 1 bit set when the flow was learned; Len 0 = none
	Specs       []LearnSpec
}

func (a Learn) appendAction(b []byte, v Version) ([]byte, error) {
	flags := a.Flags
	if a.ResultDst.Len != 0 {
		flags |= LearnWriteResult
		if err := a.ResultDst.check(); err != nil {
			return b, fmt.Errorf("result_dst: %w", err)
		}
		if a.ResultDst.NBits != 1 {
			return b, fmt.Errorf("result_dst: %d bits, want 1: %w", a.ResultDst.NBits, ErrMalformed)
		}
	} else if flags&LearnWriteResult != 0 {
		return b, fmt.Errorf("write_result flag without result_dst: %w", ErrMalformed)
	}
	if a.TableID == 0xff {
		return b, fmt.Errorf("table 255: %w", ErrMalformed)
	}
	learn2 := a.Limit != 0 || flags&LearnWriteResult != 0
	st := nxastLearn
	if learn2 {
		st = nxastLearn2
	}
	b, start := beginNX(b, st)
	b = binary.BigEndian.AppendUint16(b, a.IdleTimeout)
	b = binary.BigEndian.AppendUint16(b, a.HardTimeout)
	b = binary.BigEndian.AppendUint16(b, a.Priority)
	b = binary.BigEndian.AppendUint64(b, a.Cookie)
	b = binary.BigEndian.AppendUint16(b, uint16(flags))
	b = append(b, a.TableID, 0)
	b = binary.BigEndian.AppendUint16(b, a.FinIdle)
	b = binary.BigEndian.AppendUint16(b, a.FinHard)
	if learn2 {
		b = binary.BigEndian.AppendUint32(b, a.Limit)
		ofs := 0
		if a.ResultDst.Len != 0 {
			ofs = a.ResultDst.Ofs
		}
		b = binary.BigEndian.AppendUint16(b, uint16(ofs))
		b = append(b, 0, 0)
		if a.ResultDst.Len != 0 {
			b = nxHeaderFor(a.ResultDst).appendHeader(b)
		}
	}
	for i, s := range a.Specs {
		var err error
		if b, err = s.appendSpec(b); err != nil {
			return b[:start], fmt.Errorf("spec %d: %w", i, err)
		}
	}
	return endAction(b, start)
}

// String renders e.g. "learn(table=10,idle_timeout=30,hard_timeout=60,
// priority=100,cookie=0x1234,NXM_OF_VLAN_TCI[0..11],output:NXM_OF_IN_PORT[])".
func (a Learn) String() string {
	parts := []string{fmt.Sprintf("table=%d", a.TableID)}
	add := func(name string, v uint16) {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, v))
		}
	}
	add("idle_timeout", a.IdleTimeout)
	add("hard_timeout", a.HardTimeout)
	add("fin_idle_timeout", a.FinIdle)
	add("fin_hard_timeout", a.FinHard)
	if a.Priority != LearnDefaultPriority {
		parts = append(parts, fmt.Sprintf("priority=%d", a.Priority))
	}
	if a.Flags&LearnSendFlowRem != 0 {
		parts = append(parts, "send_flow_rem")
	}
	if a.Flags&LearnDeleteLearned != 0 {
		parts = append(parts, "delete_learned")
	}
	if a.Cookie != 0 {
		parts = append(parts, fmt.Sprintf("cookie=0x%x", a.Cookie))
	}
	if a.Limit != 0 {
		parts = append(parts, fmt.Sprintf("limit=%d", a.Limit))
	}
	if a.ResultDst.Len != 0 {
		parts = append(parts, "result_dst="+a.ResultDst.String())
	}
	for _, s := range a.Specs {
		parts = append(parts, s.String())
	}
	return "learn(" + strings.Join(parts, ",") + ")"
}

func decodeLearn(b []byte, v Version) (Action, error) {
	if len(b) < 32 {
		return nil, fmt.Errorf("length %d, want at least 32: %w", len(b), ErrMalformed)
	}
	a := Learn{
		IdleTimeout: binary.BigEndian.Uint16(b[10:12]),
		HardTimeout: binary.BigEndian.Uint16(b[12:14]),
		Priority:    binary.BigEndian.Uint16(b[14:16]),
		Cookie:      binary.BigEndian.Uint64(b[16:24]),
		Flags:       LearnFlags(binary.BigEndian.Uint16(b[24:26])),
		TableID:     b[26],
		FinIdle:     binary.BigEndian.Uint16(b[28:30]),
		FinHard:     binary.BigEndian.Uint16(b[30:32]),
	}
	if a.Flags&^(LearnSendFlowRem|LearnDeleteLearned|LearnWriteResult) != 0 {
		return nil, fmt.Errorf("flags 0x%x: %w", uint16(a.Flags), ErrMalformed)
	}
	if a.TableID == 0xff {
		return nil, fmt.Errorf("table 255: %w", ErrMalformed)
	}
	p := b[32:]
	if binary.BigEndian.Uint16(b[8:10]) == nxastLearn2 {
		if len(p) < 8 {
			return nil, fmt.Errorf("length %d, want at least 40: %w", len(b), ErrMalformed)
		}
		a.Limit = binary.BigEndian.Uint32(p[0:4])
		ofs := int(binary.BigEndian.Uint16(p[4:6]))
		p = p[8:]
		if a.Flags&LearnWriteResult != 0 {
			r, n, err := pullFieldHeader(p, "result_dst")
			if err != nil {
				return nil, wrapShort(err)
			}
			r.Ofs, r.NBits = ofs, 1
			if err := r.check(); err != nil {
				return nil, fmt.Errorf("result_dst: %w", err)
			}
			a.ResultDst = r.canonical()
			p = p[n:]
		}
	} else if a.Flags&LearnWriteResult != 0 {
		return nil, fmt.Errorf("write_result flag in LEARN: %w", ErrMalformed)
	}
	for i := 0; len(p) > 0; i++ {
		s, n, ok, err := pullSpec(p)
		if err != nil {
			return nil, fmt.Errorf("spec %d: %w", i, err)
		}
		if !ok {
			break
		}
		a.Specs = append(a.Specs, s)
		p = p[n:]
	}
	return a, nil
}

// fitBytes returns v right-aligned in n bytes (dropping high bytes or
// adding zero ones).
func fitBytes(v []byte, n int) []byte {
	out := make([]byte, n)
	if len(v) > n {
		v = v[len(v)-n:]
	}
	copy(out[n-len(v):], v)
	return out
}

func init() {
	nxDecoders[nxastLearn] = decodeLearn
	nxDecoders[nxastLearn2] = decodeLearn
}
