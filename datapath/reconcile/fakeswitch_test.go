package reconcile

import (
	"fmt"
	"maps"
	"net/netip"
	"sort"
	"strings"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// fakeSwitch models the parts of Open vSwitch's flow and group tables that
// the reconciler relies on: OFPFC_ADD replaces by table+priority+match, a
// strict delete removes one flow, a flow or bucket that uses a missing
// group or meter is rejected (OFPBAC_BAD_OUT_GROUP), deleting a group
// deletes the flows that use it, and a bundle applies all or nothing.
type fakeSwitch struct {
	flows  map[openflow.FlowKey]openflow.Flow
	groups map[uint32]openflow.GroupEntry
	meters map[uint32]openflow.MeterEntry
	// afterBundle, when set, is called with the state after each
	// committed bundle.
	afterBundle func(*fakeSwitch)
	bundles     int
	messages    int
	// failOn makes a bundle fail when one of its flows has this table.
	failOn int
}

func newFakeSwitch() *fakeSwitch {
	return &fakeSwitch{
		flows:  map[openflow.FlowKey]openflow.Flow{},
		groups: map[uint32]openflow.GroupEntry{},
		meters: map[uint32]openflow.MeterEntry{},
		failOn: -1,
	}
}

// bundleError reports the index of the failing message, as OVS does.
type bundleError struct {
	index int
	err   error
}

func (e *bundleError) Error() string { return fmt.Sprintf("message %d: %v", e.index, e.err) }

func (sw *fakeSwitch) bundle(msgs []openflow.Message) error {
	next := &fakeSwitch{flows: maps.Clone(sw.flows), groups: maps.Clone(sw.groups), meters: sw.meters}
	for i, m := range msgs {
		if err := next.apply(m, sw.failOn); err != nil {
			return &bundleError{i, err}
		}
	}
	sw.flows, sw.groups = next.flows, next.groups
	sw.bundles++
	sw.messages += len(msgs)
	if sw.afterBundle != nil {
		sw.afterBundle(sw)
	}
	return nil
}

func (sw *fakeSwitch) meterMod(m *openflow.MeterMod) error {
	_, exists := sw.meters[m.MeterID]
	switch m.Command {
	case openflow.MeterAdd:
		if exists {
			return fmt.Errorf("METER_EXISTS")
		}
		sw.meters[m.MeterID] = m.Meter()
	case openflow.MeterModify:
		if !exists {
			return fmt.Errorf("UNKNOWN_METER")
		}
		sw.meters[m.MeterID] = m.Meter()
	case openflow.MeterDelete:
		delete(sw.meters, m.MeterID)
	}
	return nil
}

func (sw *fakeSwitch) checkRefs(ins []openflow.Instruction, acts []openflow.Action) error {
	var err error
	g := func(id uint32) {
		if _, ok := sw.groups[id]; !ok && err == nil {
			err = fmt.Errorf("OFPBAC_BAD_OUT_GROUP (group %d)", id)
		}
	}
	m := func(id uint32) {
		if _, ok := sw.meters[id]; !ok && err == nil {
			err = fmt.Errorf("OFPMMFC_UNKNOWN_METER (meter %d)", id)
		}
	}
	visitInstructions(ins, g, m)
	visitActions(acts, g, m)
	return err
}

func (sw *fakeSwitch) apply(m openflow.Message, failOn int) error {
	switch m.(type) {
	case *openflow.PackedFlowMod, *openflow.PackedGroupMod:
		// What a switch gets: the bytes, decoded.
		b, err := openflow.Marshal(openflow.Version15, 1, m)
		if err != nil {
			return err
		}
		if _, m, err = openflow.Unmarshal(b); err != nil {
			return err
		}
	}
	switch m := m.(type) {
	case *openflow.FlowMod:
		f := openflow.Flow{Table: m.Table, Priority: m.Priority, Cookie: m.Cookie, Match: m.Match,
			Instructions: m.Instructions, IdleTimeout: m.IdleTimeout, HardTimeout: m.HardTimeout, Flags: m.Flags, Importance: m.Importance}
		switch m.Command {
		case openflow.FlowAdd:
			if int(m.Table) == failOn {
				return fmt.Errorf("injected failure in table %d", m.Table)
			}
			if err := sw.checkRefs(m.Instructions, nil); err != nil {
				return err
			}
			sw.flows[f.Key()] = f
		case openflow.FlowDeleteStrict:
			delete(sw.flows, f.Key())
		default:
			return fmt.Errorf("unexpected flow mod %s", m.Command)
		}
	case *openflow.GroupMod:
		switch m.Command {
		case openflow.GroupAddOrModify:
			for _, b := range m.Buckets {
				if err := sw.checkRefs(nil, b.Actions); err != nil {
					return err
				}
			}
			sw.groups[m.GroupID] = m.Group()
		case openflow.GroupInsertBucket:
			g, ok := sw.groups[m.GroupID]
			if !ok {
				return fmt.Errorf("UNKNOWN_GROUP %d", m.GroupID)
			}
			g.Buckets = append(append([]openflow.Bucket(nil), g.Buckets...), m.Buckets...)
			sw.groups[m.GroupID] = g
		case openflow.GroupDelete:
			delete(sw.groups, m.GroupID)
			for k, f := range sw.flows {
				uses := false
				visitInstructions(f.Instructions, func(id uint32) { uses = uses || id == m.GroupID }, func(uint32) {})
				if uses {
					delete(sw.flows, k)
				}
			}
		default:
			return fmt.Errorf("unexpected group mod %s", m.Command)
		}
	default:
		return fmt.Errorf("unexpected message %T", m)
	}
	return nil
}

func (sw *fakeSwitch) observed() *Observed {
	obs := &Observed{}
	for _, f := range sw.flows {
		obs.Flows = append(obs.Flows, f)
	}
	for _, g := range sw.groups {
		obs.Groups = append(obs.Groups, g)
	}
	for _, m := range sw.meters {
		obs.Meters = append(obs.Meters, m)
	}
	return obs
}

// dump renders the switch sorted, like dump-flows and dump-groups, with the
// generation bits of cookies cleared.
func (sw *fakeSwitch) dump() string {
	var lines []string
	for _, f := range sw.flows {
		f.Cookie &= uint64(plan.OwnerMask)
		lines = append(lines, f.String())
	}
	for _, g := range sw.groups {
		lines = append(lines, g.String())
	}
	for _, m := range sw.meters {
		lines = append(lines, m.String())
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// syncFake runs the reconciler's apply loop against the fake switch: diff,
// meters before, bundles (retrying owner by owner when one fails), meters
// after. It returns the diff.
func syncFake(s *Store, sw *fakeSwitch, opts DiffOptions, gen plan.Generation) (*Diff, error) {
	d := s.diff(opts)
	var firstErr error
	for _, c := range d.MetersBefore {
		cmd := openflow.MeterAdd
		if c.kind == Modify {
			cmd = openflow.MeterModify
		}
		if err := sw.meterMod(meterMessage(c, cmd)); err != nil {
			s.abortMeter(c, err, opts.Now)
			firstErr = err
			continue
		}
		s.commitMeter(c)
	}
	for _, b := range d.Batches {
		msgs, origin, err := batchMessages(b, openflow.Version15, gen)
		if err != nil {
			return d, err
		}
		if err := sw.bundle(msgs); err != nil {
			var be *bundleError
			idx := -1
			if e, ok := err.(*bundleError); ok {
				be = e
				idx = be.index
			}
			bad := ownerOfMessage(b, openflow.Version15, idx)
			s.abortBatch(b, nil, opts.Now)
			s.mu.Lock()
			s.failOwner(bad, fmt.Errorf("%s: %w", origin(idx), err), opts.Now)
			s.mu.Unlock()
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		s.commitBatch(b)
	}
	for _, c := range d.MetersAfter {
		if err := sw.meterMod(meterMessage(c, openflow.MeterDelete)); err != nil {
			s.abortMeter(c, err, opts.Now)
			continue
		}
		s.commitMeter(c)
	}
	return d, firstErr
}

// Flow-building helpers for tests.

func ip(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

func dstFlow(table uint8, prio uint16, n int, acts ...openflow.Action) openflow.Flow {
	return openflow.Flow{
		Table:        table,
		Priority:     prio,
		Match:        openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(ip(n))),
		Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: acts}},
	}
}

func selectGroup(id uint32, ports ...uint32) openflow.GroupEntry {
	g := openflow.GroupEntry{ID: id, Type: openflow.GroupTypeSelect}
	for i, p := range ports {
		g.Buckets = append(g.Buckets, openflow.Bucket{ID: uint32(i), Weight: 1, Actions: []openflow.Action{openflow.OutputPort(p)}})
	}
	return g
}
