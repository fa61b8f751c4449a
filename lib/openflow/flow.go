package openflow

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Flow is one flow table entry: where it lives (Table, Priority, Match),
// what it does (Instructions) and its bookkeeping (Cookie, timeouts, flags,
// importance). It is the value nodeflow's flow builders produce and the
// reconciler compares; FlowMod carries it to the switch.
//
// Priority has no default: set it (DefaultPriority is what ovs-ofctl assumes
// when a flow text names none).
type Flow struct {
	Table        uint8
	Priority     uint16
	Cookie       uint64
	Match        Match
	Instructions []Instruction
	IdleTimeout  uint16
	HardTimeout  uint16
	Flags        FlowModFlags
	Importance   uint16
}

// String renders the flow exactly as one line of
// `ovs-ofctl -O OpenFlow15 dump-flows --no-stats` prints it, leading space
// included, e.g. " cookie=0x5, table=3, priority=10,ip actions=drop".
func (f Flow) String() string {
	var sb strings.Builder
	sb.WriteByte(' ')
	if f.Cookie != 0 {
		fmt.Fprintf(&sb, "cookie=0x%x, ", f.Cookie)
	}
	if f.Table != 0 {
		fmt.Fprintf(&sb, "table=%d, ", f.Table)
	}
	if f.IdleTimeout != 0 {
		fmt.Fprintf(&sb, "idle_timeout=%d, ", f.IdleTimeout)
	}
	if f.HardTimeout != 0 {
		fmt.Fprintf(&sb, "hard_timeout=%d, ", f.HardTimeout)
	}
	sb.WriteString(f.Flags.String())
	if f.Importance != 0 {
		fmt.Fprintf(&sb, "importance=%d, ", f.Importance)
	}
	sb.WriteString(matchText(f.Priority, f.Match))
	if s := sb.String(); s[len(s)-1] != ' ' {
		sb.WriteByte(' ')
	}
	sb.WriteString("actions=")
	sb.WriteString(InstructionsString(f.Instructions))
	return sb.String()
}

// AddMod returns an OFPFC_ADD flow mod that installs f, replacing a flow with
// the same table, priority and match (counters carry over unless Flags has
// FlowResetCounts).
func (f Flow) AddMod() *FlowMod {
	m := NewFlowMod(FlowAdd)
	m.Cookie = f.Cookie
	m.Table = f.Table
	m.IdleTimeout = f.IdleTimeout
	m.HardTimeout = f.HardTimeout
	m.Priority = f.Priority
	m.Flags = f.Flags
	m.Importance = f.Importance
	m.Match = f.Match
	m.Instructions = f.Instructions
	return m
}

// ModifyStrictMod returns an OFPFC_MODIFY_STRICT flow mod that replaces the
// instructions of the flow with f's table, priority and match. Open vSwitch
// keeps that flow's cookie, timeouts and flags; use AddMod to replace those.
func (f Flow) ModifyStrictMod() *FlowMod {
	m := NewFlowMod(FlowModifyStrict)
	m.Table = f.Table
	m.Priority = f.Priority
	m.Match = f.Match
	m.Instructions = f.Instructions
	return m
}

// DeleteStrictMod returns an OFPFC_DELETE_STRICT flow mod that removes the
// flow with f's table, priority and match, whatever its cookie.
func (f Flow) DeleteStrictMod() *FlowMod {
	m := NewFlowMod(FlowDeleteStrict)
	m.Table = f.Table
	m.Priority = f.Priority
	m.Match = f.Match
	return m
}

// DeleteCookieMod returns an OFPFC_DELETE flow mod that removes, from table
// (TableAll for every table), every flow whose cookie has the bits of cookie
// selected by mask.
func DeleteCookieMod(table uint8, cookie, mask uint64) *FlowMod {
	m := NewFlowMod(FlowDelete)
	m.Table = table
	m.Cookie = cookie
	m.CookieMask = mask
	return m
}

// FlowFromStats returns the flow that a flow-stats entry describes.
func FlowFromStats(s FlowStats) Flow { return s.Flow }

// FlowsFromStats returns the flows of a flow-stats reply, in order.
func FlowsFromStats(stats []FlowStats) []Flow {
	flows := make([]Flow, len(stats))
	for i := range stats {
		flows[i] = stats[i].Flow
	}
	return flows
}

// FlowKey identifies a flow the way the switch does: by table, priority and
// match. Two flows whose matches hold the same fields in a different order,
// or spell an exact match with an all-ones mask, have equal keys. FlowKey is
// comparable and can key a map.
type FlowKey struct {
	Table    uint8
	Priority uint16
	match    string // canonical OXM bytes; see canonicalMatch
}

// Key returns f's identity on table, priority and match.
func (f Flow) Key() FlowKey {
	return FlowKey{Table: f.Table, Priority: f.Priority, match: canonicalMatch(f.Match)}
}

// String renders the key for logs: "table=N,priority=P,<hex of the
// canonical match>".
func (k FlowKey) String() string {
	return fmt.Sprintf("table=%d,priority=%d,match=%s", k.Table, k.Priority, hex.EncodeToString([]byte(k.match)))
}

// canonicalMatch encodes m so that equal matches give equal strings: as
// Open vSwitch encodes a match in OpenFlow 1.5, so that a flow read back
// from it has the key of the flow sent. Each field is written under its
// preferred header (so NXM and OXM spellings of one field agree), the
// 32-bit registers (and the xreg and xxreg fields that overlay them) are
// written as the 64-bit xregs that hold them, as Open vSwitch sends them
// in OpenFlow 1.5, and each field is normalised as Match.AppendBinary
// does: an all-ones mask becomes an exact match, value bits outside the
// mask are cleared and a field with an all-zero mask is left out. The
// fields are then in the order AppendBinary writes them (Open vSwitch's),
// ties (unknown fields) by their bytes. A field that does not encode is
// kept as its raw bytes.
func canonicalMatch(m Match) string {
	if len(m.Fields) == 0 {
		return ""
	}
	// Room on the stack for the usual match: one allocation, the string.
	var bufSpace [256]byte
	return string(appendCanonical(bufSpace[:0], m.Fields))
}

// appendCanonical appends the canonical form of a match of fields to dst
// (see canonicalMatch).
func appendCanonical(dst []byte, fields []Field) []byte {
	var bufSpace [256]byte
	var spanSpace [16][3]int // start, end, rank
	buf, spans := bufSpace[:0], spanSpace[:0]
	add := func(g *Field) {
		start := len(buf)
		buf = canonicalField(buf, *g)
		if len(buf) > start {
			rank := 0xff
			if info := mfOf(g); info != nil {
				rank = int(mfEncodeRank[info.id])
			}
			spans = append(spans, [3]int{start, len(buf), rank})
		}
	}
	// The 32-bit registers, gathered to be written as the 64-bit xregs
	// that hold them.
	var regs [16]struct{ v, m uint32 }
	var matched uint16 // bit i: reg i is matched
	var split [4]Field
	for _, f := range fields {
		for _, g := range splitRegs(f, split[:0]) {
			info := mfOf(&g)
			if info == nil || info.id < mfReg0 || info.id >= mfReg0+16 || len(g.Value) != 4 || (g.Mask != nil && len(g.Mask) != 4) {
				add(&g)
				continue
			}
			i := info.id - mfReg0
			v, m := binary.BigEndian.Uint32(g.Value), uint32(0xffffffff)
			if g.Mask != nil {
				m = binary.BigEndian.Uint32(g.Mask)
			}
			switch {
			case m == 0:
			case matched&(1<<i) != 0:
				// Twice (no valid match has that): keep it apart.
				add(&g)
			default:
				regs[i] = struct{ v, m uint32 }{v & m, m}
				matched |= 1 << i
			}
		}
	}
	for x := range 8 {
		if matched>>(2*x)&3 == 0 {
			continue
		}
		// Written here, not by canonicalField: nothing escapes.
		hi, lo := regs[2*x], regs[2*x+1]
		id := mfXReg0 + mfID(x)
		info := mfReg.infos[id]
		exact := hi.m == 0xffffffff && lo.m == 0xffffffff
		hdr := uint32(info.Class)<<16 | uint32(info.Field)<<9 | 8 // value only
		if !exact {
			hdr = hdr&^0xff | 0x100 | 16 // has mask: value and mask
		}
		start := len(buf)
		buf = binary.BigEndian.AppendUint32(buf, hdr)
		buf = binary.BigEndian.AppendUint32(buf, hi.v)
		buf = binary.BigEndian.AppendUint32(buf, lo.v)
		if !exact {
			buf = binary.BigEndian.AppendUint32(buf, hi.m)
			buf = binary.BigEndian.AppendUint32(buf, lo.m)
		}
		spans = append(spans, [3]int{start, len(buf), int(mfEncodeRank[id])})
	}
	if len(spans) > 1 {
		slices.SortFunc(spans, func(a, b [3]int) int {
			if a[2] != b[2] {
				return a[2] - b[2]
			}
			return bytes.Compare(buf[a[0]:a[1]], buf[b[0]:b[1]])
		})
	}
	for _, sp := range spans {
		dst = append(dst, buf[sp[0]:sp[1]]...)
	}
	return dst
}

// Clone returns k with a copy of its match, which shares no memory with
// anything else (see FlowStatsView.Key).
func (k FlowKey) Clone() FlowKey {
	k.match = strings.Clone(k.match)
	return k
}

// splitRegs appends f to out, or, for an xreg or xxreg field, the 32-bit
// registers it overlays (those its mask touches).
func splitRegs(f Field, out []Field) []Field {
	info := mfOf(&f)
	if info == nil {
		return append(out, f)
	}
	var base, n int
	switch {
	case info.id >= mfXReg0 && info.id < mfXReg0+8:
		base, n = 2*int(info.id-mfXReg0), 2
	case info.id >= mfXXReg0 && info.id < mfXXReg0+4:
		base, n = 4*int(info.id-mfXXReg0), 4
	default:
		return append(out, f)
	}
	if len(f.Value) != 4*n || (f.Mask != nil && len(f.Mask) != 4*n) {
		return append(out, f)
	}
	for k := 0; k < n; k++ {
		// The registers' bytes are f's: nothing is allocated.
		var mask []byte
		if f.Mask != nil {
			mask = f.Mask[4*k : 4*k+4 : 4*k+4]
			if binary.BigEndian.Uint32(mask) == 0 {
				continue
			}
		}
		out = append(out, mfField(mfReg0+mfID(base+k), f.Value[4*k:4*k+4:4*k+4], mask))
	}
	return out
}

// canonicalField appends the canonical TLV of f to b (nothing for a
// wildcard).
func canonicalField(b []byte, f Field) []byte {
	if info := mfOf(&f); info != nil {
		f.Class, f.Field, f.Experimenter = info.Class, info.Field, info.Experimenter
	}
	start := len(b)
	enc, err := (Match{Fields: []Field{f}}).AppendBinary(b)
	if err != nil {
		// Raw form: class, field, experimenter, value length, value, mask.
		b = binary.BigEndian.AppendUint16(b[:start], f.Class)
		b = append(b, f.Field)
		b = binary.BigEndian.AppendUint32(b, f.Experimenter)
		b = append(b, byte(len(f.Value)))
		b = append(b, f.Value...)
		return append(b, f.Mask...)
	}
	n := int(binary.BigEndian.Uint16(enc[start+2:]))
	// Drop the 4-byte ofp_match header and the padding.
	copy(enc[start:], enc[start+4:start+n])
	return enc[:start+n-4]
}
