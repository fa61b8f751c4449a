package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// GroupModCommand is ofp_group_mod_command (OFPGC15_* in OF1.5).
type GroupModCommand uint16

// Group mod commands. InsertBucket and RemoveBucket exist only in OF1.5.
const (
	GroupAdd          GroupModCommand = 0
	GroupModify       GroupModCommand = 1
	GroupDelete       GroupModCommand = 2
	GroupInsertBucket GroupModCommand = 3
	GroupRemoveBucket GroupModCommand = 5
	// GroupAddOrModify is Open vSwitch's OFPGC_ADD_OR_MOD extension: add the
	// group, or replace it if it exists.
	GroupAddOrModify GroupModCommand = 0x8000
)

// String returns the command as ofp-print spells it.
func (c GroupModCommand) String() string {
	switch c {
	case GroupAdd:
		return "ADD"
	case GroupModify:
		return "MOD"
	case GroupDelete:
		return "DEL"
	case GroupInsertBucket:
		return "INSERT_BUCKET"
	case GroupRemoveBucket:
		return "REMOVE_BUCKET"
	case GroupAddOrModify:
		return "ADD_OR_MOD"
	}
	return fmt.Sprintf("command(%d)", uint16(c))
}

// bucketCommand reports whether c uses command_bucket_id.
func (c GroupModCommand) bucketCommand() bool {
	return c == GroupInsertBucket || c == GroupRemoveBucket
}

// GroupType is ofp_group_type.
type GroupType uint8

// Group types.
const (
	GroupTypeAll          GroupType = 0
	GroupTypeSelect       GroupType = 1
	GroupTypeIndirect     GroupType = 2
	GroupTypeFastFailover GroupType = 3
)

// String returns the type as ovs-ofctl spells it: all, select, indirect, ff.
func (t GroupType) String() string {
	switch t {
	case GroupTypeAll:
		return "all"
	case GroupTypeSelect:
		return "select"
	case GroupTypeIndirect:
		return "indirect"
	case GroupTypeFastFailover:
		return "ff"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Special bucket ids (OFPG15_BUCKET_*) for CommandBucketID.
const (
	// BucketMax is the largest bucket id a bucket may have.
	BucketMax uint32 = 0xffffff00
	// BucketFirst inserts before the first bucket, or removes the first one.
	BucketFirst uint32 = 0xfffffffd
	// BucketLast inserts after the last bucket, or removes the last one.
	BucketLast uint32 = 0xfffffffe
	// BucketAll removes every bucket; the value of every other command.
	BucketAll uint32 = 0xffffffff
)

// bucketIDString renders a command bucket id as ofp-print does.
func bucketIDString(id uint32) string {
	switch id {
	case BucketFirst:
		return "first"
	case BucketLast:
		return "last"
	case BucketAll:
		return "all"
	}
	return fmt.Sprint(id)
}

// Bucket is one action bucket of a group.
//
// In OF1.3 bucket ids are not on the wire; decoded OF1.3 buckets are
// numbered 0, 1, ... as Open vSwitch numbers them.
type Bucket struct {
	// ID identifies the bucket in OF1.5 (0 ... BucketMax). The buckets of a
	// group must have distinct ids.
	ID uint32
	// Weight is the bucket's share of a select group's traffic; 0 means the
	// bucket is never chosen (ovs-ofctl's default is 1). Other group types
	// must leave it 0.
	Weight uint16
	// WatchPort is the port whose liveness decides whether the bucket is
	// live (fast-failover groups); 0 means none. It is OFPP_ANY on the wire.
	WatchPort uint32
	// WatchGroup is the group whose liveness decides whether the bucket is
	// live; 0 means none (group 0 cannot be watched). It is OFPG_ANY on the
	// wire.
	WatchGroup uint32
	Actions    []Action
}

// GroupMod is OFPT_GROUP_MOD (type 15), in the OF1.1-1.4 layout for OF1.3
// and in the OF1.5 layout (bucket ids, bucket properties, group properties)
// for OF1.5.
type GroupMod struct {
	Command GroupModCommand
	Type    GroupType
	GroupID uint32
	// CommandBucketID is the bucket an OF1.5 InsertBucket inserts before
	// (BucketFirst, BucketLast or an id) or a RemoveBucket removes
	// (BucketFirst, BucketLast, BucketAll or an id). Other commands always
	// send BucketAll, and decode as BucketAll.
	CommandBucketID uint32
	Buckets         []Bucket
	// SelectionMethod is the OF1.5 select-group selection method, "hash" or
	// "dp_hash"; "" leaves it to Open vSwitch. It travels in a Netronome
	// experimenter group property that OF1.3 cannot carry.
	SelectionMethod string
	// SelectionFields are the fields the "hash" method hashes. Each Field's
	// Value is the mask applied to the packet field (all ones for the whole
	// field) and its Mask is nil.
	SelectionFields []Field
	// SelectionParam is the method's parameter: the hash basis for "hash",
	// the hash algorithm (upper 32 bits) and basis (lower 32) for "dp_hash".
	SelectionParam uint64
}

// Group returns the group a group mod describes.
func (m *GroupMod) Group() GroupEntry {
	return GroupEntry{
		ID:              m.GroupID,
		Type:            m.Type,
		Buckets:         m.Buckets,
		SelectionMethod: m.SelectionMethod,
		SelectionFields: m.SelectionFields,
		SelectionParam:  m.SelectionParam,
	}
}

// String renders the group mod as ofp-print does, e.g.
// "ADD group_id=1,type=all,bucket=bucket_id:0,actions=output:1".
func (m *GroupMod) String() string {
	if !m.Command.bucketCommand() {
		return m.Command.String() + " " + m.Group().String()
	}
	// Bucket commands do not restate the group's type.
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s command_bucket_id:%s,group_id=%d", m.Command, bucketIDString(m.CommandBucketID), m.GroupID)
	for i := range m.Buckets {
		sb.WriteString(",bucket=")
		m.Buckets[i].format(&sb, m.Type)
	}
	return sb.String()
}

// Fixed sizes of the group structures.
const (
	groupMod13Len = 8  // ofp_group_mod after the header
	groupMod15Len = 16 // ofp15_group_mod after the header
	bucket13Len   = 16 // ofp_bucket
	bucket15Len   = 8  // ofp15_bucket
)

// OF1.5 group bucket property types.
const (
	bucketPropWeight     = 0
	bucketPropWatchPort  = 1
	bucketPropWatchGroup = 2
)

// Netronome experimenter ids and type of the selection method group property.
const (
	ntrExperimenter       uint32 = 0x0000154d
	ntrExperimenterCompat uint32 = 0x00001540 // sent by OVS 2.4
	ntrSelectionMethod    uint32 = 1
	selectionPropLen             = 40 // without the fields
	selectionMethodLen           = 16 // NUL-terminated name
)

func (m *GroupMod) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b, err := m.appendGroupMod(b, v)
	return TypeGroupMod, b, err
}

// appendGroupMod appends the group mod body.
//
// OF1.1-1.4:
//
//	2 bytes: command
//	1 byte: type
//	1 byte: pad
//	4 bytes: group_id
//	buckets (ofp_bucket)
//
// OF1.5:
//
//	2 bytes: command
//	1 byte: type
//	1 byte: pad
//	4 bytes: group_id
//	2 bytes: bucket_array_len
//	2 bytes: pad
//	4 bytes: command_bucket_id
//	buckets (ofp15_bucket), then group properties
func (m *GroupMod) appendGroupMod(b []byte, v Version) ([]byte, error) {
	if !versionOK(v) {
		return b, fmt.Errorf("group mod: %w", errVersion(v))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(m.Command))
	b = append(b, uint8(m.Type), 0)
	b = binary.BigEndian.AppendUint32(b, m.GroupID)
	if v < Version15 {
		if m.Command.bucketCommand() {
			return b, fmt.Errorf("group mod: command %s needs OF1.5: %w", m.Command, ErrUnsupported)
		}
		if m.SelectionMethod != "" || len(m.SelectionFields) > 0 || m.SelectionParam != 0 {
			return b, fmt.Errorf("group mod: selection method needs OF1.5: %w", ErrUnsupported)
		}
		return appendBuckets13(b, v, m.Buckets)
	}
	lenAt := len(b)
	b = append(b, 0, 0, 0, 0)
	cbid := BucketAll
	if m.Command.bucketCommand() {
		cbid = m.CommandBucketID
	}
	b = binary.BigEndian.AppendUint32(b, cbid)
	start := len(b)
	b, err := appendBuckets15(b, v, m.Type, m.Buckets)
	if err != nil {
		return b, err
	}
	n := len(b) - start
	if n > 0xffff {
		return b, fmt.Errorf("group mod: buckets: %d bytes: %w", n, ErrTooLong)
	}
	binary.BigEndian.PutUint16(b[lenAt:], uint16(n))
	return appendSelectionProp(b, m.SelectionMethod, m.SelectionParam, m.SelectionFields)
}

// appendBuckets13 appends OF1.1-1.4 buckets.
//
//	2 bytes: len (bucket and its actions)
//	2 bytes: weight
//	4 bytes: watch_port (OFPP_ANY = none)
//	4 bytes: watch_group (OFPG_ANY = none)
//	4 bytes: pad
//	actions
func appendBuckets13(b []byte, v Version, buckets []Bucket) ([]byte, error) {
	for i := range buckets {
		bk := &buckets[i]
		start := len(b)
		b = append(b, 0, 0)
		b = binary.BigEndian.AppendUint16(b, bk.Weight)
		b = binary.BigEndian.AppendUint32(b, wireWatch(bk.WatchPort))
		b = binary.BigEndian.AppendUint32(b, wireWatch(bk.WatchGroup))
		b = append(b, 0, 0, 0, 0)
		var err error
		if b, err = AppendActions(b, v, bk.Actions); err != nil {
			return b, fmt.Errorf("group mod: bucket %d: actions: %w", i, err)
		}
		n := len(b) - start
		if n > 0xffff {
			return b, fmt.Errorf("group mod: bucket %d: %d bytes: %w", i, n, ErrTooLong)
		}
		binary.BigEndian.PutUint16(b[start:], uint16(n))
	}
	return b, nil
}

// appendBuckets15 appends OF1.5 buckets.
//
//	2 bytes: len (bucket, actions and properties)
//	2 bytes: action_array_len
//	4 bytes: bucket_id
//	actions
//	properties: weight (select groups, or when non-zero), watch_port,
//	watch_group (when set), each type(2) len(2)=8 value
func appendBuckets15(b []byte, v Version, t GroupType, buckets []Bucket) ([]byte, error) {
	if err := checkBucketIDs(buckets); err != nil {
		return b, fmt.Errorf("group mod: %w", err)
	}
	for i := range buckets {
		bk := &buckets[i]
		start := len(b)
		b = append(b, 0, 0, 0, 0)
		b = binary.BigEndian.AppendUint32(b, bk.ID)
		var err error
		if b, err = AppendActions(b, v, bk.Actions); err != nil {
			return b, fmt.Errorf("group mod: bucket %d: actions: %w", bk.ID, err)
		}
		actLen := len(b) - start - bucket15Len
		if t == GroupTypeSelect || bk.Weight != 0 {
			b = append(b, 0, bucketPropWeight, 0, 8)
			b = binary.BigEndian.AppendUint16(b, bk.Weight)
			b = append(b, 0, 0)
		}
		if bk.WatchPort != 0 && bk.WatchPort != PortAny {
			b = append(b, 0, bucketPropWatchPort, 0, 8)
			b = binary.BigEndian.AppendUint32(b, bk.WatchPort)
		}
		if bk.WatchGroup != 0 && bk.WatchGroup != GroupAny {
			b = append(b, 0, bucketPropWatchGroup, 0, 8)
			b = binary.BigEndian.AppendUint32(b, bk.WatchGroup)
		}
		n := len(b) - start
		if n > 0xffff {
			return b, fmt.Errorf("group mod: bucket %d: %d bytes: %w", bk.ID, n, ErrTooLong)
		}
		binary.BigEndian.PutUint16(b[start:], uint16(n))
		binary.BigEndian.PutUint16(b[start+2:], uint16(actLen))
	}
	return b, nil
}

// checkBucketIDs rejects duplicate bucket ids, which Open vSwitch refuses.
// Ids in increasing order, the usual case, need no map.
func checkBucketIDs(buckets []Bucket) error {
	sorted := true
	for i := 1; i < len(buckets); i++ {
		if buckets[i].ID <= buckets[i-1].ID {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	seen := make(map[uint32]struct{}, len(buckets))
	for i := range buckets {
		if _, dup := seen[buckets[i].ID]; dup {
			return fmt.Errorf("bucket %d: duplicate bucket id %d: %w", i, buckets[i].ID, ErrMalformed)
		}
		seen[buckets[i].ID] = struct{}{}
	}
	return nil
}

// wireWatch maps a watch port or group of 0 (none) to the wire's "any".
func wireWatch(w uint32) uint32 {
	if w == 0 {
		return 0xffffffff
	}
	return w
}

// appendSelectionProp appends the Netronome selection method group property
// when a method is set.
//
//	2 bytes: type = 0xffff (experimenter)
//	2 bytes: length, without trailing padding = 40 + fields
//	4 bytes: experimenter = 0x0000154d
//	4 bytes: exp_type = 1 (selection method)
//	4 bytes: pad
//	16 bytes: selection_method, NUL-terminated
//	8 bytes: selection_method_param
//	OXM fields (value = mask, no OXM mask bit), then padding to 8
func appendSelectionProp(b []byte, method string, param uint64, fields []Field) ([]byte, error) {
	if method == "" {
		if param != 0 || len(fields) > 0 {
			return b, fmt.Errorf("group mod: selection method param or fields without a method: %w", ErrMalformed)
		}
		return b, nil
	}
	if len(method) >= selectionMethodLen {
		return b, fmt.Errorf("group mod: selection method %q longer than %d bytes: %w", method, selectionMethodLen-1, ErrMalformed)
	}
	start := len(b)
	b = append(b, 0xff, 0xff, 0, 0)
	b = binary.BigEndian.AppendUint32(b, ntrExperimenter)
	b = binary.BigEndian.AppendUint32(b, ntrSelectionMethod)
	b = append(b, 0, 0, 0, 0)
	b = append(b, method...)
	b = appendZeros(b, selectionMethodLen-len(method))
	b = binary.BigEndian.AppendUint64(b, param)
	for i, f := range fields {
		if f.Mask != nil {
			return b, fmt.Errorf("group mod: selection field %d: has a mask; put the mask in Value: %w", i, ErrMalformed)
		}
		var err error
		if b, err = AppendOXM(b, f); err != nil {
			return b, fmt.Errorf("group mod: selection field %d: %w", i, err)
		}
	}
	n := len(b) - start
	if n > 0xffff {
		return b, fmt.Errorf("group mod: selection fields: %w", ErrTooLong)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	return appendZeros(b, pad8(n)), nil
}

func decodeGroupMod(h Header, body []byte) (Message, error) {
	m := new(GroupMod)
	if err := m.unmarshal(h.Version, body); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *GroupMod) unmarshal(v Version, b []byte) error {
	if !versionOK(v) {
		return fmt.Errorf("group mod: %w", errVersion(v))
	}
	fixed := groupMod13Len
	if v >= Version15 {
		fixed = groupMod15Len
	}
	if err := need(b, fixed, "group mod"); err != nil {
		return err
	}
	*m = GroupMod{
		Command: GroupModCommand(binary.BigEndian.Uint16(b[0:2])),
		Type:    GroupType(b[2]),
		GroupID: binary.BigEndian.Uint32(b[4:8]),
	}
	var err error
	if v < Version15 {
		if m.Command.bucketCommand() {
			return fmt.Errorf("group mod: command %s needs OF1.5: %w", m.Command, ErrUnsupported)
		}
		m.Buckets, err = unmarshalBuckets13(b[8:], v)
		if err != nil {
			return fmt.Errorf("group mod: %w", err)
		}
		return nil
	}
	bucketLen := int(binary.BigEndian.Uint16(b[8:10]))
	m.CommandBucketID = binary.BigEndian.Uint32(b[12:16])
	if !m.Command.bucketCommand() && m.CommandBucketID != BucketAll {
		return fmt.Errorf("group mod: command %s with command_bucket_id %d: %w", m.Command, m.CommandBucketID, ErrMalformed)
	}
	rest := b[groupMod15Len:]
	if err := need(rest, bucketLen, "group mod: buckets"); err != nil {
		return err
	}
	m.Buckets, err = unmarshalBuckets15(rest[:bucketLen], v, m.Type)
	if err != nil {
		return fmt.Errorf("group mod: %w", err)
	}
	sel, err := unmarshalGroupProps(rest[bucketLen:])
	if err != nil {
		return fmt.Errorf("group mod: %w", err)
	}
	m.SelectionMethod, m.SelectionParam, m.SelectionFields = sel.method, sel.param, sel.fields
	return nil
}

// unmarshalBuckets13 decodes OF1.1-1.4 buckets filling b, numbering them
// 0, 1, ...
func unmarshalBuckets13(b []byte, v Version) ([]Bucket, error) {
	var buckets []Bucket
	for i := 0; len(b) > 0; i++ {
		if err := need(b, bucket13Len, fmt.Sprintf("bucket %d", i)); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint16(b[0:2]))
		if n < bucket13Len || n > len(b) {
			return nil, fmt.Errorf("bucket %d: length %d of %d bytes: %w", i, n, len(b), ErrMalformed)
		}
		bk := Bucket{ID: uint32(i), Weight: binary.BigEndian.Uint16(b[2:4])}
		var err error
		if bk.WatchPort, err = decodeWatch(binary.BigEndian.Uint32(b[4:8]), "watch_port"); err != nil {
			return nil, fmt.Errorf("bucket %d: %w", i, err)
		}
		if bk.WatchGroup, err = decodeWatch(binary.BigEndian.Uint32(b[8:12]), "watch_group"); err != nil {
			return nil, fmt.Errorf("bucket %d: %w", i, err)
		}
		if bk.Actions, err = UnmarshalActions(b[bucket13Len:n], v); err != nil {
			return nil, fmt.Errorf("bucket %d: actions: %w", i, err)
		}
		buckets = append(buckets, bk)
		b = b[n:]
	}
	return buckets, nil
}

// decodeWatch maps the wire's "any" to 0 and refuses a real 0, which
// Bucket cannot represent.
func decodeWatch(w uint32, what string) (uint32, error) {
	switch w {
	case 0xffffffff:
		return 0, nil
	case 0:
		return 0, fmt.Errorf("%s 0: %w", what, ErrUnsupported)
	}
	return w, nil
}

// unmarshalBuckets15 decodes OF1.5 buckets filling b. A select bucket
// without a weight property has weight 1, as in Open vSwitch.
func unmarshalBuckets15(b []byte, v Version, t GroupType) ([]Bucket, error) {
	var buckets []Bucket
	for i := 0; len(b) > 0; i++ {
		if err := need(b, bucket15Len, fmt.Sprintf("bucket %d", i)); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint16(b[0:2]))
		actLen := int(binary.BigEndian.Uint16(b[2:4]))
		bk := Bucket{ID: binary.BigEndian.Uint32(b[4:8])}
		if n < bucket15Len || n > len(b) || bucket15Len+actLen > n {
			return nil, fmt.Errorf("bucket %d: length %d, actions %d, of %d bytes: %w", bk.ID, n, actLen, len(b), ErrMalformed)
		}
		var err error
		if bk.Actions, err = UnmarshalActions(b[bucket15Len:bucket15Len+actLen], v); err != nil {
			return nil, fmt.Errorf("bucket %d: actions: %w", bk.ID, err)
		}
		if t == GroupTypeSelect {
			bk.Weight = 1
		}
		err = forEachProp(b[bucket15Len+actLen:n], func(typ uint16, p []byte) error {
			switch typ {
			case bucketPropWeight:
				if len(p) != 4 {
					return fmt.Errorf("weight property: length %d: %w", len(p)+4, ErrMalformed)
				}
				bk.Weight = binary.BigEndian.Uint16(p)
			case bucketPropWatchPort, bucketPropWatchGroup:
				what := "watch_port"
				if typ == bucketPropWatchGroup {
					what = "watch_group"
				}
				if len(p) != 4 {
					return fmt.Errorf("%s property: length %d: %w", what, len(p)+4, ErrMalformed)
				}
				w, err := decodeWatch(binary.BigEndian.Uint32(p), what)
				if err != nil {
					return err
				}
				if typ == bucketPropWatchPort {
					bk.WatchPort = w
				} else {
					bk.WatchGroup = w
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("bucket %d: %w", bk.ID, err)
		}
		buckets = append(buckets, bk)
		b = b[n:]
	}
	if err := checkBucketIDs(buckets); err != nil {
		return nil, err
	}
	return buckets, nil
}

// selection is the content of the selection method group property.
type selection struct {
	method string
	param  uint64
	fields []Field
}

// unmarshalGroupProps decodes OF1.5 group properties, keeping the selection
// method and skipping the others.
func unmarshalGroupProps(b []byte) (selection, error) {
	var sel selection
	err := forEachProp(b, func(typ uint16, p []byte) error {
		if typ != 0xffff || len(p) < 8 {
			return nil
		}
		exp := binary.BigEndian.Uint32(p[0:4])
		if (exp != ntrExperimenter && exp != ntrExperimenterCompat) || binary.BigEndian.Uint32(p[4:8]) != ntrSelectionMethod {
			return nil
		}
		if len(p) < selectionPropLen-4 {
			return fmt.Errorf("selection method property: length %d: %w", len(p)+4, io.ErrUnexpectedEOF)
		}
		name := p[12 : 12+selectionMethodLen]
		end := 0
		for end < len(name) && name[end] != 0 {
			end++
		}
		if end == len(name) {
			return fmt.Errorf("selection method property: name not NUL-terminated: %w", ErrMalformed)
		}
		for _, c := range name[end:] {
			if c != 0 {
				return fmt.Errorf("selection method property: bytes after the name: %w", ErrMalformed)
			}
		}
		if end == 0 {
			return fmt.Errorf("selection method property: empty name: %w", ErrMalformed)
		}
		sel.method = string(name[:end])
		sel.param = binary.BigEndian.Uint64(p[28:36])
		sel.fields = nil
		for f := p[36:]; len(f) > 0; {
			fld, n, err := UnmarshalOXM(f)
			if err != nil {
				return fmt.Errorf("selection method property: field %d: %w", len(sel.fields), err)
			}
			if fld.Mask != nil {
				return fmt.Errorf("selection method property: field %d: has a mask: %w", len(sel.fields), ErrMalformed)
			}
			sel.fields = append(sel.fields, fld)
			f = f[n:]
		}
		return nil
	})
	return sel, err
}

// forEachProp walks a list of OpenFlow properties: each is type(2) len(2)
// payload, len counting the 4 header bytes but not the zero padding that
// aligns the next property to 8 bytes. fn gets each payload (without the
// header and padding). The last property's padding may be missing.
func forEachProp(b []byte, fn func(typ uint16, payload []byte) error) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return fmt.Errorf("property header: %w", io.ErrUnexpectedEOF)
		}
		typ := binary.BigEndian.Uint16(b[0:2])
		n := int(binary.BigEndian.Uint16(b[2:4]))
		if n < 4 {
			return fmt.Errorf("property type %d: length %d: %w", typ, n, ErrMalformed)
		}
		if n > len(b) {
			return fmt.Errorf("property type %d: length %d, have %d: %w", typ, n, len(b), io.ErrUnexpectedEOF)
		}
		if err := fn(typ, b[4:n]); err != nil {
			return err
		}
		n += pad8(n)
		if n > len(b) {
			n = len(b)
		}
		b = b[n:]
	}
	return nil
}

func init() {
	registerType(TypeGroupMod, decodeGroupMod)
}
