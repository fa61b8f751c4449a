package reconcile

import (
	"unsafe"

	"nodeflow/lib/openflow"
)

// Use is what owners want of one bridge: flows, groups, the groups'
// buckets and meters, and an estimate of the memory the store holds for
// them.
type Use struct {
	Flows, Groups, Buckets, Meters int
	// Bytes estimates what the Store holds for them (see ownerBytes): the
	// flows' and groups' encodings, their entries and their share of the
	// store's maps.
	Bytes int64
}

// Entries returns the flows and group buckets of u: the unit of namespace
// budgets, and what the switch's memory and the agent's grow with.
func (u Use) Entries() int { return u.Flows + u.Buckets }

// IsZero reports whether u wants nothing.
func (u Use) IsZero() bool { return u == Use{} }

// add counts o's entries sign times (1 or -1).
func (u *Use) add(o *owner, sign int) {
	u.Flows += sign * len(o.flows)
	u.Groups += sign * len(o.groups)
	u.Buckets += sign * o.buckets
	u.Meters += sign * len(o.meters)
	u.Bytes += int64(sign) * o.bytes
}

// What one entry costs the Store beyond its encoding: the entry itself and
// its key and slot in the Store's map, which Go's maps hold at between
// 7/16 and 7/8 of their room (3/2 of the entry's size, on average).
// TestStoreBytesEstimate holds the sum to the heap a Store of services
// grows by (0.85 to 0.9 of it).
const (
	flowBytes  = int64(unsafe.Sizeof(flowEntry{})) + (int64(unsafe.Sizeof(openflow.FlowKey{}))+int64(unsafe.Sizeof(flowSlot{})))*3/2
	groupBytes = int64(unsafe.Sizeof(groupEntry{})) + int64(unsafe.Sizeof(groupSlot{})) + (4+8)*3/2
	meterBytes = int64(unsafe.Sizeof(meterEntry{})) + int64(unsafe.Sizeof(meterSlot{})) + int64(unsafe.Sizeof(openflow.MeterEntry{})) + (4+8)*3/2
	// ownerBytesFixed is an owner's record, its name and its entries in
	// the Store's owner maps.
	ownerBytesFixed = int64(unsafe.Sizeof(owner{})) + (16+8)*3/2 + (8+8)*3/2
	// heldBucketBytes is one bucket of a group too large for one message,
	// which the Store holds decoded (openflow.GroupEntry): its actions as
	// Go values, as measured by TestStoreBytesEstimate.
	heldBucketBytes = 420
)

// ownerBytes estimates what the Store holds for o's entries: their
// encodings, rounded up to the allocator's 8 bytes, and the fixed costs
// above.
func ownerBytes(o *owner) int64 {
	n := ownerBytesFixed + int64(len(o.name))
	for i := range o.flows {
		p := &o.flows[i].packed
		// The padded ofp_match (4 bytes of header), then the instructions.
		n += flowBytes + roundUp8(int(roundUp8(4+len(p.MatchFields())))+len(p.Instructions()))
	}
	for i := range o.groups {
		g := &o.groups[i]
		n += groupBytes + int64(len(g.refs))*int64(unsafe.Sizeof(refKey{}))
		if g.group != nil {
			n += int64(g.buckets) * heldBucketBytes
		} else {
			n += roundUp8(g.packed.MessageLen())
		}
	}
	n += int64(len(o.meters)) * meterBytes
	return n
}

func roundUp8(n int) int64 { return int64(n+7) &^ 7 }
