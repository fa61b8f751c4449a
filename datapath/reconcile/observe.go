package reconcile

import (
	"fmt"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// Observed is what a switch holds: a full dump of its flows, groups and
// meters.
type Observed struct {
	// Flows are decoded flows; the flows of flowParts come after them.
	Flows []openflow.Flow
	// flowParts are flow stats reply bodies as read (Dump), whose entries
	// are read in place: a flow is decoded only when its encoding differs
	// from the desired one's.
	flowParts []flowPart
	// Groups are decoded groups; the groups of groupParts come after
	// them.
	Groups []openflow.GroupEntry
	// groupParts are group desc reply bodies as read (Dump), read in
	// place like flowParts: a group is decoded only when its encoding
	// differs from the desired one's.
	groupParts []flowPart
	Meters     []openflow.MeterEntry
	// GroupIDs, when not nil, says that only these groups were read (one
	// by one): the others are unknown, not absent.
	GroupIDs []uint32
}

// learned reports whether a flow was created by a learn action; those are
// never desired state and never touched.
func learned(cookie uint64) bool {
	return plan.Cookie(cookie).Feature() == plan.FeatureLearned
}

// observe replaces the installed view with a full dump and queues every
// difference from the desired state. The Store keeps references into obs.
// It returns how many flows and groups on the switch nobody wants.
//
// When obs read only some groups (obs.GroupIDs), the groups it did not
// read are handled without reading them: a desired group that is too big
// to read is re-sent when fresh is set (start-up, reconnect) and otherwise
// assumed unchanged; a group that flows on the switch use but nobody wants
// is deleted.
func (s *Store) observe(obs *Observed, fresh bool) (unwanted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	ep := s.epoch
	unwanted = s.observeFlowsLocked(obs, ep)
	s.sweepFlowsLocked(ep)
	return unwanted + s.observeGroupsAndMetersLocked(obs, ep, fresh)
}

// beginAudit starts an audit read in parts (see Options.AuditPartFlows)
// and returns its epoch: each part's flows are observed under it
// (observeFlowPart), and the last part's groups and meters (endAudit).
func (s *Store) beginAudit() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	return s.epoch
}

// observeFlowPart records the flows of one part of the audit of epoch ep:
// every flow on the switch whose cookie falls in the part. Flows that are
// absent are found by endAudit, once every part has been read. It returns
// how many flows nobody wants.
func (s *Store) observeFlowPart(obs *Observed, ep uint32) (unwanted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observeFlowsLocked(obs, ep)
}

// endAudit ends the audit of epoch ep with its last part, obs's groups and
// meters read whole: it records them as observe does, and takes the flows
// that no part saw for absent, except those a commit or the flow monitor
// has settled since the audit began (they carry its epoch too, see
// commitFlow), which are as the switch has them. It returns how many
// groups nobody wants.
func (s *Store) endAudit(obs *Observed, ep uint32) (unwanted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepFlowsLocked(ep)
	return s.observeGroupsAndMetersLocked(obs, ep, false)
}

// observeFlowsLocked records the flows of obs, read under epoch ep, and
// returns how many of them nobody wants. s.mu is held.
func (s *Store) observeFlowsLocked(obs *Observed, ep uint32) (unwanted int) {
	for i := range obs.Flows {
		f := &obs.Flows[i]
		if learned(f.Cookie) {
			continue
		}
		k := f.Key()
		sl := s.flows[k]
		k = stableKey(&sl, k)
		sl.epoch = ep
		s.observeFlowLocked(k, &sl, f)
		if sl.desired == nil {
			unwanted++
		}
	}
	return unwanted + s.observeParts(obs.flowParts, ep)
}

// sweepFlowsLocked takes every flow slot that no observation of epoch ep
// saw for absent from the switch. s.mu is held.
func (s *Store) sweepFlowsLocked(ep uint32) {
	for k, sl := range s.flows {
		if sl.epoch == ep {
			continue
		}
		sl.epoch = ep
		sl.installed = nil
		switch {
		case sl.desired != nil:
			s.markFlow(k, &sl)
		case !sl.dirty:
			delete(s.flows, k)
		default:
			s.flows[k] = sl
		}
	}
}

// observeGroupsAndMetersLocked records the groups and meters of obs, read
// under epoch ep, as observe describes, and returns how many groups nobody
// wants. s.mu is held.
func (s *Store) observeGroupsAndMetersLocked(obs *Observed, ep uint32, fresh bool) (unwanted int) {
	for i := range obs.Groups {
		if s.observeGroupLocked(&obs.Groups[i], ep) {
			unwanted++
		}
	}
	for _, p := range obs.groupParts {
		// The framing was checked when the reply was read.
		_ = openflow.EachGroupDesc(p.body, p.v, func(_ int, id uint32, entry []byte) error {
			if sl := s.groups[id]; sl != nil && sl.desired != nil && sl.desired.group == nil && sl.desired.packed.SameAsDesc(entry, p.v) {
				sl.epoch = ep
				sl.installed = sl.desired
				s.groupsInPlace++
				return nil
			}
			s.groupsDecoded++
			g, err := openflow.DecodeGroupDesc(entry, p.v)
			if err != nil {
				// Not ours to read: replaced by the desired group, or
				// deleted when none is desired.
				g = openflow.GroupEntry{ID: id}
			}
			if s.observeGroupLocked(&g, ep) {
				unwanted++
			}
			return nil
		})
	}
	var queried map[uint32]bool
	if obs.GroupIDs != nil {
		queried = make(map[uint32]bool, len(obs.GroupIDs))
		for _, id := range obs.GroupIDs {
			queried[id] = true
		}
		// Groups that flows on the switch use: unread, but if nobody
		// wants them they must go.
		for _, ins := range obs.instructions() {
			visitInstructions(ins, func(id uint32) {
				if queried[id] {
					return
				}
				sl := s.groups[id]
				if sl == nil {
					sl = &groupSlot{}
					s.groups[id] = sl
				}
				if sl.desired == nil && sl.epoch != ep {
					sl.epoch = ep
					sl.installed = &groupEntry{id: id, group: &openflow.GroupEntry{ID: id}}
					s.markGroup(id, sl)
					unwanted++
				}
			}, func(uint32) {})
		}
	}
	for id, sl := range s.groups {
		if sl.epoch == ep {
			continue
		}
		if queried != nil && !queried[id] {
			// Not read: keep what we believe, except that a fresh
			// connection re-sends the desired groups it could not read.
			if fresh && sl.desired != nil {
				sl.installed = nil
				s.markGroup(id, sl)
			}
			continue
		}
		sl.epoch = ep
		sl.installed = nil
		if sl.desired != nil {
			s.markGroup(id, sl)
		} else if !sl.dirty {
			delete(s.groups, id)
		}
	}

	for i := range obs.Meters {
		m := &obs.Meters[i]
		sl := s.meters[m.ID]
		if sl == nil {
			sl = &meterSlot{}
			s.meters[m.ID] = sl
		}
		sl.epoch = ep
		sum := stringSum(m.String())
		if sl.desired != nil && sl.desired.sum == sum {
			sl.installed = sl.desired
		} else {
			sl.installed = &meterEntry{meter: m, sum: sum}
			s.markMeter(m.ID, sl)
		}
	}
	for id, sl := range s.meters {
		if sl.epoch == ep {
			continue
		}
		sl.epoch = ep
		sl.installed = nil
		if sl.desired != nil {
			s.markMeter(id, sl)
		} else if !sl.dirty {
			delete(s.meters, id)
		}
	}
	return unwanted
}

// observeGroupLocked records g as read from the switch in a full dump of
// epoch ep, and reports whether no owner wants it. s.mu is held.
func (s *Store) observeGroupLocked(g *openflow.GroupEntry, ep uint32) (unwanted bool) {
	sl := s.groups[g.ID]
	if sl == nil {
		sl = &groupSlot{}
		s.groups[g.ID] = sl
	}
	sl.epoch = ep
	if sl.desired != nil && sl.desired.sameAs(g) {
		sl.installed = sl.desired
		return false
	}
	sl.installed = &groupEntry{id: g.ID, group: g, buckets: len(g.Buckets)}
	s.markGroup(g.ID, sl)
	return sl.desired == nil
}

// observeFlowLocked records that the switch holds f under k, and queues
// the slot when that is not what is desired. It stores sl. s.mu is held.
func (s *Store) observeFlowLocked(k openflow.FlowKey, sl *flowSlot, f *openflow.Flow) {
	var wire uint64
	if sl.desired != nil && !s.textOnly {
		// The cheap comparison first: the same encoding is the same flow.
		var want uint64
		want, s.scratch = sl.desired.wireFP(s.scratch)
		wire, s.scratch = wireFingerprint(f, f.Cookie, s.scratch)
		if wire != 0 && wire == want {
			s.wireMatches++
			sl.installed = sl.desired
			s.flows[k] = *sl
			return
		}
	}
	sum := fingerprint(f, f.Cookie)
	s.textCompares++
	if sl.desired != nil && sl.desired.fp() == sum {
		sl.installed = sl.desired
		s.flows[k] = *sl
		return
	}
	sl.installed = &flowEntry{key: k, flow: f, owner: s.byHash[f.Cookie&uint64(plan.OwnerMask)], sum: sum, wire: wire}
	s.markFlow(k, sl)
}

// observeFlow records one change that someone else made to a flow, as a
// flow monitor reports it: f is now on the switch (present) or gone. It
// reports whether the change needs repair. Flow monitor updates carry no
// flags or importance; with fromMonitor those are taken from the desired
// flow.
func (s *Store) observeFlow(f *openflow.Flow, present, fromMonitor bool) bool {
	if learned(f.Cookie) {
		return false
	}
	k := f.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observeFlowKeyLocked(k, f, present, fromMonitor)
}

func (s *Store) observeFlowKeyLocked(k openflow.FlowKey, f *openflow.Flow, present, fromMonitor bool) bool {
	sl, ok := s.flows[k]
	// What the monitor reports is newer than any part of an audit in
	// progress that has been read (see endAudit).
	sl.epoch = s.epoch
	if present {
		if fromMonitor && sl.desired != nil {
			f.Flags, f.Importance = sl.desired.packed.Flags, sl.desired.packed.Importance
		}
		s.observeFlowLocked(k, &sl, f)
		return sl.dirty
	}
	if !ok {
		return false
	}
	sl.installed = nil
	if sl.desired == nil {
		if !sl.dirty {
			delete(s.flows, k)
		}
		return false
	}
	s.markFlow(k, &sl)
	return true
}

// monitorResult says what a batch of flow monitor updates calls for.
type monitorResult struct {
	repair bool // some flow differs from the desired state now
	audit  bool // groups were deleted, or updates were lost: read everything
}

// massRemoval is the number of removals in one flow monitor reply (a reply
// holds a few hundred) that makes the reconciler read the whole switch
// instead of repairing flow by flow.
const massRemoval = 256

// observeUpdates records a flow monitor reply's updates, under one lock.
func (s *Store) observeUpdates(us []openflow.FlowUpdate) monitorResult {
	var res monitorResult
	removed := 0
	for i := range us {
		if us[i].Event == openflow.FlowUpdateRemoved {
			removed++
		}
	}
	if removed >= massRemoval {
		// A mass deletion (a del-flows of a table or of the bridge): the
		// rest of its reports follow over a second or more, so read the
		// switch whole at once and repair everything in one bundle,
		// rather than flow by flow as the reports come. Reports that
		// arrive after that read are about flows it has already put back:
		// they ask for another read, which finds nothing to do, not for
		// the flows again.
		res.audit = true
		return res
	}
	type item struct {
		k       openflow.FlowKey
		f       openflow.Flow
		present bool
	}
	items := make([]item, 0, len(us))
	for i := range us {
		u := &us[i]
		switch u.Event {
		case openflow.FlowUpdateAdded, openflow.FlowUpdateModified, openflow.FlowUpdateRemoved:
			f := u.Flow()
			if learned(f.Cookie) {
				continue
			}
			items = append(items, item{f.Key(), f, u.Event != openflow.FlowUpdateRemoved})
			if u.Event == openflow.FlowUpdateRemoved && u.Reason == openflow.FlowRemovedReasonGroupDelete {
				res.audit = true
			}
		case openflow.FlowUpdatePaused, openflow.FlowUpdateResumed:
			// Paused: the switch drops the updates from here on (a storm
			// of changes, such as a del-flows of every flow), so read it
			// whole at once rather than repair update by update first;
			// resumed: read it again for what changed meanwhile.
			res.audit = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range items {
		it := &items[i]
		if s.observeFlowKeyLocked(it.k, &it.f, it.present, true) {
			res.repair = true
		}
	}
	if res.repair {
		s.version++
	}
	return res
}

// flowPart is one part of a multipart reply read in place (flow stats or
// group desc): its version and body.
type flowPart struct {
	v    openflow.Version
	body []byte
}

// stableKey returns the key to store sl under: the one its entries already
// hold when it has any, so that the store keeps no second copy of a key
// (and never a key in a dump's memory); otherwise a copy of k.
func stableKey(sl *flowSlot, k openflow.FlowKey) openflow.FlowKey {
	switch {
	case sl.desired != nil:
		return sl.desired.key
	case sl.installed != nil:
		return sl.installed.key
	}
	return k.Clone()
}

// observeParts observes the flows of parts, read in place: a flow whose
// owner bits, timeouts, flags, importance and instruction bytes are the
// desired flow's is settled without being decoded; the others are decoded
// and observed as observeFlowLocked does. An entry that does not decode is
// left out, as if absent: a desired flow is then sent again. It returns
// how many flows nobody wants. s.mu is held.
func (s *Store) observeParts(parts []flowPart, ep uint32) (unwanted int) {
	var kbuf []byte
	for _, p := range parts {
		// The parts' framing was checked when they were read (Dump).
		_ = openflow.EachFlowStats(p.body, p.v, func(_ int, v *openflow.FlowStatsView) error {
			if learned(v.Cookie) {
				return nil
			}
			// Open vSwitch writes matches canonically: the key, mostly,
			// without building it.
			k := v.RawKey()
			sl, ok := s.flows[k]
			if !ok {
				var err error
				if k, kbuf, err = v.Key(kbuf); err != nil {
					s.undecodable++
					return nil
				}
				sl = s.flows[k]
			}
			if d := sl.desired; d != nil && !s.textOnly && v.Version == openflow.Version15 {
				var want uint64
				want, s.scratch = d.wireFP(s.scratch)
				if wireSum(v.Cookie, v.IdleTimeout, v.HardTimeout, v.Flags, v.Importance, withoutEmptyApplyBytes(v.Instructions)) == want {
					s.wireMatches++
					sl.epoch = ep
					sl.installed = d
					s.flows[d.key] = sl
					return nil
				}
			}
			s.decoded++
			fs, err := v.Decode()
			if err != nil {
				s.undecodable++
				return nil
			}
			k = stableKey(&sl, k)
			sl.epoch = ep
			s.observeFlowLocked(k, &sl, &fs.Flow)
			if sl.desired == nil {
				unwanted++
			}
			return nil
		})
	}
	return unwanted
}

// withoutEmptyApplyBytes returns encoded instructions without a leading
// empty apply-actions instruction (see withoutEmptyApply).
func withoutEmptyApplyBytes(ins []byte) []byte {
	const applyActions, emptyLen = 4, 8
	if len(ins) >= emptyLen && ins[0] == 0 && ins[1] == applyActions && ins[2] == 0 && ins[3] == emptyLen {
		return ins[emptyLen:]
	}
	return ins
}

// readFlowParts takes the parts of a flow stats reply as read from the
// switch, checks their framing, and keeps their bodies in obs to be read
// in place.
func (obs *Observed) readFlowParts(msgs [][]byte) error {
	parts, err := readParts(msgs, openflow.MultipartFlow, func(body []byte, v openflow.Version) error {
		return openflow.EachFlowStats(body, v, func(int, *openflow.FlowStatsView) error { return nil })
	})
	obs.flowParts = append(obs.flowParts, parts...)
	return err
}

// readGroupParts takes the parts of a group desc reply as read from the
// switch, checks their framing, and keeps their bodies in obs to be read
// in place.
func (obs *Observed) readGroupParts(msgs [][]byte) error {
	parts, err := readParts(msgs, openflow.MultipartGroupDesc, func(body []byte, v openflow.Version) error {
		return openflow.EachGroupDesc(body, v, func(int, uint32, []byte) error { return nil })
	})
	obs.groupParts = append(obs.groupParts, parts...)
	return err
}

// readParts checks the parts of a multipart reply of type typ as read
// from the switch (their type, their more flags, and their entries'
// framing with check) and returns their bodies, those before the first
// bad part when one is.
func readParts(msgs [][]byte, typ openflow.MultipartType, check func(body []byte, v openflow.Version) error) ([]flowPart, error) {
	var parts []flowPart
	for i, m := range msgs {
		r, err := openflow.ViewMultipartReply(m)
		if err != nil {
			return parts, fmt.Errorf("part %d of %d: %w", i+1, len(msgs), err)
		}
		if r.Type != typ {
			return parts, fmt.Errorf("part %d of %d: %s, want a %s reply: %w", i+1, len(msgs), r.Type, typ, openflow.ErrMalformed)
		}
		if more, last := r.More(), i == len(msgs)-1; more == last {
			return parts, fmt.Errorf("part %d of %d: more flag %v: %w", i+1, len(msgs), more, openflow.ErrMalformed)
		}
		if err := check(r.Body, r.Version); err != nil {
			return parts, fmt.Errorf("part %d of %d: %w", i+1, len(msgs), err)
		}
		parts = append(parts, flowPart{v: r.Version, body: r.Body})
	}
	return parts, nil
}

// decodeGroups decodes the groups read in place into obs.Groups, for the
// callers that want every group as a value. An entry that does not decode
// is an error.
func (obs *Observed) decodeGroups() error {
	for _, p := range obs.groupParts {
		err := openflow.EachGroupDesc(p.body, p.v, func(i int, _ uint32, entry []byte) error {
			g, err := openflow.DecodeGroupDesc(entry, p.v)
			if err != nil {
				return fmt.Errorf("group desc %d: %w", i, err)
			}
			obs.Groups = append(obs.Groups, g)
			return nil
		})
		if err != nil {
			return err
		}
	}
	obs.groupParts = nil
	return nil
}

// decodeFlows decodes the flows read in place into obs.Flows, for the
// callers that want every flow as a value. An entry that does not decode
// is an error.
func (obs *Observed) decodeFlows() error {
	for _, p := range obs.flowParts {
		err := openflow.EachFlowStats(p.body, p.v, func(i int, v *openflow.FlowStatsView) error {
			fs, err := v.Decode()
			if err != nil {
				return fmt.Errorf("flow %d: %w", i, err)
			}
			obs.Flows = append(obs.Flows, fs.Flow)
			return nil
		})
		if err != nil {
			return err
		}
	}
	obs.flowParts = nil
	return nil
}

// instructions returns the instructions of every flow in obs, decoded;
// entries that do not decode are left out.
func (obs *Observed) instructions() [][]openflow.Instruction {
	out := make([][]openflow.Instruction, 0, len(obs.Flows))
	for i := range obs.Flows {
		out = append(out, obs.Flows[i].Instructions)
	}
	for _, p := range obs.flowParts {
		_ = openflow.EachFlowStats(p.body, p.v, func(_ int, v *openflow.FlowStatsView) error {
			if ins, err := openflow.UnmarshalInstructions(v.Instructions, v.Version); err == nil {
				out = append(out, ins)
			}
			return nil
		})
	}
	return out
}

// versionFlow returns the version note flow of a dump, or nil.
func versionFlow(obs *Observed) *openflow.Flow {
	isNote := func(table uint8, cookie uint64) bool {
		return table == uint8(plan.VersionTable) && plan.Cookie(cookie).Feature() == plan.FeatureMeta
	}
	for i := range obs.Flows {
		if f := &obs.Flows[i]; isNote(f.Table, f.Cookie) {
			return f
		}
	}
	var note *openflow.Flow
	for _, p := range obs.flowParts {
		_ = openflow.EachFlowStats(p.body, p.v, func(_ int, v *openflow.FlowStatsView) error {
			if note == nil && isNote(v.Table, v.Cookie) {
				if fs, err := v.Decode(); err == nil {
					note = &fs.Flow
				}
			}
			return nil
		})
	}
	return note
}
