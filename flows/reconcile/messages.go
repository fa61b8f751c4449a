package reconcile

import (
	"fmt"
	"strings"

	"nodeflow/flows/plan"
	"nodeflow/openflow"
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
	type src struct {
		section uint8
		index   int32
	}
	srcs := make([]src, 0, b.Len())
	msgs = make([]openflow.Message, 0, b.Len())
	for i, c := range b.groupsBefore {
		mods, err := c.to.mods(v)
		if err != nil {
			return nil, nil, fmt.Errorf("reconcile: owner %s: group %d: %w", ownerName(c.to.owner), c.id, err)
		}
		for _, m := range mods {
			msgs = append(msgs, m)
			srcs = append(srcs, src{0, int32(i)})
		}
	}
	for i, c := range b.flowDeletes {
		msgs = append(msgs, c.from.deleteMod())
		srcs = append(srcs, src{1, int32(i)})
	}
	for i, c := range b.flowUpdates {
		msgs = append(msgs, c.to.addMod(c.to.owner.cookie|uint64(gen)))
		srcs = append(srcs, src{2, int32(i)})
	}
	for i, c := range b.groupsAfter {
		msgs = append(msgs, c.from.deleteMod())
		srcs = append(srcs, src{3, int32(i)})
	}
	origin = func(i int) string {
		if i < 0 || i >= len(srcs) {
			return fmt.Sprintf("message %d of %d", i, len(srcs))
		}
		s := srcs[i]
		switch s.section {
		case 0:
			c := b.groupsBefore[s.index]
			return fmt.Sprintf("owner %s: %s group %d", ownerName(c.to.owner), c.kind, c.id)
		case 1:
			c := b.flowDeletes[s.index]
			return fmt.Sprintf("owner %s: delete flow (%s)", ownerName(c.from.owner), strings.TrimSpace(c.from.String()))
		case 2:
			c := b.flowUpdates[s.index]
			return fmt.Sprintf("owner %s: %s flow (%s)", ownerName(c.to.owner), c.kind, strings.TrimSpace(c.to.String()))
		default:
			c := b.groupsAfter[s.index]
			return fmt.Sprintf("owner %s: delete group %d", ownerName(c.from.owner), c.id)
		}
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
