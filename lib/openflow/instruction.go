package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Instruction is one OpenFlow instruction: goto_table, apply_actions,
// write_actions, clear_actions, write_metadata or meter. In OF1.5 the meter
// instruction is encoded as a meter action at the head of apply_actions.
type Instruction interface {
	// appendInstruction appends the encoded instruction.
	appendInstruction(b []byte, v Version) ([]byte, error)
	String() string
}

// Instruction types (OFPIT_*).
const (
	itGotoTable     uint16 = 1
	itWriteMetadata uint16 = 2
	itWriteActions  uint16 = 3
	itApplyActions  uint16 = 4
	itClearActions  uint16 = 5
	itMeter         uint16 = 6 // OF1.3 and OF1.4 only
)

// GotoTable is OFPIT_GOTO_TABLE: continue in Table, which must be greater
// than the flow's own table.
//
//	2 bytes: type = 1
//	2 bytes: length = 8
//	1 byte:  table_id
//	3 bytes: pad
type GotoTable struct {
	Table uint8
}

func (i GotoTable) appendInstruction(b []byte, v Version) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, itGotoTable)
	b = binary.BigEndian.AppendUint16(b, 8)
	return append(b, i.Table, 0, 0, 0), nil
}

// String renders "goto_table:N".
func (i GotoTable) String() string { return fmt.Sprintf("goto_table:%d", i.Table) }

// WriteMetadata is OFPIT_WRITE_METADATA: metadata = metadata&^Mask |
// Metadata&Mask. Mask is literal: use ^uint64(0) (or WriteMetadataAll) to
// write every bit; a zero Mask writes nothing.
//
//	2 bytes: type = 2
//	2 bytes: length = 24
//	4 bytes: pad
//	8 bytes: metadata
//	8 bytes: metadata_mask
type WriteMetadata struct {
	Metadata uint64
	Mask     uint64
}

// WriteMetadataAll returns a WriteMetadata that sets all 64 bits.
func WriteMetadataAll(metadata uint64) WriteMetadata {
	return WriteMetadata{Metadata: metadata, Mask: ^uint64(0)}
}

func (i WriteMetadata) appendInstruction(b []byte, v Version) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, itWriteMetadata)
	b = binary.BigEndian.AppendUint16(b, 24)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, i.Metadata)
	return binary.BigEndian.AppendUint64(b, i.Mask), nil
}

// String renders "write_metadata:0x5" (all bits) or "write_metadata:0x5/0xff".
func (i WriteMetadata) String() string {
	if i.Mask != ^uint64(0) {
		return "write_metadata:" + cHex(i.Metadata) + "/" + cHex(i.Mask)
	}
	return "write_metadata:" + cHex(i.Metadata)
}

// ApplyActions is OFPIT_APPLY_ACTIONS: run Actions now, in order.
//
//	2 bytes: type = 4
//	2 bytes: length
//	4 bytes: pad
//	actions
type ApplyActions struct {
	Actions []Action
}

func (i ApplyActions) appendInstruction(b []byte, v Version) ([]byte, error) {
	return appendActionsInstruction(b, v, itApplyActions, nil, i.Actions)
}

// String renders the actions comma-separated, as ovs-ofctl shows apply
// actions (an empty list renders as "").
func (i ApplyActions) String() string {
	if len(i.Actions) == 0 {
		return ""
	}
	return ActionsString(i.Actions)
}

// WriteActions is OFPIT_WRITE_ACTIONS: merge Actions into the action set.
//
//	2 bytes: type = 3
//	2 bytes: length
//	4 bytes: pad
//	actions
type WriteActions struct {
	Actions []Action
}

func (i WriteActions) appendInstruction(b []byte, v Version) ([]byte, error) {
	return appendActionsInstruction(b, v, itWriteActions, nil, i.Actions)
}

// String renders "write_actions(...)", "write_actions(drop)" when empty.
func (i WriteActions) String() string { return "write_actions(" + ActionsString(i.Actions) + ")" }

// ClearActions is OFPIT_CLEAR_ACTIONS: empty the action set.
//
//	2 bytes: type = 5
//	2 bytes: length = 8
//	4 bytes: pad
type ClearActions struct{}

func (i ClearActions) appendInstruction(b []byte, v Version) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, itClearActions)
	b = binary.BigEndian.AppendUint16(b, 8)
	return append(b, 0, 0, 0, 0), nil
}

// String renders "clear_actions".
func (i ClearActions) String() string { return "clear_actions" }

// appendInstruction encodes Meter as an instruction: OFPIT_METER before
// OF1.5, an apply_actions holding only the meter action in OF1.5 (where
// AppendInstructions instead merges it into the flow's apply_actions).
func (a Meter) appendInstruction(b []byte, v Version) ([]byte, error) {
	if v >= Version15 {
		return appendActionsInstruction(b, v, itApplyActions, &a, nil)
	}
	b = binary.BigEndian.AppendUint16(b, itMeter)
	b = binary.BigEndian.AppendUint16(b, 8)
	return binary.BigEndian.AppendUint32(b, a.ID), nil
}

// appendActionsInstruction appends an apply/write actions instruction,
// with meter first if given.
func appendActionsInstruction(b []byte, v Version, t uint16, meter *Meter, acts []Action) ([]byte, error) {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, t)
	b = append(b, 0, 0, 0, 0, 0, 0)
	var err error
	if meter != nil {
		if b, err = meter.appendAction(b, v); err != nil {
			return b[:start], err
		}
	}
	if b, err = AppendActions(b, v, acts); err != nil {
		return b[:start], err
	}
	n := len(b) - start
	if n > 0xffff {
		return b[:start], fmt.Errorf("instruction of %d bytes: %w", n, ErrTooLong)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	return b, nil
}

// RawInstruction is an instruction this package does not decode (an
// experimenter instruction, say). Data is the whole instruction, header
// included; it re-encodes byte for byte.
type RawInstruction struct {
	Data []byte
}

func (i RawInstruction) appendInstruction(b []byte, v Version) ([]byte, error) {
	n := len(i.Data)
	if n < 8 || n%8 != 0 || n > 0xffff || int(binary.BigEndian.Uint16(i.Data[2:4])) != n {
		return b, fmt.Errorf("raw instruction of %d bytes: %w", n, ErrMalformed)
	}
	return append(b, i.Data...), nil
}

// String renders "raw_instruction(HEX)"; ovs-ofctl has no syntax for
// instructions it does not know.
func (i RawInstruction) String() string { return "raw_instruction(" + hexString(i.Data) + ")" }

// instructionRank orders instructions as Open vSwitch emits and prints them:
// meter, apply_actions, clear_actions, write_actions, write_metadata,
// goto_table; unknown ones last.
func instructionRank(i Instruction) int {
	switch i.(type) {
	case Meter:
		return 0
	case ApplyActions:
		return 1
	case ClearActions:
		return 2
	case WriteActions:
		return 3
	case WriteMetadata:
		return 4
	case GotoTable:
		return 5
	}
	return 6
}

func instructionName(i Instruction) string {
	switch i := i.(type) {
	case Meter:
		return "meter"
	case ApplyActions:
		return "apply_actions"
	case ClearActions:
		return "clear_actions"
	case WriteActions:
		return "write_actions"
	case WriteMetadata:
		return "write_metadata"
	case GotoTable:
		return "goto_table"
	case RawInstruction:
		if len(i.Data) >= 2 {
			return fmt.Sprintf("type %d", binary.BigEndian.Uint16(i.Data))
		}
		return "raw"
	case nil:
		return "nil"
	}
	return fmt.Sprintf("%T", i)
}

// sortInstructions returns ins in Open vSwitch's order; it fails on a nil
// or a repeated instruction type.
func sortInstructions(ins []Instruction) ([]Instruction, error) {
	out := slices.Clone(ins)
	slices.SortStableFunc(out, func(a, b Instruction) int { return instructionRank(a) - instructionRank(b) })
	for k, i := range out {
		if i == nil {
			return nil, fmt.Errorf("nil instruction: %w", ErrMalformed)
		}
		if k > 0 && instructionRank(i) < 6 && instructionRank(i) == instructionRank(out[k-1]) {
			return nil, fmt.Errorf("%s twice: %w", instructionName(i), ErrMalformed)
		}
	}
	return out, nil
}

// AppendInstructions appends the encoding of ins for version v to b, in the
// order Open vSwitch uses (meter, apply_actions, clear_actions,
// write_actions, write_metadata, goto_table) whatever the order of ins. Each
// instruction type may appear once. In OF1.5 a Meter becomes the first
// action of apply_actions. On error b is returned unchanged.
func AppendInstructions(b []byte, v Version, ins []Instruction) ([]byte, error) {
	sorted, err := sortInstructions(ins)
	if err != nil {
		return b, fmt.Errorf("instructions: %w", err)
	}
	start := len(b)
	for k := 0; k < len(sorted); k++ {
		i := sorted[k]
		if m, ok := i.(Meter); ok && v >= Version15 {
			var acts []Action
			if k+1 < len(sorted) {
				if aa, ok := sorted[k+1].(ApplyActions); ok {
					acts = aa.Actions
					k++
				}
			}
			if b, err = appendActionsInstruction(b, v, itApplyActions, &m, acts); err != nil {
				return b[:start], fmt.Errorf("instruction meter+apply_actions: %w", err)
			}
			continue
		}
		if b, err = i.appendInstruction(b, v); err != nil {
			return b[:start], fmt.Errorf("instruction %s: %w", instructionName(i), err)
		}
	}
	return b, nil
}

// UnmarshalInstructions decodes b, which must hold exactly one list of
// instructions, as sent with version v. The result is in Open vSwitch's
// order. In OF1.5 a meter action at the head of apply_actions comes back as
// a Meter instruction (followed by an ApplyActions of the remaining actions,
// if any). Decoded values never reference b.
func UnmarshalInstructions(b []byte, v Version) ([]Instruction, error) {
	var ins []Instruction
	var seen [8]bool // wire types 0..7 seen so far
	for k := 0; len(b) > 0; k++ {
		if len(b) < 4 {
			return nil, fmt.Errorf("instruction %d: header: need 4 bytes, have %d: %w", k, len(b), io.ErrUnexpectedEOF)
		}
		t := binary.BigEndian.Uint16(b[0:2])
		n := int(binary.BigEndian.Uint16(b[2:4]))
		name := instructionTypeName(t)
		if n < 8 || n%8 != 0 {
			return nil, fmt.Errorf("instruction %d (%s): length %d is not a positive multiple of 8: %w", k, name, n, ErrMalformed)
		}
		if n > len(b) {
			return nil, fmt.Errorf("instruction %d (%s): length %d, have %d bytes: %w", k, name, n, len(b), io.ErrUnexpectedEOF)
		}
		if t < uint16(len(seen)) {
			if seen[t] {
				return nil, fmt.Errorf("instruction %d (%s): %s twice: %w", k, name, name, ErrMalformed)
			}
			seen[t] = true
		}
		got, err := decodeInstruction(b[:n], v)
		if err != nil {
			return nil, fmt.Errorf("instruction %d (%s): %w", k, name, err)
		}
		ins = append(ins, got...)
		b = b[n:]
	}
	sorted, err := sortInstructions(ins)
	if err != nil {
		return nil, fmt.Errorf("instructions: %w", err)
	}
	return sorted, nil
}

func instructionTypeName(t uint16) string {
	switch t {
	case itGotoTable:
		return "goto_table"
	case itWriteMetadata:
		return "write_metadata"
	case itWriteActions:
		return "write_actions"
	case itApplyActions:
		return "apply_actions"
	case itClearActions:
		return "clear_actions"
	case itMeter:
		return "meter"
	}
	return fmt.Sprintf("type %d", t)
}

// decodeInstruction decodes one instruction (b is exactly its length). An
// OF1.5 apply_actions led by a meter action yields two instructions.
func decodeInstruction(b []byte, v Version) ([]Instruction, error) {
	t := binary.BigEndian.Uint16(b[0:2])
	switch {
	case t == itGotoTable:
		if err := fixedLen(b, 8); err != nil {
			return nil, err
		}
		return []Instruction{GotoTable{Table: b[4]}}, nil
	case t == itWriteMetadata:
		if err := fixedLen(b, 24); err != nil {
			return nil, err
		}
		return []Instruction{WriteMetadata{Metadata: binary.BigEndian.Uint64(b[8:16]), Mask: binary.BigEndian.Uint64(b[16:24])}}, nil
	case t == itClearActions:
		if err := fixedLen(b, 8); err != nil {
			return nil, err
		}
		return []Instruction{ClearActions{}}, nil
	case t == itMeter && v < Version15:
		if err := fixedLen(b, 8); err != nil {
			return nil, err
		}
		return []Instruction{Meter{ID: binary.BigEndian.Uint32(b[4:8])}}, nil
	case t == itWriteActions:
		acts, err := unmarshalActions(b[8:], v, actCtxTop)
		if err != nil {
			return nil, err
		}
		return []Instruction{WriteActions{Actions: acts}}, nil
	case t == itApplyActions:
		acts, err := unmarshalActions(b[8:], v, actCtxTop)
		if err != nil {
			return nil, err
		}
		if len(acts) > 0 && v >= Version15 {
			if m, ok := acts[0].(Meter); ok {
				if len(acts) == 1 {
					return []Instruction{m}, nil
				}
				return []Instruction{m, ApplyActions{Actions: acts[1:]}}, nil
			}
		}
		return []Instruction{ApplyActions{Actions: acts}}, nil
	}
	return []Instruction{RawInstruction{Data: clone(b)}}, nil
}

// InstructionsString renders ins exactly as ovs-ofctl prints a flow's
// actions after "actions=": e.g. "meter:1,ct(commit,zone=5),goto_table:10",
// or "drop" when there is nothing to do.
func InstructionsString(ins []Instruction) string {
	sorted := slices.Clone(ins)
	slices.SortStableFunc(sorted, func(a, b Instruction) int { return instructionRank(a) - instructionRank(b) })
	var parts []string
	for _, i := range sorted {
		if i == nil {
			continue
		}
		if s := i.String(); s != "" {
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return "drop"
	}
	return strings.Join(parts, ",")
}
