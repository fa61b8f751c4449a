package reconcile

import (
	"fmt"
	"sort"
	"strings"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// batchMessages encodes b as the ordered messages of one bundle, for
// version v, with cookies of generation gen: group adds and modifications
// (a group too big for one message becomes an add-or-modify followed by
// bucket inserts), flow deletes, flow adds and modifications (both as
// OFPFC_ADD, which replaces a flow in place and keeps its counters), the
// version note last among them, and group deletes.
//
// origin(i) names the change behind message i, for error messages.
func batchMessages(b *Batch, v openflow.Version, gen plan.Generation) (msgs []openflow.Message, origin func(i int) string, err error) {
	// groupEnds[i] is how many messages groupsBefore[:i+1] make: a big
	// group makes several. The other sections make one message a change,
	// so their origin is found by counting.
	groupEnds := make([]int, len(b.groupsBefore))
	msgs = make([]openflow.Message, 0, b.Len())
	for i, c := range b.groupsBefore {
		mods, err := c.to.mods(v)
		if err != nil {
			return nil, nil, fmt.Errorf("reconcile: owner %s: group %d: %w", ownerName(c.to.owner), c.id, err)
		}
		msgs = append(msgs, mods...)
		groupEnds[i] = len(msgs)
	}
	// The flow mods of packed flows are made side by side in one
	// allocation, not one each: a start-up bundle has one for every flow.
	packed := 0
	for _, c := range b.flowDeletes {
		if c.from.flow == nil {
			packed++
		}
	}
	mods := make([]openflow.PackedFlowMod, 0, packed+len(b.flowUpdates))
	for _, c := range b.flowDeletes {
		if c.from.flow != nil {
			msgs = append(msgs, c.from.flow.DeleteStrictMod())
			continue
		}
		mods = append(mods, openflow.PackedFlowMod{Command: openflow.FlowDeleteStrict, Flow: &c.from.packed})
		msgs = append(msgs, &mods[len(mods)-1])
	}
	for _, c := range b.flowUpdates {
		mods = append(mods, openflow.PackedFlowMod{Command: openflow.FlowAdd, Cookie: c.to.owner.cookie | uint64(gen), Flow: &c.to.packed})
		msgs = append(msgs, &mods[len(mods)-1])
	}
	for _, c := range b.groupsAfter {
		msgs = append(msgs, c.from.deleteMod())
	}
	nGroups := len(msgs) - len(b.flowDeletes) - len(b.flowUpdates) - len(b.groupsAfter)
	origin = func(i int) string {
		if i < 0 || i >= len(msgs) {
			return fmt.Sprintf("message %d of %d", i, len(msgs))
		}
		if i < nGroups {
			c := b.groupsBefore[sort.SearchInts(groupEnds, i+1)]
			return fmt.Sprintf("owner %s: %s group %d", ownerName(c.to.owner), c.kind, c.id)
		}
		if i -= nGroups; i < len(b.flowDeletes) {
			c := b.flowDeletes[i]
			return fmt.Sprintf("owner %s: delete flow (%s)", ownerName(c.from.owner), strings.TrimSpace(c.from.String()))
		}
		if i -= len(b.flowDeletes); i < len(b.flowUpdates) {
			c := b.flowUpdates[i]
			return fmt.Sprintf("owner %s: %s flow (%s)", ownerName(c.to.owner), c.kind, strings.TrimSpace(c.to.String()))
		}
		c := b.groupsAfter[i-len(b.flowUpdates)]
		return fmt.Sprintf("owner %s: delete group %d", ownerName(c.from.owner), c.id)
	}
	return msgs, origin, nil
}

// ownerOfMessage returns the owner behind message i of a batch, as
// batchMessages laid them out, or "" when unknown.
func ownerOfMessage(b *Batch, v openflow.Version, i int) string {
	n := 0
	for _, c := range b.groupsBefore {
		mods, err := c.to.mods(v)
		if err != nil {
			return ownerName(c.to.owner)
		}
		if i < n+len(mods) {
			return ownerName(c.to.owner)
		}
		n += len(mods)
	}
	if i -= n; i < len(b.flowDeletes) {
		return ownerName(b.flowDeletes[i].from.owner)
	}
	if i -= len(b.flowDeletes); i < len(b.flowUpdates) {
		return ownerName(b.flowUpdates[i].to.owner)
	}
	if i -= len(b.flowUpdates); i < len(b.groupsAfter) {
		return ownerName(b.groupsAfter[i].from.owner)
	}
	return ""
}

// meterMessage encodes a meter change.
func meterMessage(c meterChange, cmd openflow.MeterCommand) *openflow.MeterMod {
	if c.kind == Delete {
		return c.from.meter.Mod(openflow.MeterDelete)
	}
	return c.to.meter.Mod(cmd)
}
