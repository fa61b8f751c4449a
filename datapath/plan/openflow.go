package plan

import (
	"encoding/binary"
	"fmt"

	"nodeflow/lib/openflow"
)

// This file turns plan values into openflow matches and actions, so that
// flow builders read as intent: plan.FromPod.Match(), plan.SNATToNodeIP.Load(),
// plan.EndpointPort.Ref().

// MatchValue returns the match of value v in the field (shifted into place
// and masked). A value wider than the field is an error naming it.
func (f Field) MatchValue(v uint64) (openflow.Field, error) {
	if err := f.Check(v); err != nil {
		return openflow.Field{}, err
	}
	switch f.space {
	case SpaceReg, SpaceCtMark:
		val, mask, _ := f.Value32(uint32(v))
		if f.space == SpaceReg {
			return openflow.Reg(int(f.index), val, mask), nil
		}
		return openflow.CtMark(val, mask), nil
	case SpaceXXReg, SpaceCtLabel:
		val, mask := f.bytes128(v)
		if f.space == SpaceXXReg {
			return openflow.XXReg(int(f.index), val, mask), nil
		}
		return openflow.CtLabel(val, mask), nil
	}
	return openflow.Field{}, fmt.Errorf("plan: field %s: unknown space", f.name)
}

// bytes128 returns v shifted into place in a 128-bit big-endian value, and
// the field's mask. Fields wider than 64 bits take v in their low bits.
func (f Field) bytes128(v uint64) (val, mask [16]byte) {
	var lo, hi, mlo, mhi uint64
	for b := int(f.start); b <= int(f.end); b++ {
		if b < 64 {
			mlo |= 1 << b
		} else {
			mhi |= 1 << (b - 64)
		}
	}
	if f.start < 64 {
		lo = v << f.start
		if f.start > 0 {
			hi = v >> (64 - f.start)
		}
	} else {
		hi = v << (f.start - 64)
	}
	lo &= mlo
	hi &= mhi
	binary.BigEndian.PutUint64(val[0:8], hi)
	binary.BigEndian.PutUint64(val[8:16], lo)
	binary.BigEndian.PutUint64(mask[0:8], mhi)
	binary.BigEndian.PutUint64(mask[8:16], mlo)
	return val, mask
}

// LoadValue returns the action that writes v into the field: a set_field
// with the field's mask (Open vSwitch encodes it as a masked set_field in
// OpenFlow 1.5, as register loads before).
func (f Field) LoadValue(v uint64) (openflow.Action, error) {
	m, err := f.MatchValue(v)
	if err != nil {
		return nil, err
	}
	return openflow.SetField{Field: m}, nil
}

// Ref returns the field as an NXM subfield reference, for move, learn and
// output_reg actions.
func (f Field) Ref() openflow.FieldRef {
	name := f.Base()
	switch f.space {
	case SpaceReg:
		name = fmt.Sprintf("NXM_NX_REG%d", f.index)
	case SpaceXXReg:
		name = fmt.Sprintf("NXM_NX_XXREG%d", f.index)
	case SpaceCtMark:
		name = "NXM_NX_CT_MARK"
	case SpaceCtLabel:
		name = "NXM_NX_CT_LABEL"
	}
	return openflow.MustParseFieldRef(fmt.Sprintf("%s[%d..%d]", name, f.start, f.end))
}

// Match returns the match of the mark.
func (m Mark) Match() openflow.Field {
	f, err := m.field.MatchValue(m.value)
	if err != nil {
		// NewMark checked the value: a broken invariant.
		panic(err)
	}
	return f
}

// Load returns the action that sets the mark.
func (m Mark) Load() openflow.Action {
	a, err := m.field.LoadValue(m.value)
	if err != nil {
		panic(err)
	}
	return a
}

// ValueIn returns the field's value in m when m matches or sets all of the
// field's bits: a register match (reg or the 64-bit xreg that holds it)
// whose mask covers the field, or the same in a set_field. It reports
// false for any other m, and for fields outside the 32-bit registers.
func (f Field) ValueIn(m openflow.Field) (uint64, bool) {
	if f.space != SpaceReg || m.Err() != nil {
		return 0, false
	}
	fmask := uint32(f.Max()) << f.start
	var val, mask uint32
	switch reg, xreg := openflow.Reg(int(f.index), 0, 0), openflow.XReg(int(f.index)/2, 0, 0); {
	case sameField(m, reg) && len(m.Value) == 4:
		val, mask = binary.BigEndian.Uint32(m.Value), ^uint32(0)
		if len(m.Mask) == 4 {
			mask = binary.BigEndian.Uint32(m.Mask)
		}
	case sameField(m, xreg) && len(m.Value) == 8:
		// reg 2i is the high half of xreg i, reg 2i+1 the low half.
		shift := 32 * (1 - int(f.index)%2)
		val, mask = uint32(binary.BigEndian.Uint64(m.Value)>>shift), ^uint32(0)
		if len(m.Mask) == 8 {
			mask = uint32(binary.BigEndian.Uint64(m.Mask) >> shift)
		}
	default:
		return 0, false
	}
	if mask&fmask != fmask {
		return 0, false
	}
	return uint64(val&fmask) >> f.start, true
}

func sameField(a, b openflow.Field) bool {
	return a.Class == b.Class && a.Field == b.Field && a.Experimenter == b.Experimenter
}

// ValuesIn calls fn with every value of the field that fl matches or
// loads: its match (ValueIn), and the set_field and load actions of its
// instructions. It is how the agent
// learns which values (namespace ids, say) the flows on a bridge use.
func (f Field) ValuesIn(fl *openflow.Flow, fn func(uint64)) {
	for _, m := range fl.Match.Fields {
		if v, ok := f.ValueIn(m); ok {
			fn(v)
		}
	}
	for _, in := range fl.Instructions {
		switch in := in.(type) {
		case openflow.ApplyActions:
			f.valuesInActions(in.Actions, fn)
		case *openflow.ApplyActions:
			f.valuesInActions(in.Actions, fn)
		case openflow.WriteActions:
			f.valuesInActions(in.Actions, fn)
		case *openflow.WriteActions:
			f.valuesInActions(in.Actions, fn)
		}
	}
}

func (f Field) valuesInActions(as []openflow.Action, fn func(uint64)) {
	ref := f.Ref()
	for _, a := range as {
		switch a := a.(type) {
		case openflow.SetField:
			if v, ok := f.ValueIn(a.Field); ok {
				fn(v)
			}
		case openflow.RegLoad:
			d := a.Dst
			if d.Class == ref.Class && d.Field == ref.Field && d.Experimenter == ref.Experimenter &&
				d.Ofs <= ref.Ofs && ref.Ofs+ref.NBits <= d.Ofs+d.NBits {
				fn((a.Value >> uint(ref.Ofs-d.Ofs)) & f.Max())
			}
		}
	}
}
