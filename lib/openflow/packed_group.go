package openflow

import (
	"encoding/binary"
	"fmt"
)

// PackedGroup is a group held as the body of its OpenFlow 1.5 group mod
// (the command aside): type, id, buckets with their actions and the
// selection property as bytes, as PackedFlow holds a flow. It takes a
// fraction of a GroupEntry's memory and becomes a group mod without being
// encoded again.
//
// The zero PackedGroup is not a group; make one with PackGroup.
type PackedGroup struct {
	wire    string // group mod body (OF1.5) after the command
	ID      uint32
	Type    GroupType
	Buckets int32 // how many
}

// PackGroup encodes g as a PackedGroup. It fails when g does not encode in
// OpenFlow 1.5 (an action that does not, duplicate bucket ids, ...), and
// with ErrTooLong when its buckets take more than one group mod can carry
// (64 KiB): such a group is installed in several messages (see
// GroupEntry.Mods), and is best held as a GroupEntry.
func PackGroup(g *GroupEntry) (PackedGroup, error) { return PackGroupInto(nil, g) }

// PackGroupInto is PackGroup with buf as scratch space for the encoding,
// which the result does not keep.
func PackGroupInto(buf []byte, g *GroupEntry) (PackedGroup, error) {
	b, err := g.AddMod().appendGroupMod(buf[:0], Version15)
	if err != nil {
		return PackedGroup{}, fmt.Errorf("pack group %d: %w", g.ID, err)
	}
	return PackedGroup{wire: string(b[2:]), ID: g.ID, Type: g.Type, Buckets: int32(len(g.Buckets))}, nil
}

// Equal reports whether p and q hold the same group, byte for byte.
func (p *PackedGroup) Equal(q *PackedGroup) bool {
	return p.ID == q.ID && p.Type == q.Type && p.wire == q.wire
}

// MessageLen returns the length of p's group mod in OpenFlow 1.5, its
// header included, as Marshal would encode it.
func (p *PackedGroup) MessageLen() int { return HeaderLen + 2 + len(p.wire) }

// IsZero reports whether p is the zero PackedGroup, which holds no group.
func (p *PackedGroup) IsZero() bool { return p.wire == "" }

// Unpack decodes p into a GroupEntry.
func (p *PackedGroup) Unpack() (GroupEntry, error) {
	if p.IsZero() {
		return GroupEntry{}, fmt.Errorf("unpack group: empty: %w", ErrMalformed)
	}
	b := make([]byte, 2, 2+len(p.wire))
	binary.BigEndian.PutUint16(b, uint16(GroupAdd))
	var m GroupMod
	if err := m.unmarshal(Version15, append(b, p.wire...)); err != nil {
		return GroupEntry{}, fmt.Errorf("unpack group %d: %w", p.ID, err)
	}
	return m.Group(), nil
}

// String renders p as GroupEntry.String does, or a note that it does not
// decode.
func (p *PackedGroup) String() string {
	g, err := p.Unpack()
	if err != nil {
		return fmt.Sprintf("group_id=%d <%v>", p.ID, err)
	}
	return g.String()
}

// Mods returns the messages that apply cmd to p, as GroupEntry.Mods does:
// in OpenFlow 1.5 a group that fits in maxLen is one message that copies
// p's bytes; otherwise it is decoded and split, or encoded for v.
func (p *PackedGroup) Mods(cmd GroupModCommand, v Version, maxLen int) ([]Message, error) {
	if maxLen <= 0 {
		maxLen = MaxMessageLen - bundleAddOverhead
	}
	maxLen = min(maxLen, MaxMessageLen)
	if cmd == GroupDelete {
		return []Message{GroupEntry{ID: p.ID, Type: p.Type}.DeleteMod()}, nil
	}
	if v == Version15 && HeaderLen+2+len(p.wire) <= maxLen && (cmd == GroupAdd || cmd == GroupModify || cmd == GroupAddOrModify) {
		return []Message{&PackedGroupMod{Command: cmd, Group: p}}, nil
	}
	g, err := p.Unpack()
	if err != nil {
		return nil, err
	}
	mods, err := g.Mods(cmd, v, maxLen)
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(mods))
	for i, m := range mods {
		out[i] = m
	}
	return out, nil
}

// PackedGroupMod adds or modifies a PackedGroup (GroupAdd, GroupModify,
// GroupAddOrModify). In OpenFlow 1.5 its encoding is a copy of the packed
// bytes; other versions encode it afresh.
type PackedGroupMod struct {
	Command GroupModCommand
	Group   *PackedGroup
}

func (m *PackedGroupMod) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	p := m.Group
	if p == nil || p.IsZero() {
		return TypeGroupMod, b, fmt.Errorf("group mod: empty packed group: %w", ErrMalformed)
	}
	switch m.Command {
	case GroupAdd, GroupModify, GroupAddOrModify:
	default:
		return TypeGroupMod, b, fmt.Errorf("group mod: command %s of a packed group: %w", m.Command, ErrUnsupported)
	}
	if v != Version15 {
		g, err := p.Unpack()
		if err != nil {
			return TypeGroupMod, b, fmt.Errorf("group mod: %w", err)
		}
		return g.Mod(m.Command).appendBody(b, v)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(m.Command))
	return TypeGroupMod, append(b, p.wire...), nil
}

// String renders the group mod as GroupMod.String does.
func (m *PackedGroupMod) String() string {
	g, err := m.Group.Unpack()
	if err != nil {
		return fmt.Sprintf("%s group_id=%d <%v>", m.Command, m.Group.ID, err)
	}
	return g.Mod(m.Command).String()
}

// groupMod15Fixed is the length of an OpenFlow 1.5 group mod body after its
// command: type, pad, group_id, bucket_array_len, pad, command_bucket_id.
const groupMod15Fixed = 14

// SameAsDesc reports whether a group desc entry of version v, as
// EachGroupDesc gives it, holds p's group byte for byte: the same type and
// id, and the same encoding of its buckets and properties. It decodes
// nothing; a group that the switch encodes otherwise than this package
// (another order of properties, say) is not the same by this test and
// must be compared decoded.
func (p *PackedGroup) SameAsDesc(entry []byte, v Version) bool {
	if v != Version15 || len(entry) < groupDesc15Len || len(p.wire) < groupMod15Fixed {
		return false
	}
	if GroupType(entry[2]) != p.Type || binary.BigEndian.Uint32(entry[4:8]) != p.ID {
		return false
	}
	// The bucket list's length, then buckets and properties.
	return string(entry[8:10]) == p.wire[6:8] && string(entry[groupDesc15Len:]) == p.wire[groupMod15Fixed:]
}
