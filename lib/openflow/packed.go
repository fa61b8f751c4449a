package openflow

import (
	"encoding/binary"
	"fmt"
)

// PackedFlow is a flow held as its OpenFlow 1.5 encoding: table, priority,
// timeouts, flags and importance as numbers, and the match and the
// instructions as the bytes a flow mod carries. It takes a fraction of the
// memory of a Flow (no slices of fields, no boxed actions), two packed
// flows with the same bytes are the same flow, and it becomes a flow mod
// without being encoded again. The cookie is not part of it: a flow mod is
// given one when it is made.
//
// The zero PackedFlow is not a flow; make one with Pack.
type PackedFlow struct {
	wire        string // ofp_match padded to 8 bytes, then the instructions
	matchLen    uint16 // bytes of wire that are the padded ofp_match
	Priority    uint16
	IdleTimeout uint16
	HardTimeout uint16
	Importance  uint16
	Flags       FlowModFlags
	Table       uint8
}

// packVersion is the version whose encoding a PackedFlow holds.
const packVersion = Version15

// Pack encodes f (its cookie aside) as a PackedFlow. It fails when f does
// not encode: a bad match field, an action that does not encode, or
// instructions that break the rules of AppendInstructions.
func Pack(f *Flow) (PackedFlow, error) {
	return PackInto(nil, f)
}

// PackInto is Pack with buf as scratch space for the encoding, which the
// result does not keep.
func PackInto(buf []byte, f *Flow) (PackedFlow, error) {
	// Checked as AppendBinary checks it, and written in the canonical form
	// (see canonicalMatch): as Open vSwitch writes it in OpenFlow 1.5.
	b, err := f.Match.AppendBinary(buf[:0])
	if err != nil {
		return PackedFlow{}, fmt.Errorf("pack flow: %w", err)
	}
	b = append(b[:0], 0, mfMatchTypeOXM, 0, 0)
	b = appendCanonical(b, f.Match.Fields)
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	b = appendZeros(b, pad8(len(b)))
	n := len(b)
	b, err = AppendInstructions(b, packVersion, f.Instructions)
	if err != nil {
		return PackedFlow{}, fmt.Errorf("pack flow: %w", err)
	}
	return PackedFlow{
		wire:        string(b),
		matchLen:    uint16(n),
		Priority:    f.Priority,
		IdleTimeout: f.IdleTimeout,
		HardTimeout: f.HardTimeout,
		Importance:  f.Importance,
		Flags:       f.Flags,
		Table:       f.Table,
	}, nil
}

// IsZero reports whether p is the zero PackedFlow, which holds no flow.
func (p *PackedFlow) IsZero() bool { return p.matchLen == 0 }

// MatchFields returns the OXM fields of p's match, in the order they are
// encoded (Open vSwitch's, prerequisites first), without the ofp_match
// header and padding. The string shares p's memory.
func (p *PackedFlow) MatchFields() string {
	if p.matchLen < mfMatchFixedLen {
		return ""
	}
	n := int(binary.BigEndian.Uint16([]byte(p.wire[2:4])))
	return p.wire[mfMatchFixedLen:n]
}

// Instructions returns the encoding of p's instructions (OpenFlow 1.5).
// The string shares p's memory.
func (p *PackedFlow) Instructions() string { return p.wire[p.matchLen:] }

// Unpack decodes p into a Flow with a zero cookie.
func (p *PackedFlow) Unpack() (Flow, error) {
	if p.IsZero() {
		return Flow{}, fmt.Errorf("unpack flow: empty: %w", ErrMalformed)
	}
	m, n, err := UnmarshalMatch([]byte(p.wire[:p.matchLen]))
	if err != nil {
		return Flow{}, fmt.Errorf("unpack flow: %w", err)
	}
	if n != int(p.matchLen) {
		return Flow{}, fmt.Errorf("unpack flow: match of %d bytes, want %d: %w", n, p.matchLen, ErrMalformed)
	}
	ins, err := UnmarshalInstructions([]byte(p.wire[p.matchLen:]), packVersion)
	if err != nil {
		return Flow{}, fmt.Errorf("unpack flow: %w", err)
	}
	// The registers, held as xregs, come back as the 32-bit registers
	// Open vSwitch prints.
	var fields []Field
	if len(m.Fields) > 0 {
		fields = make([]Field, 0, len(m.Fields)+2)
	}
	var split [4]Field
	for _, f := range m.Fields {
		for _, g := range splitRegs(f, split[:0]) {
			if g.Mask != nil && isAllOnes(g.Mask) {
				g.Mask = nil
			}
			fields = append(fields, g)
		}
	}
	m.Fields = fields
	return Flow{
		Table:        p.Table,
		Priority:     p.Priority,
		Match:        m,
		Instructions: ins,
		IdleTimeout:  p.IdleTimeout,
		HardTimeout:  p.HardTimeout,
		Flags:        p.Flags,
		Importance:   p.Importance,
	}, nil
}

// String renders p as Flow.String does, or a note that it does not decode.
func (p *PackedFlow) String() string {
	f, err := p.Unpack()
	if err != nil {
		return " <" + err.Error() + ">"
	}
	return f.String()
}

// AddMod returns an OFPFC_ADD flow mod that installs p with cookie, as
// Flow.AddMod does.
func (p *PackedFlow) AddMod(cookie uint64) *PackedFlowMod {
	return &PackedFlowMod{Command: FlowAdd, Cookie: cookie, Flow: p}
}

// DeleteStrictMod returns an OFPFC_DELETE_STRICT flow mod that removes the
// flow with p's table, priority and match, whatever its cookie, as
// Flow.DeleteStrictMod does.
func (p *PackedFlow) DeleteStrictMod() *PackedFlowMod {
	return &PackedFlowMod{Command: FlowDeleteStrict, Flow: p}
}

// PackedFlowMod is a flow mod of a PackedFlow: an add (FlowAdd, FlowModify,
// FlowModifyStrict) carries its cookie, timeouts, flags, importance and
// instructions; a delete (FlowDelete, FlowDeleteStrict) only its table,
// priority and match. In OpenFlow 1.5 its encoding is a copy of the packed
// bytes; other versions encode it afresh.
type PackedFlowMod struct {
	Command FlowModCommand
	Cookie  uint64
	Flow    *PackedFlow
}

func (m *PackedFlowMod) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	p := m.Flow
	if p == nil || p.IsZero() {
		return TypeFlowMod, b, fmt.Errorf("flow mod: empty packed flow: %w", ErrMalformed)
	}
	del := m.Command == FlowDelete || m.Command == FlowDeleteStrict
	if v != packVersion {
		f, err := p.Unpack()
		if err != nil {
			return TypeFlowMod, b, fmt.Errorf("flow mod: %w", err)
		}
		fm := f.AddMod()
		if del {
			fm = f.DeleteStrictMod()
		}
		fm.Command, fm.Cookie = m.Command, m.Cookie
		return fm.appendBody(b, v)
	}
	b = binary.BigEndian.AppendUint64(b, m.Cookie)
	b = binary.BigEndian.AppendUint64(b, 0) // cookie_mask
	b = append(b, p.Table, uint8(m.Command))
	if del {
		b = append(b, 0, 0, 0, 0) // timeouts
		b = binary.BigEndian.AppendUint16(b, p.Priority)
		b = binary.BigEndian.AppendUint32(b, NoBuffer)
		b = binary.BigEndian.AppendUint32(b, PortAny)
		b = binary.BigEndian.AppendUint32(b, GroupAny)
		b = append(b, 0, 0, 0, 0) // flags, importance
		return TypeFlowMod, append(b, p.wire[:p.matchLen]...), nil
	}
	b = binary.BigEndian.AppendUint16(b, p.IdleTimeout)
	b = binary.BigEndian.AppendUint16(b, p.HardTimeout)
	b = binary.BigEndian.AppendUint16(b, p.Priority)
	b = binary.BigEndian.AppendUint32(b, NoBuffer)
	b = binary.BigEndian.AppendUint32(b, PortAny)
	b = binary.BigEndian.AppendUint32(b, GroupAny)
	b = binary.BigEndian.AppendUint16(b, uint16(p.Flags))
	b = binary.BigEndian.AppendUint16(b, p.Importance)
	return TypeFlowMod, append(b, p.wire...), nil
}

// String renders the flow mod as FlowMod.String does.
func (m *PackedFlowMod) String() string {
	f, err := m.Flow.Unpack()
	if err != nil {
		return fmt.Sprintf("%s <%v>", m.Command, err)
	}
	fm := f.AddMod()
	fm.Command, fm.Cookie = m.Command, m.Cookie
	if m.Command == FlowDelete || m.Command == FlowDeleteStrict {
		fm.Instructions = nil
	}
	return fm.String()
}

// Key returns the key of p's flow, as Flow.Key gives it for the flow p
// was packed from, with its match in p's memory: p holds its match in the
// canonical form a key has.
func (p *PackedFlow) Key() FlowKey {
	return FlowKey{Table: p.Table, Priority: p.Priority, match: p.MatchFields()}
}

func isAllOnes(b []byte) bool {
	for _, c := range b {
		if c != 0xff {
			return false
		}
	}
	return true
}
