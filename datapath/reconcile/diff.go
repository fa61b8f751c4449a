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

// unit is a set of owners whose changes must be applied together.
type unit struct {
	parent *unit
	owners []string // disjoint from every other unit's
	name   string   // smallest owner name, for a stable order
	size   int
	err    error

	groupsBefore []groupChange
	groupsAfter  []groupChange
	meters       []meterChange
	// flowDeletes and flowUpdates count the unit's flow changes, which
	// are in the diff's one list (see diff).
	flowDeletes, flowUpdates int
	// batch is the index of the root unit's batch, -1 for none.
	batch int
}

func (u *unit) root() *unit {
	for u.parent != nil {
		u = u.parent
	}
	return u
}

// foreignOwner names the unit of the flows and groups that nobody wants
// and no known owner wrote.
const foreignOwner = "(foreign)"

// diff takes every queued change and turns it into a Diff. The changes it
// returns are no longer queued: the caller must report each batch and
// meter change as applied (commit*) or not (abort*). Changes it holds back
// stay queued.
func (s *Store) diff(opts DiffOptions) *Diff {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	d := &Diff{Blocked: map[string]error{}, Version: s.version}
	// Units are keyed by owner name: an owner's entries from before its
	// latest Set belong to an older *owner with the same name.
	units := map[string]*unit{}
	unitOf := func(o *owner) *unit {
		name := foreignOwner
		if o != nil {
			name = o.name
		}
		u, ok := units[name]
		if !ok {
			u = &unit{owners: []string{name}, name: name, batch: -1}
			units[name] = u
		}
		return u.root()
	}
	union := func(a, b *unit) *unit {
		a, b = a.root(), b.root()
		if a == b {
			return a
		}
		if len(b.owners) > len(a.owners) {
			a, b = b, a
		}
		b.parent = a
		a.owners = append(a.owners, b.owners...)
		b.owners = nil
		if b.name < a.name {
			a.name = b.name
		}
		if a.err == nil {
			a.err = b.err
		}
		a.size += b.size
		a.groupsBefore = append(a.groupsBefore, b.groupsBefore...)
		a.groupsAfter = append(a.groupsAfter, b.groupsAfter...)
		a.meters = append(a.meters, b.meters...)
		a.flowDeletes += b.flowDeletes
		a.flowUpdates += b.flowUpdates
		b.groupsBefore, b.groupsAfter, b.meters = nil, nil, nil
		return a
	}
	owning := func(to, from *owner) *owner {
		if to != nil {
			return to
		}
		return from
	}
	block := func(u *unit, err error) {
		u = u.root()
		if u.err == nil {
			u.err = err
		}
	}

	// Groups first, so flows can find the group changes they depend on.
	gch := map[uint32]bool{}
	dirtyG := s.dirtyG
	s.dirtyG = nil
	takeChanges(s.groups, dirtyG, func(id uint32, kind ChangeKind, from, to *groupEntry) {
		c := groupChange{id: id, kind: kind, from: from, to: to}
		u := unitOf(changeOwner(c.to, c.from))
		if c.from != nil && c.to != nil && c.from.owner != nil && c.from.owner.name != c.to.owner.name {
			u = union(u, unitOf(c.from.owner))
		}
		if c.kind == Delete {
			if n := s.refs[refKey{false, id}]; n > 0 {
				block(u, fmt.Errorf("group %d: nobody wants it but %d desired flows or buckets still use it", id, n))
			}
			u.groupsAfter = append(u.groupsAfter, c)
		} else {
			u.groupsBefore = append(u.groupsBefore, c)
			// Buckets may chain to other groups and use meters.
			for _, ref := range c.to.refs {
				if ref.meter {
					if rs := s.meters[ref.id]; rs == nil || rs.desired == nil {
						block(u, fmt.Errorf("group %d: bucket uses meter %d, which no owner wants", id, ref.id))
					}
				} else if rs := s.groups[ref.id]; rs == nil || rs.desired == nil {
					block(u, fmt.Errorf("group %d: bucket uses group %d, which no owner wants", id, ref.id))
				}
			}
		}
		u.size += 1 + c.groupBuckets()/256
		gch[id] = true
	})

	// Meters.
	dirtyM := s.dirtyM
	s.dirtyM = nil
	takeChanges(s.meters, dirtyM, func(id uint32, kind ChangeKind, from, to *meterEntry) {
		c := meterChange{id: id, kind: kind, from: from, to: to}
		u := unitOf(changeOwner(c.to, c.from))
		if c.kind == Delete {
			if n := s.refs[refKey{true, id}]; n > 0 {
				block(u, fmt.Errorf("meter %d: nobody wants it but %d desired flows or buckets still use it", id, n))
			}
		}
		u.meters = append(u.meters, c)
	})

	// Flows, in one list with the unit each joined (units merge later):
	// a start-up diff has a change for every flow, and a list of its own
	// for each unit, grown by appending, would allocate several times
	// what the changes need.
	dirtyF := s.dirtyF
	s.dirtyF = nil
	flows := make([]flowChange, 0, len(dirtyF))
	flowUnits := make([]*unit, 0, len(dirtyF))
	for _, k := range dirtyF {
		sl, ok := s.flows[k]
		if !ok || !sl.dirty {
			continue
		}
		sl.dirty = false
		c := flowChange{from: sl.installed, to: sl.desired}
		step, kind := sl.step(s.flowsDiffer)
		if step == stepEmpty {
			delete(s.flows, k)
			continue
		}
		s.flows[k] = sl
		if step != stepChange {
			continue
		}
		c.kind = kind
		var fromOwner, toOwner *owner
		if c.from != nil {
			fromOwner = c.from.owner
		}
		if c.to != nil {
			toOwner = c.to.owner
		}
		u := unitOf(owning(toOwner, fromOwner))
		if c.to != nil && c.from != nil && fromOwner != nil && fromOwner.name != toOwner.name {
			// A flow changing hands: both owners go together, or the
			// switch could see it deleted before it is re-added.
			u = union(u, unitOf(fromOwner))
		}
		link := func(id uint32) {
			if _, changing := gch[id]; changing {
				if gs := s.groups[id]; gs != nil {
					var go_ *owner
					if gs.desired != nil {
						go_ = gs.desired.owner
					} else if gs.installed != nil {
						go_ = gs.installed.owner
					}
					u = union(u, unitOf(go_))
				}
			}
		}
		if c.to != nil {
			c.to.visitRefs(func(id uint32) {
				link(id)
				if gs := s.groups[id]; gs == nil || gs.desired == nil {
					block(u, fmt.Errorf("flow%s: uses group %d, which no owner wants", c.to.String(), id))
				}
			}, func(id uint32) {
				if ms := s.meters[id]; ms == nil || ms.desired == nil {
					block(u, fmt.Errorf("flow%s: uses meter %d, which no owner wants", c.to.String(), id))
				}
			})
		}
		if c.from != nil {
			c.from.visitRefs(link, func(uint32) {})
		}
		if c.kind == Delete {
			u.flowDeletes++
		} else {
			u.flowUpdates++
		}
		u.size++
		flows = append(flows, c)
		flowUnits = append(flowUnits, u)
	}

	// Collect the root units, drop the blocked ones, and pack the rest.
	seen := map[*unit]bool{}
	var roots []*unit
	for _, u := range units {
		r := u.root()
		if seen[r] {
			continue
		}
		seen[r] = true
		for _, name := range r.owners {
			if o := s.owners[name]; o != nil && o.waitingAt(now) {
				block(r, o.fail.err)
			}
		}
		if r.size == 0 && len(r.meters) == 0 {
			continue
		}
		roots = append(roots, r)
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].name < roots[j].name })

	// Cut the units into batches first, then fill each batch's slices,
	// made to the size they need: a start-up diff holds a change for
	// every flow, and growing its slices by appending would allocate about
	// twice that.
	var cuts [][]*unit
	size := 0 // the changes in the last cut, as Batch.Len counts them
	for _, u := range roots {
		if u.err != nil {
			for _, name := range u.owners {
				if name != foreignOwner {
					d.Blocked[name] = u.err
					if o := s.owners[name]; o != nil && o.lastErr() == nil {
						// Visible in Errors until it goes through; no
						// back-off: it waits for the change it needs.
						o.fail = &ownerFailure{err: u.err}
					}
				}
			}
			s.requeueUnit(u)
			continue
		}
		for _, c := range u.meters {
			if c.kind == Delete {
				d.MetersAfter = append(d.MetersAfter, c)
			} else {
				d.MetersBefore = append(d.MetersBefore, c)
			}
			d.Stats.countMeter(c.kind)
		}
		if u.size == 0 {
			continue
		}
		if len(cuts) == 0 || (opts.MaxBundle > 0 && size > 0 && size+u.size > opts.MaxBundle) {
			cuts = append(cuts, nil)
			size = 0
		}
		cuts[len(cuts)-1] = append(cuts[len(cuts)-1], u)
		size += len(u.groupsBefore) + u.flowDeletes + u.flowUpdates + len(u.groupsAfter)
		u.batch = len(cuts) - 1
	}
	for _, us := range cuts {
		var owners, gb, fd, fu, ga int
		for _, u := range us {
			owners += len(u.owners)
			gb, fd, fu, ga = gb+len(u.groupsBefore), fd+u.flowDeletes, fu+u.flowUpdates, ga+len(u.groupsAfter)
		}
		b := &Batch{owners: make([]string, 0, owners), groupsBefore: make([]groupChange, 0, gb),
			flowDeletes: make([]flowChange, 0, fd), flowUpdates: make([]flowChange, 0, fu), groupsAfter: make([]groupChange, 0, ga)}
		d.Batches = append(d.Batches, b)
		for _, u := range us {
			b.owners = append(b.owners, u.owners...)
			b.groupsBefore = append(b.groupsBefore, u.groupsBefore...)
			b.groupsAfter = append(b.groupsAfter, u.groupsAfter...)
			for _, c := range u.groupsBefore {
				d.Stats.countGroup(c.kind)
			}
			for _, c := range u.groupsAfter {
				d.Stats.countGroup(c.kind)
			}
		}
	}
	// Each flow change goes to its unit's batch, or back in the queue
	// when its unit is held back.
	for i, c := range flows {
		r := flowUnits[i].root()
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
	for _, b := range d.Batches {
		sort.Strings(b.owners)
		// The version note goes last, so that a bridge whose note is
		// current has everything before it.
		sort.SliceStable(b.flowUpdates, func(i, j int) bool {
			return !isMeta(b.flowUpdates[i]) && isMeta(b.flowUpdates[j])
		})
	}
	return d
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
