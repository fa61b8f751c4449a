package ofconn

import (
	"context"
	"errors"
	"fmt"

	"nodeflow/lib/openflow"
)

// BundledMessageLen returns the largest message that fits inside one bundle
// add of version v: the 16-byte OFPT_BUNDLE_ADD_MESSAGE prefix (24 bytes for
// OF1.3's ONF experimenter form) counts against the 64 KiB limit.
func BundledMessageLen(v openflow.Version) int {
	if v >= openflow.Version14 {
		return openflow.MaxMessageLen - 16
	}
	return openflow.MaxMessageLen - 24
}

// ErrGroupTooLarge means a group's buckets do not fit one message and the
// version cannot add buckets to an existing group (OF1.5 INSERT_BUCKET).
var ErrGroupTooLarge = errors.New("group does not fit one message")

// SplitGroupMod splits a group mod whose buckets do not fit one message of
// version v (within a bundle add, see BundledMessageLen) into messages that
// each fit:
//
//   - the original command (ADD, MODIFY or ADD_OR_MOD) with as many of the
//     buckets as fit, in order;
//   - then OF1.5 INSERT_BUCKET group mods with CommandBucketID BucketLast,
//     each appending as many of the remaining buckets as fit. They carry no
//     selection method (OVS rejects group properties there); the group keeps
//     the first message's.
//
// Sent in one bundle (InstallGroup does that), the switch sees only the
// complete group: packets never meet the group with a partial bucket list.
// A group mod that fits is returned alone; so are commands other than ADD,
// MODIFY and ADD_OR_MOD. Splitting needs OF1.5 and distinct bucket ids.
func SplitGroupMod(v openflow.Version, gm *openflow.GroupMod) ([]openflow.Message, error) {
	limit := BundledMessageLen(v)
	whole, err := openflow.Marshal(v, 0, gm)
	if err == nil && len(whole) <= limit {
		return []openflow.Message{gm}, nil
	}
	if err != nil && !errors.Is(err, openflow.ErrTooLong) {
		return nil, err
	}
	switch gm.Command {
	case openflow.GroupAdd, openflow.GroupModify, openflow.GroupAddOrModify:
	default:
		return nil, fmt.Errorf("group %d: %s with %d buckets: %w", gm.GroupID, gm.Command, len(gm.Buckets), ErrGroupTooLarge)
	}
	if v < openflow.Version15 {
		return nil, fmt.Errorf("group %d: %d buckets need OF1.5 insert_bucket, connection speaks %s: %w", gm.GroupID, len(gm.Buckets), v, ErrGroupTooLarge)
	}
	seen := make(map[uint32]bool, len(gm.Buckets))
	for i, b := range gm.Buckets {
		if seen[b.ID] {
			return nil, fmt.Errorf("group %d: bucket %d: duplicate bucket id %d", gm.GroupID, i, b.ID)
		}
		seen[b.ID] = true
	}

	// Size of each bucket: the encoding with the bucket minus without.
	empty := *gm
	empty.Buckets = nil
	base, err := openflow.Marshal(v, 0, &empty)
	if err != nil {
		return nil, err
	}
	// insert_bucket carries the group type but no selection method: OVS
	// rejects group properties there (OFPBPC_BAD_VALUE); the group keeps its
	// own.
	insert := empty
	insert.Command = openflow.GroupInsertBucket
	insert.CommandBucketID = openflow.BucketLast
	insert.SelectionMethod, insert.SelectionFields, insert.SelectionParam = "", nil, 0
	ib, err := openflow.Marshal(v, 0, &insert)
	if err != nil {
		return nil, err
	}
	insertBase := len(ib)
	sizes := make([]int, len(gm.Buckets))
	one := empty
	for i := range gm.Buckets {
		one.Buckets = gm.Buckets[i : i+1]
		b, err := openflow.Marshal(v, 0, &one)
		if err != nil {
			return nil, fmt.Errorf("group %d: bucket %d: %w", gm.GroupID, i, err)
		}
		sizes[i] = len(b) - len(base)
		if len(base)+sizes[i] > limit {
			return nil, fmt.Errorf("group %d: bucket %d alone is %d bytes: %w", gm.GroupID, i, sizes[i], ErrGroupTooLarge)
		}
	}

	var out []openflow.Message
	start := 0
	for start < len(gm.Buckets) {
		size := len(base)
		if start > 0 {
			size = insertBase
		}
		end := start
		for end < len(gm.Buckets) && size+sizes[end] <= limit {
			size += sizes[end]
			end++
		}
		part := *gm
		if start > 0 {
			part = insert
		}
		part.Buckets = gm.Buckets[start:end]
		out = append(out, &part)
		start = end
	}
	return out, nil
}

// InstallGroup adds or modifies a group of any size atomically: it splits
// the group mod with SplitGroupMod and applies the parts in one bundle.
func (c *Conn) InstallGroup(ctx context.Context, gm *openflow.GroupMod) error {
	v := c.Version()
	if v == 0 {
		_, err := c.currentSession()
		return c.opErr(fmt.Sprintf("group %d", gm.GroupID), err)
	}
	msgs, err := SplitGroupMod(v, gm)
	if err != nil {
		return c.opErr(fmt.Sprintf("group %d", gm.GroupID), err)
	}
	return c.Bundle(ctx, msgs)
}
