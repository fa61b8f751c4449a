package openflow

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// GroupEntry is one group table entry: the natural "one group" value, as a
// group desc reply describes it and as GroupMod installs it.
type GroupEntry struct {
	ID      uint32
	Type    GroupType
	Buckets []Bucket
	// SelectionMethod, SelectionFields and SelectionParam are as in GroupMod
	// (OF1.5 only).
	SelectionMethod string
	SelectionFields []Field
	SelectionParam  uint64
}

// String renders the group exactly as one line of
// `ovs-ofctl -O OpenFlow15 dump-groups` prints it, without the leading
// space, e.g.
// "group_id=2,type=select,selection_method=hash,fields(ip_src,tcp_dst),bucket=bucket_id:0,actions=output:1".
func (g GroupEntry) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "group_id=%d,type=%s", g.ID, g.Type)
	if g.SelectionMethod != "" {
		sb.WriteString(",selection_method=")
		sb.WriteString(g.SelectionMethod)
	}
	if g.SelectionParam != 0 {
		fmt.Fprintf(&sb, ",selection_method_param=%d", g.SelectionParam)
	}
	if len(g.SelectionFields) > 0 {
		sb.WriteString(",fields(")
		for i, f := range g.SelectionFields {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(fieldOVSName(f.Class, f.Field, f.Experimenter))
			if !allOnes(f.Value) {
				sb.WriteByte('=')
				sb.WriteString(FormatFieldValue(Field{Class: f.Class, Field: f.Field, Experimenter: f.Experimenter, Value: f.Value}))
			}
		}
		sb.WriteByte(')')
	}
	for i := range g.Buckets {
		sb.WriteString(",bucket=")
		g.Buckets[i].format(&sb, g.Type)
	}
	return sb.String()
}

// format writes the bucket as dump-groups does:
// "bucket_id:N,[weight:W,][watch_port:P,][watch_group:G,]actions=...".
func (bk *Bucket) format(sb *strings.Builder, t GroupType) {
	fmt.Fprintf(sb, "bucket_id:%d,", bk.ID)
	if t == GroupTypeSelect && bk.Weight != 1 {
		fmt.Fprintf(sb, "weight:%d,", bk.Weight)
	}
	if bk.WatchPort != 0 && bk.WatchPort != PortAny {
		fmt.Fprintf(sb, "watch_port:%s,", portString(bk.WatchPort))
	}
	if bk.WatchGroup != 0 && bk.WatchGroup != GroupAny {
		fmt.Fprintf(sb, "watch_group:%d,", bk.WatchGroup)
	}
	sb.WriteString("actions=")
	sb.WriteString(ActionsString(bk.Actions))
}

// Mod returns a group mod that applies cmd (GroupAdd, GroupModify,
// GroupAddOrModify or GroupDelete) to g. Deletes carry no buckets.
func (g GroupEntry) Mod(cmd GroupModCommand) *GroupMod {
	m := &GroupMod{Command: cmd, Type: g.Type, GroupID: g.ID, CommandBucketID: BucketAll}
	if cmd != GroupDelete {
		m.Buckets = g.Buckets
		m.SelectionMethod = g.SelectionMethod
		m.SelectionFields = g.SelectionFields
		m.SelectionParam = g.SelectionParam
	}
	return m
}

// AddMod returns a GroupAdd group mod for g.
func (g GroupEntry) AddMod() *GroupMod { return g.Mod(GroupAdd) }

// ModifyMod returns a GroupModify group mod that replaces g's type and
// buckets.
func (g GroupEntry) ModifyMod() *GroupMod { return g.Mod(GroupModify) }

// DeleteMod returns a GroupDelete group mod for g's id.
func (g GroupEntry) DeleteMod() *GroupMod { return g.Mod(GroupDelete) }

// bundleAddOverhead is what an OF1.4+ bundle add message adds around the
// message it carries: header, bundle_id, pad and flags.
const bundleAddOverhead = 16

// Mods returns the group mods that apply cmd (GroupAdd, GroupModify or
// GroupAddOrModify) to g, split so that each encodes to at most maxLen
// bytes (0 means MaxMessageLen less the 16 bytes a bundle add message adds).
// A group that fits comes back as one message. In OF1.5 a larger one is
// split the way Open vSwitch allows: the first message carries the group
// properties and as many buckets as fit, and GroupInsertBucket messages
// (CommandBucketID BucketLast) append the rest. Send them in one bundle so
// the switch never sees half a group. OF1.3 has no bucket insertion, so a
// group that does not fit is an ErrTooLong error.
func (g GroupEntry) Mods(cmd GroupModCommand, v Version, maxLen int) ([]*GroupMod, error) {
	if maxLen <= 0 {
		maxLen = MaxMessageLen - bundleAddOverhead
	}
	if maxLen > MaxMessageLen {
		maxLen = MaxMessageLen
	}
	if !versionOK(v) {
		return nil, fmt.Errorf("group %d: %w", g.ID, errVersion(v))
	}
	if cmd == GroupDelete {
		return []*GroupMod{g.DeleteMod()}, nil
	}
	if v >= Version15 {
		if err := checkBucketIDs(g.Buckets); err != nil {
			return nil, fmt.Errorf("group %d: %w", g.ID, err)
		}
	}
	first := g.Mod(cmd)
	first.Buckets = nil
	// The size of the first message without buckets.
	scratch, err := first.appendGroupMod(make([]byte, 0, 256), v)
	if err != nil {
		return nil, fmt.Errorf("group %d: %w", g.ID, err)
	}
	cur, curLen, start := first, HeaderLen+len(scratch), 0
	var mods []*GroupMod
	for i := range g.Buckets {
		scratch = scratch[:0]
		if v < Version15 {
			scratch, err = appendBuckets13(scratch, v, g.Buckets[i:i+1])
		} else {
			scratch, err = appendBuckets15(scratch, v, g.Type, g.Buckets[i:i+1])
		}
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", g.ID, err)
		}
		n := len(scratch)
		if curLen+n > maxLen {
			if v < Version15 {
				return nil, fmt.Errorf("group %d: %d buckets do not fit in %d bytes, and %s cannot insert buckets: %w", g.ID, len(g.Buckets), maxLen, v, ErrTooLong)
			}
			cur.Buckets = g.Buckets[start:i]
			mods = append(mods, cur)
			cur = &GroupMod{Command: GroupInsertBucket, Type: g.Type, GroupID: g.ID, CommandBucketID: BucketLast}
			curLen, start = HeaderLen+groupMod15Len, i
			if curLen+n > maxLen {
				return nil, fmt.Errorf("group %d: bucket %d alone takes %d bytes, more than %d: %w", g.ID, g.Buckets[i].ID, n, maxLen, ErrTooLong)
			}
		}
		curLen += n
	}
	cur.Buckets = g.Buckets[start:]
	return append(mods, cur), nil
}

// Group desc entry sizes.
const (
	groupDesc13Len = 8
	groupDesc15Len = 16
)

// unmarshalGroupDescs decodes the body of a group desc reply.
//
// OF1.1-1.4 entry:
//
//	2 bytes: length
//	1 byte: type
//	1 byte: pad
//	4 bytes: group_id
//	buckets (ofp_bucket)
//
// OF1.5 entry:
//
//	2 bytes: length
//	1 byte: type
//	1 byte: pad
//	4 bytes: group_id
//	2 bytes: bucket_list_len
//	6 bytes: pad
//	buckets (ofp15_bucket), then group properties
func unmarshalGroupDescs(b []byte, v Version) ([]GroupEntry, error) {
	var groups []GroupEntry
	err := EachGroupDesc(b, v, func(i int, id uint32, entry []byte) error {
		g, err := decodeGroupDesc(entry, v)
		if err != nil {
			return fmt.Errorf("group desc %d (group %d): %w", i, id, err)
		}
		groups = append(groups, g)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return groups, nil
}

// decodeGroupDesc decodes one group desc entry whose framing EachGroupDesc
// checked.
func decodeGroupDesc(entry []byte, v Version) (GroupEntry, error) {
	g := GroupEntry{Type: GroupType(entry[2]), ID: binary.BigEndian.Uint32(entry[4:8])}
	var err error
	if v < Version15 {
		g.Buckets, err = unmarshalBuckets13(entry[groupDesc13Len:], v)
		return g, err
	}
	bl := groupDesc15Len + int(binary.BigEndian.Uint16(entry[8:10]))
	if g.Buckets, err = unmarshalBuckets15(entry[groupDesc15Len:bl], v, g.Type); err != nil {
		return g, err
	}
	sel, err := unmarshalGroupProps(entry[bl:])
	g.SelectionMethod, g.SelectionParam, g.SelectionFields = sel.method, sel.param, sel.fields
	return g, err
}

// EachGroupDesc calls fn with each entry of a group desc reply body of
// version v, read in place: its group id and its bytes, the entry whole
// (DecodeGroupDesc decodes one). It checks the entries' framing only. The
// entries alias body.
func EachGroupDesc(body []byte, v Version, fn func(i int, id uint32, entry []byte) error) error {
	fixed := groupDesc13Len
	if v >= Version15 {
		fixed = groupDesc15Len
	}
	for i := 0; len(body) > 0; i++ {
		if err := need(body, fixed, fmt.Sprintf("group desc %d", i)); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(body[0:2]))
		id := binary.BigEndian.Uint32(body[4:8])
		if n < fixed || n > len(body) {
			return fmt.Errorf("group desc %d (group %d): length %d of %d bytes: %w", i, id, n, len(body), ErrMalformed)
		}
		if v >= Version15 && fixed+int(binary.BigEndian.Uint16(body[8:10])) > n {
			return fmt.Errorf("group desc %d (group %d): bucket list of %d bytes in %d: %w", i, id, binary.BigEndian.Uint16(body[8:10]), n, ErrMalformed)
		}
		if err := fn(i, id, body[:n:n]); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

// DecodeGroupDesc decodes one group desc entry of version v, as
// EachGroupDesc gives it.
func DecodeGroupDesc(entry []byte, v Version) (GroupEntry, error) {
	gs, err := unmarshalGroupDescs(entry, v)
	if err != nil {
		return GroupEntry{}, err
	}
	if len(gs) != 1 {
		return GroupEntry{}, fmt.Errorf("group desc: %d entries, want 1: %w", len(gs), ErrMalformed)
	}
	return gs[0], nil
}

// appendGroupDescs appends group desc reply entries.
func appendGroupDescs(b []byte, v Version, groups []GroupEntry) ([]byte, error) {
	for i := range groups {
		g := &groups[i]
		start := len(b)
		b = binary.BigEndian.AppendUint16(b, 0)
		b = append(b, uint8(g.Type), 0)
		b = binary.BigEndian.AppendUint32(b, g.ID)
		var err error
		if v < Version15 {
			if g.SelectionMethod != "" || g.SelectionParam != 0 || len(g.SelectionFields) > 0 {
				return b, fmt.Errorf("group desc %d: selection method needs OF1.5: %w", g.ID, ErrUnsupported)
			}
			b, err = appendBuckets13(b, v, g.Buckets)
		} else {
			b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
			bs := len(b)
			b, err = appendBuckets15(b, v, g.Type, g.Buckets)
			if err == nil {
				if len(b)-bs > 0xffff {
					return b, fmt.Errorf("group desc %d: buckets: %w", g.ID, ErrTooLong)
				}
				binary.BigEndian.PutUint16(b[start+8:], uint16(len(b)-bs))
				b, err = appendSelectionProp(b, g.SelectionMethod, g.SelectionParam, g.SelectionFields)
			}
		}
		if err != nil {
			return b, fmt.Errorf("group desc %d: %w", g.ID, err)
		}
		if len(b)-start > 0xffff {
			return b, fmt.Errorf("group desc %d: %w", g.ID, ErrTooLong)
		}
		binary.BigEndian.PutUint16(b[start:], uint16(len(b)-start))
	}
	return b, nil
}

// GroupStats is one entry of a group stats reply (the same in OF1.3 and
// OF1.5).
type GroupStats struct {
	GroupID     uint32
	RefCount    uint32 // flows and groups that forward to this group
	PacketCount uint64
	ByteCount   uint64
	Duration    time.Duration
	Buckets     []BucketCounter
}

// BucketCounter holds one bucket's counters, in bucket order.
type BucketCounter struct {
	PacketCount uint64
	ByteCount   uint64
}

// groupStatsLen is the fixed part of ofp_group_stats.
const groupStatsLen = 40

// unmarshalGroupStats decodes the body of a group stats reply.
//
//	2 bytes: length
//	2 bytes: pad
//	4 bytes: group_id
//	4 bytes: ref_count
//	4 bytes: pad
//	8 bytes: packet_count
//	8 bytes: byte_count
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	per bucket: packet_count (8), byte_count (8)
func unmarshalGroupStats(b []byte) ([]GroupStats, error) {
	var out []GroupStats
	for i := 0; len(b) > 0; i++ {
		if err := need(b, groupStatsLen, fmt.Sprintf("group stats %d", i)); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint16(b[0:2]))
		if n < groupStatsLen || n > len(b) || (n-groupStatsLen)%16 != 0 {
			return nil, fmt.Errorf("group stats %d: length %d of %d bytes: %w", i, n, len(b), ErrMalformed)
		}
		s := GroupStats{
			GroupID:     binary.BigEndian.Uint32(b[4:8]),
			RefCount:    binary.BigEndian.Uint32(b[8:12]),
			PacketCount: binary.BigEndian.Uint64(b[16:24]),
			ByteCount:   binary.BigEndian.Uint64(b[24:32]),
			Duration:    duration(b[32:40]),
		}
		for p := b[groupStatsLen:n]; len(p) > 0; p = p[16:] {
			s.Buckets = append(s.Buckets, BucketCounter{binary.BigEndian.Uint64(p[0:8]), binary.BigEndian.Uint64(p[8:16])})
		}
		out = append(out, s)
		b = b[n:]
	}
	return out, nil
}

// appendGroupStats appends group stats reply entries.
func appendGroupStats(b []byte, stats []GroupStats) ([]byte, error) {
	for i := range stats {
		s := &stats[i]
		n := groupStatsLen + 16*len(s.Buckets)
		if n > 0xffff {
			return b, fmt.Errorf("group stats %d: %d buckets: %w", s.GroupID, len(s.Buckets), ErrTooLong)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = append(b, 0, 0)
		b = binary.BigEndian.AppendUint32(b, s.GroupID)
		b = binary.BigEndian.AppendUint32(b, s.RefCount)
		b = append(b, 0, 0, 0, 0)
		b = binary.BigEndian.AppendUint64(b, s.PacketCount)
		b = binary.BigEndian.AppendUint64(b, s.ByteCount)
		b = appendDuration(b, s.Duration)
		for _, c := range s.Buckets {
			b = binary.BigEndian.AppendUint64(b, c.PacketCount)
			b = binary.BigEndian.AppendUint64(b, c.ByteCount)
		}
	}
	return b, nil
}

// duration decodes sec(4) nsec(4).
func duration(b []byte) time.Duration {
	return time.Duration(binary.BigEndian.Uint32(b[0:4]))*time.Second + time.Duration(binary.BigEndian.Uint32(b[4:8]))
}

// appendDuration encodes d as sec(4) nsec(4). Negative durations encode as 0;
// the nanoseconds of a decoded duration are kept below 1e9.
func appendDuration(b []byte, d time.Duration) []byte {
	if d < 0 {
		d = 0
	}
	b = binary.BigEndian.AppendUint32(b, uint32(d/time.Second))
	return binary.BigEndian.AppendUint32(b, uint32(d%time.Second))
}
