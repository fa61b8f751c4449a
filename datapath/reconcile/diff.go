package reconcile

import (
	"fmt"
	"sort"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// ChangeKind is what a change does to the switch.
type ChangeKind uint8

// Change kinds.
const (
	Add ChangeKind = iota + 1
	Modify
	Delete
)

// String returns "add", "modify" or "delete".
func (k ChangeKind) String() string {
	switch k {
	case Add:
		return "add"
	case Modify:
		return "modify"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("change(%d)", uint8(k))
}

// flowChange is one flow's change. Its key is its entries' (they share
// it): a start-up diff holds one change per flow, and a copy of every key
// would double what the diff costs.
type flowChange struct {
	kind     ChangeKind
	from, to *flowEntry
}

// key returns the flow's key.
func (c flowChange) key() openflow.FlowKey {
	if c.to != nil {
		return c.to.key
	}
	return c.from.key
}

type groupChange struct {
	kind     ChangeKind
	id       uint32
	from, to *groupEntry
}

type meterChange struct {
	kind     ChangeKind
	id       uint32
	from, to *meterEntry
}

// Batch is the changes that go into one atomic bundle: the changes of one
// or more whole units (owners that must change together).
type Batch struct {
	owners       []string
	groupsBefore []groupChange // add or modify
	flowDeletes  []flowChange
	flowUpdates  []flowChange  // add or modify; FeatureMeta last
	groupsAfter  []groupChange // delete
}

// Owners returns the owners whose changes the batch carries, sorted.
func (b *Batch) Owners() []string { return b.owners }

// Len returns the number of flow and group changes in the batch.
func (b *Batch) Len() int {
	return len(b.groupsBefore) + len(b.flowDeletes) + len(b.flowUpdates) + len(b.groupsAfter)
}

// Diff is the work that makes the switch equal to the desired state:
// meters to add or modify first, then bundles in order, then meters to
// delete. Units that could not go (their owner is backing off after a
// failure, or wants a group nobody provides) are in Blocked.
type Diff struct {
	MetersBefore []meterChange
	Batches      []*Batch
	MetersAfter  []meterChange
	// Blocked maps owners held back from this diff to the reason.
	Blocked map[string]error
	Stats   DiffStats
	// Version is the store's change count when the diff was taken: every
	// change counted up to it is in the diff (or held back, see Blocked).
	Version uint64
}

// DiffStats counts the changes of a diff.
type DiffStats struct {
	FlowAdds, FlowModifies, FlowDeletes    int
	GroupAdds, GroupModifies, GroupDeletes int
	MeterAdds, MeterModifies, MeterDeletes int
}

// Total returns the number of changes.
func (s DiffStats) Total() int {
	return s.FlowAdds + s.FlowModifies + s.FlowDeletes + s.GroupAdds + s.GroupModifies + s.GroupDeletes +
		s.MeterAdds + s.MeterModifies + s.MeterDeletes
}

// add accumulates o into s.
func (s *DiffStats) add(o DiffStats) {
	s.FlowAdds += o.FlowAdds
	s.FlowModifies += o.FlowModifies
	s.FlowDeletes += o.FlowDeletes
	s.GroupAdds += o.GroupAdds
	s.GroupModifies += o.GroupModifies
	s.GroupDeletes += o.GroupDeletes
	s.MeterAdds += o.MeterAdds
	s.MeterModifies += o.MeterModifies
	s.MeterDeletes += o.MeterDeletes
}

// String renders "flows +1 ~2 -3, groups +0 ~0 -0, meters +0 ~0 -0".
func (s DiffStats) String() string {
	return fmt.Sprintf("flows +%d ~%d -%d, groups +%d ~%d -%d, meters +%d ~%d -%d",
		s.FlowAdds, s.FlowModifies, s.FlowDeletes, s.GroupAdds, s.GroupModifies, s.GroupDeletes,
		s.MeterAdds, s.MeterModifies, s.MeterDeletes)
}

// Empty reports whether the diff does nothing.
func (d *Diff) Empty() bool { return d.Stats.Total() == 0 }

// DiffOptions tune how a diff is cut into bundles.
type DiffOptions struct {
	// MaxBundle is the number of changes above which the diff is split
	// into several bundles, between units. Zero puts everything in one.
	MaxBundle int
	// Now is the time used for failure back-off; zero means time.Now().
	Now time.Time
}

// diff takes every queued change and turns it into a Diff. The changes it
// returns are no longer queued: the caller must report each batch and
// meter change as applied (commit*) or not (abort*). Changes it holds back
// stay queued.
//
// Owners whose changes must go together are joined into units (see
// unitSet); units go whole into batches, or are held back whole.
func (s *Store) diff(opts DiffOptions) *Diff {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	d := &Diff{Blocked: map[string]error{}, Version: s.version}
	units := newUnitSet()
	// Groups first, so flows can find the group changes they depend on.
	changingGroups := s.takeGroupChanges(units)
	s.takeMeterChanges(units)
	flows := s.takeFlowChanges(units, changingGroups)
	cuts := s.cutBatches(d, s.rootUnits(units, now), opts.MaxBundle)
	d.addBatches(cuts)
	s.placeFlows(d, flows)
	for _, b := range d.Batches {
		b.sort()
	}
	return d
}

// takeGroupChanges takes the queued group changes into their owners'
// units and returns the ids of the groups that change. A group changing
// hands joins its old and new owner's units; a unit is blocked when it
// deletes a group that desired flows or buckets still use, or adds one
// whose buckets use a group or meter that no owner wants.
func (s *Store) takeGroupChanges(units *unitSet) map[uint32]bool {
	changing := map[uint32]bool{}
	dirty := s.dirtyG
	s.dirtyG = nil
	takeChanges(s.groups, dirty, func(id uint32, kind ChangeKind, from, to *groupEntry) {
		c := groupChange{id: id, kind: kind, from: from, to: to}
		u := units.of(changeOwner(c.to, c.from))
		if c.from != nil && c.to != nil && c.from.owner != nil && c.from.owner.name != c.to.owner.name {
			u = units.union(u, units.of(c.from.owner))
		}
		if c.kind == Delete {
			if n := s.refs[refKey{false, id}]; n > 0 {
				u.block(fmt.Errorf("group %d: nobody wants it but %d desired flows or buckets still use it", id, n))
			}
			u.groupsAfter = append(u.groupsAfter, c)
		} else {
			u.groupsBefore = append(u.groupsBefore, c)
			s.checkBuckets(u, c)
		}
		u.size += 1 + c.groupBuckets()/256
		changing[id] = true
	})
	return changing
}

// checkBuckets blocks u when a bucket of the group that c adds or
// modifies chains to a group or uses a meter that no owner wants.
func (s *Store) checkBuckets(u *unit, c groupChange) {
	for _, ref := range c.to.refs {
		if ref.meter {
			if !s.meterWanted(ref.id) {
				u.block(fmt.Errorf("group %d: bucket uses meter %d, which no owner wants", c.id, ref.id))
			}
		} else if !s.groupWanted(ref.id) {
			u.block(fmt.Errorf("group %d: bucket uses group %d, which no owner wants", c.id, ref.id))
		}
	}
}

// groupWanted reports whether an owner wants group id.
func (s *Store) groupWanted(id uint32) bool {
	gs := s.groups[id]
	return gs != nil && gs.desired != nil
}

// meterWanted reports whether an owner wants meter id.
func (s *Store) meterWanted(id uint32) bool {
	ms := s.meters[id]
	return ms != nil && ms.desired != nil
}

// takeMeterChanges takes the queued meter changes into their owners'
// units; a unit is blocked when it deletes a meter that desired flows or
// buckets still use.
func (s *Store) takeMeterChanges(units *unitSet) {
	dirty := s.dirtyM
	s.dirtyM = nil
	takeChanges(s.meters, dirty, func(id uint32, kind ChangeKind, from, to *meterEntry) {
		c := meterChange{id: id, kind: kind, from: from, to: to}
		u := units.of(changeOwner(c.to, c.from))
		if c.kind == Delete {
			if n := s.refs[refKey{true, id}]; n > 0 {
				u.block(fmt.Errorf("meter %d: nobody wants it but %d desired flows or buckets still use it", id, n))
			}
		}
		u.meters = append(u.meters, c)
	})
}

// flowChanges are a diff's flow changes in one list, each with the unit
// it joined (units merge later, so its root is looked up at the end): a
// start-up diff has a change for every flow, and a list of its own for
// each unit, grown by appending, would allocate several times what the
// changes need.
type flowChanges struct {
	changes []flowChange
	units   []*unit
}

// takeFlowChanges takes the queued flow changes, each into its unit (see
// flowUnit).
func (s *Store) takeFlowChanges(units *unitSet, changingGroups map[uint32]bool) flowChanges {
	dirty := s.dirtyF
	s.dirtyF = nil
	fc := flowChanges{changes: make([]flowChange, 0, len(dirty)), units: make([]*unit, 0, len(dirty))}
	for _, k := range dirty {
		c, ok := s.takeFlowChange(k)
		if !ok {
			continue
		}
		u := s.flowUnit(units, c, changingGroups)
		if c.kind == Delete {
			u.flowDeletes++
		} else {
			u.flowUpdates++
		}
		u.size++
		fc.changes = append(fc.changes, c)
		fc.units = append(fc.units, u)
	}
	return fc
}

// takeFlowChange marks flow k's slot clean and returns the change it asks
// for, if any, settling a slot in step and dropping an empty one.
func (s *Store) takeFlowChange(k openflow.FlowKey) (flowChange, bool) {
	sl, ok := s.flows[k]
	if !ok || !sl.dirty {
		return flowChange{}, false
	}
	sl.dirty = false
	c := flowChange{from: sl.installed, to: sl.desired}
	step, kind := sl.step(s.flowsDiffer)
	if step == stepEmpty {
		delete(s.flows, k)
		return flowChange{}, false
	}
	s.flows[k] = sl
	if step != stepChange {
		return flowChange{}, false
	}
	c.kind = kind
	return c, true
}

// flowUnit returns the unit that flow change c joins: its owner's, joined
// with its previous owner's when the flow changes hands, and with the
// owner of each changing group that the flow uses or used. It blocks the
// unit when the flow uses a group or meter that no owner wants.
func (s *Store) flowUnit(units *unitSet, c flowChange, changingGroups map[uint32]bool) *unit {
	var fromOwner, toOwner *owner
	if c.from != nil {
		fromOwner = c.from.owner
	}
	if c.to != nil {
		toOwner = c.to.owner
	}
	o := toOwner
	if o == nil {
		o = fromOwner
	}
	u := units.of(o)
	if c.to != nil && c.from != nil && fromOwner != nil && fromOwner.name != toOwner.name {
		// A flow changing hands: both owners go together, or the
		// switch could see it deleted before it is re-added.
		u = units.union(u, units.of(fromOwner))
	}
	joinGroup := func(id uint32) {
		if gu := s.changingGroupUnit(units, changingGroups, id); gu != nil {
			u = units.union(u, gu)
		}
	}
	if c.to != nil {
		c.to.visitRefs(func(id uint32) {
			joinGroup(id)
			if !s.groupWanted(id) {
				u.block(fmt.Errorf("flow%s: uses group %d, which no owner wants", c.to.String(), id))
			}
		}, func(id uint32) {
			if !s.meterWanted(id) {
				u.block(fmt.Errorf("flow%s: uses meter %d, which no owner wants", c.to.String(), id))
			}
		})
	}
	if c.from != nil {
		c.from.visitRefs(joinGroup, func(uint32) {})
	}
	return u
}

// changingGroupUnit returns the unit of the owner of group id (the one
// that wants it, else the one that wrote it) when the group changes in
// this diff, or nil.
func (s *Store) changingGroupUnit(units *unitSet, changingGroups map[uint32]bool, id uint32) *unit {
	if !changingGroups[id] {
		return nil
	}
	gs := s.groups[id]
	if gs == nil {
		return nil
	}
	var o *owner
	if gs.desired != nil {
		o = gs.desired.owner
	} else if gs.installed != nil {
		o = gs.installed.owner
	}
	return units.of(o)
}

// rootUnits returns the root units that change something, in name order,
// each blocked when one of its owners is backing off after a failure.
func (s *Store) rootUnits(units *unitSet, now time.Time) []*unit {
	var roots []*unit
	units.roots(func(r *unit) {
		for _, name := range r.owners {
			if o := s.owners[name]; o != nil && o.waitingAt(now) {
				r.block(o.fail.err)
			}
		}
		if r.size == 0 && len(r.meters) == 0 {
			return
		}
		roots = append(roots, r)
	})
	sort.Slice(roots, func(i, j int) bool { return roots[i].name < roots[j].name })
	return roots
}

// cutBatches holds the blocked units back, puts the others' meter changes
// in d, and cuts the units with flow or group changes into batches, in
// order: a new batch starts, between units, when the last one would grow
// past maxBundle changes (zero: never). It sets each unit's batch index
// and returns the units of each batch.
func (s *Store) cutBatches(d *Diff, roots []*unit, maxBundle int) [][]*unit {
	var cuts [][]*unit
	size := 0 // the changes in the last cut, as Batch.Len counts them
	for _, u := range roots {
		if u.err != nil {
			s.holdBack(d, u)
			continue
		}
		d.addMeters(u.meters)
		if u.size == 0 {
			continue
		}
		if len(cuts) == 0 || (maxBundle > 0 && size > 0 && size+u.size > maxBundle) {
			cuts = append(cuts, nil)
			size = 0
		}
		cuts[len(cuts)-1] = append(cuts[len(cuts)-1], u)
		size += u.changes()
		u.batch = len(cuts) - 1
	}
	return cuts
}

// holdBack keeps blocked unit u out of d: its owners are in d.Blocked
// with its reason, and its group and meter changes go back in the queues
// (placeFlows requeues its flow changes).
func (s *Store) holdBack(d *Diff, u *unit) {
	for _, name := range u.owners {
		if name == foreignOwner {
			continue
		}
		d.Blocked[name] = u.err
		if o := s.owners[name]; o != nil && o.lastErr() == nil {
			// Visible in Errors until it goes through; no
			// back-off: it waits for the change it needs.
			o.fail = &ownerFailure{err: u.err}
		}
	}
	s.requeueUnit(u)
}

// addMeters puts meter changes in d: deletes after the batches, the rest
// before.
func (d *Diff) addMeters(changes []meterChange) {
	for _, c := range changes {
		if c.kind == Delete {
			d.MetersAfter = append(d.MetersAfter, c)
		} else {
			d.MetersBefore = append(d.MetersBefore, c)
		}
		d.Stats.countMeter(c.kind)
	}
}

// addBatches adds a batch to d for each cut, with its units' owners and
// group changes (placeFlows adds the flow changes).
func (d *Diff) addBatches(cuts [][]*unit) {
	for _, us := range cuts {
		b := newBatch(us)
		d.Batches = append(d.Batches, b)
		for _, c := range b.groupsBefore {
			d.Stats.countGroup(c.kind)
		}
		for _, c := range b.groupsAfter {
			d.Stats.countGroup(c.kind)
		}
	}
}

// newBatch returns the batch of units us, with their owners and group
// changes, its slices made to the size they need: a start-up diff holds a
// change for every flow, and growing its slices by appending would
// allocate about twice that.
func newBatch(us []*unit) *Batch {
	var owners, gb, fd, fu, ga int
	for _, u := range us {
		owners += len(u.owners)
		gb, fd, fu, ga = gb+len(u.groupsBefore), fd+u.flowDeletes, fu+u.flowUpdates, ga+len(u.groupsAfter)
	}
	b := &Batch{owners: make([]string, 0, owners), groupsBefore: make([]groupChange, 0, gb),
		flowDeletes: make([]flowChange, 0, fd), flowUpdates: make([]flowChange, 0, fu), groupsAfter: make([]groupChange, 0, ga)}
	for _, u := range us {
		b.owners = append(b.owners, u.owners...)
		b.groupsBefore = append(b.groupsBefore, u.groupsBefore...)
		b.groupsAfter = append(b.groupsAfter, u.groupsAfter...)
	}
	return b
}

// placeFlows puts each flow change in its unit's batch, or back in the
// queue when its unit is held back.
func (s *Store) placeFlows(d *Diff, flows flowChanges) {
	for i, c := range flows.changes {
		r := flows.units[i].root()
		if r.err != nil {
			s.requeueFlow(c.key())
			continue
		}
		b := d.Batches[r.batch]
		if c.kind == Delete {
			b.flowDeletes = append(b.flowDeletes, c)
		} else {
			b.flowUpdates = append(b.flowUpdates, c)
		}
		d.Stats.countFlow(c.kind)
	}
}

// sort sorts the batch's owners, and puts the version note last among its
// flow updates, so that a bridge whose note is current has everything
// before it.
func (b *Batch) sort() {
	sort.Strings(b.owners)
	sort.SliceStable(b.flowUpdates, func(i, j int) bool {
		return !isMeta(b.flowUpdates[i]) && isMeta(b.flowUpdates[j])
	})
}

// idEntry is a group or meter entry: it has an owner, and can tell whether
// another entry of its kind differs from it.
type idEntry[E any] interface {
	*E
	ownedBy() *owner
	// differs reports whether the entry and other describe different
	// groups (meters).
	differs(other *E) bool
}

// takeChanges passes each change that the dirty slots among ids in m ask
// for to change, marking the slots clean, settling those in step and
// dropping the empty ones.
func takeChanges[E any, P idEntry[E]](m map[uint32]*slot[E], ids []uint32, change func(id uint32, kind ChangeKind, from, to P)) {
	for _, id := range ids {
		sl := m[id]
		if sl == nil || !sl.dirty {
			continue
		}
		sl.dirty = false
		from, to := P(sl.installed), P(sl.desired)
		step, kind := sl.step(func(d, i *E) bool { return P(d).differs(i) })
		switch step {
		case stepEmpty:
			delete(m, id)
		case stepChange:
			change(id, kind, from, to)
		}
	}
}

// changeOwner returns the owner of a change's desired entry, or of its
// installed one when the change is a delete.
func changeOwner[E any, P idEntry[E]](to, from P) *owner {
	if to != nil {
		return to.ownedBy()
	}
	return from.ownedBy()
}

func (e *groupEntry) ownedBy() *owner { return e.owner }
func (e *groupEntry) differs(o *groupEntry) bool {
	if e == o {
		return false
	}
	if e.group == nil && o.group == nil {
		// Both packed: the same bytes are the same group.
		if e.packed.Equal(&o.packed) {
			return false
		}
	}
	return e.fp() != o.fp()
}
func (e *meterEntry) ownedBy() *owner            { return e.owner }
func (e *meterEntry) differs(o *meterEntry) bool { return e.sum != o.sum }

func isMeta(c flowChange) bool {
	return c.to != nil && c.to.owner != nil && c.to.owner.feature == plan.FeatureMeta
}

// groupBuckets returns how many buckets the change sends.
func (c groupChange) groupBuckets() int {
	if c.to != nil {
		return c.to.buckets
	}
	return 0
}

func (st *DiffStats) countFlow(k ChangeKind) {
	switch k {
	case Add:
		st.FlowAdds++
	case Modify:
		st.FlowModifies++
	case Delete:
		st.FlowDeletes++
	}
}

func (st *DiffStats) countGroup(k ChangeKind) {
	switch k {
	case Add:
		st.GroupAdds++
	case Modify:
		st.GroupModifies++
	case Delete:
		st.GroupDeletes++
	}
}

func (st *DiffStats) countMeter(k ChangeKind) {
	switch k {
	case Add:
		st.MeterAdds++
	case Modify:
		st.MeterModifies++
	case Delete:
		st.MeterDeletes++
	}
}

// requeueUnit puts a held-back unit's group and meter changes back in
// the queues (diff requeues its flow changes). s.mu is held.
func (s *Store) requeueUnit(u *unit) {
	for _, c := range u.groupsBefore {
		s.requeueGroup(c.id)
	}
	for _, c := range u.groupsAfter {
		s.requeueGroup(c.id)
	}
	for _, c := range u.meters {
		s.requeueMeter(c.id)
	}
}

func (s *Store) requeueFlow(k openflow.FlowKey) {
	if sl, ok := s.flows[k]; ok {
		s.markFlow(k, &sl)
	}
}

func (s *Store) requeueGroup(id uint32) {
	if sl := s.groups[id]; sl != nil {
		s.markGroup(id, sl)
	}
}

func (s *Store) requeueMeter(id uint32) {
	if sl := s.meters[id]; sl != nil {
		s.markMeter(id, sl)
	}
}

// commitBatch records that b is on the switch.
func (s *Store) commitBatch(b *Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range b.groupsBefore {
		s.commitGroup(c)
	}
	for _, c := range b.groupsAfter {
		s.commitGroup(c)
	}
	for _, c := range b.flowDeletes {
		s.commitFlow(c)
	}
	for _, c := range b.flowUpdates {
		s.commitFlow(c)
	}
	for _, name := range b.owners {
		if o := s.owners[name]; o != nil {
			o.fail = nil
		}
	}
	s.shrinkMaps()
}

func (s *Store) commitFlow(c flowChange) {
	k := c.key()
	sl, ok := s.flows[k]
	if !ok {
		return
	}
	// Settled now: an audit in progress, read in parts, keeps it as it is
	// (see endAudit).
	sl.epoch = s.epoch
	if sl.installed != c.from {
		// The flow monitor reported someone else's change to this flow
		// while the bundle was in flight, and the order of the two on the
		// switch is unknown: keep what was observed and look again.
		s.markFlow(k, &sl)
		return
	}
	sl.installed = c.to
	switch {
	case sl.desired == nil && sl.installed == nil:
		if !sl.dirty {
			delete(s.flows, k)
			return
		}
	case sl.desired != sl.installed:
		if sl.desired == nil || sl.installed == nil || s.flowsDiffer(sl.desired, sl.installed) {
			s.markFlow(k, &sl)
			return
		}
		sl.installed = sl.desired
	}
	s.flows[k] = sl
}

func (s *Store) commitGroup(c groupChange) { commitIDSlot(s.groups, c.id, c.to, s.markGroup) }

// commitMeter records that a meter change is on the switch.
func (s *Store) commitMeter(c meterChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	commitIDSlot(s.meters, c.id, c.to, s.markMeter)
}

// commitIDSlot records that a group or meter change is on the switch: the
// slot of id in m has to installed. A slot left empty and clean goes; one
// still out of step (wanted changed meanwhile) is marked for the next diff.
func commitIDSlot[E any, P idEntry[E]](m map[uint32]*slot[E], id uint32, to P, mark func(uint32, *slot[E])) {
	sl := m[id]
	if sl == nil {
		return
	}
	sl.installed = to
	switch {
	case sl.desired == nil && sl.installed == nil:
		if !sl.dirty {
			delete(m, id)
		}
	case sl.desired != sl.installed:
		if sl.desired == nil || sl.installed == nil || P(sl.desired).differs(sl.installed) {
			mark(id, sl)
		} else {
			sl.installed = sl.desired
		}
	}
}

// abortBatch puts b's changes back in the queues and, when err is not nil,
// records it on the batch's owners and backs them off.
func (s *Store) abortBatch(b *Batch, err error, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range b.groupsBefore {
		s.requeueGroup(c.id)
	}
	for _, c := range b.groupsAfter {
		s.requeueGroup(c.id)
	}
	for _, c := range b.flowDeletes {
		s.requeueFlow(c.key())
	}
	for _, c := range b.flowUpdates {
		s.requeueFlow(c.key())
	}
	if err != nil {
		for _, name := range b.owners {
			s.failOwner(name, err, now)
		}
	}
}

// abortMeter puts a meter change back in the queue.
func (s *Store) abortMeter(c meterChange, err error, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requeueMeter(c.id)
	if err != nil {
		if c.to != nil && c.to.owner != nil {
			s.failOwner(c.to.owner.name, err, now)
		} else if c.from != nil && c.from.owner != nil {
			s.failOwner(c.from.owner.name, err, now)
		}
	}
}

// Back-off after an owner's changes fail: doubling from minBackoff, capped.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

func (s *Store) failOwner(name string, err error, now time.Time) {
	o := s.owners[name]
	if o == nil {
		return
	}
	if o.fail == nil {
		o.fail = &ownerFailure{}
	}
	f := o.fail
	f.err = err
	f.failures++
	d := minBackoff << min(f.failures-1, 16)
	if d > maxBackoff || d <= 0 {
		d = maxBackoff
	}
	f.retryAt = now.Add(d)
	s.backedOff[o] = struct{}{}
}

// nextRetry returns the earliest time a backed-off owner may be retried,
// or the zero time when none is waiting.
func (s *Store) nextRetry() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	for o := range s.backedOff {
		if s.owners[o.name] != o {
			delete(s.backedOff, o) // replaced or gone since
			continue
		}
		if f := o.fail; f != nil && f.err != nil && !f.retryAt.IsZero() && (t.IsZero() || f.retryAt.Before(t)) {
			t = f.retryAt
		}
	}
	return t
}
