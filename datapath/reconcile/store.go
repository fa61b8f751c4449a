package reconcile

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// ErrConflict marks a Set that wants a flow, group or meter another owner
// already wants.
var ErrConflict = errors.New("wanted by another owner")

// ErrInvalid marks a Set whose state breaks a rule of State.
var ErrInvalid = errors.New("invalid desired state")

// StoreOptions configure a Store.
type StoreOptions struct {
	// Bridge, when set, makes Set check every flow against the pipeline
	// plan: its table must be declared for the bridge and allow the
	// owner's feature. Zero accepts any table (tests, benchmarks).
	Bridge plan.Bridge
	// Budget, when set, holds back the states of the objects that would
	// take their namespace past its budget (see Budget). The Stores of a
	// node's bridges share one.
	Budget *Budget
}

// Store holds the desired state of one bridge, by owner, and what the
// reconciler believes the bridge has. It is safe for concurrent use.
type Store struct {
	opts StoreOptions

	mu      sync.Mutex
	owners  map[string]*owner
	byHash  map[uint64]*owner // cookie feature+owner bits -> owner
	flows   map[openflow.FlowKey]flowSlot
	groups  map[uint32]*groupSlot
	meters  map[uint32]*meterSlot
	refs    map[refKey]int32 // desired flows and groups referencing a group or meter
	dirtyF  []openflow.FlowKey
	dirtyG  []uint32
	dirtyM  []uint32
	epoch   uint32
	changed chan struct{}
	// version counts the changes that want a pass (a Set that changed
	// something, a repair the flow monitor found); a diff records the
	// version it saw, so that a Flush knows whether a pass has seen its
	// changes.
	version uint64
	// total is what every owner wants (Counts, Total), and use what the
	// owners of each namespace want ("" for the node's own; NamespaceUse),
	// kept as owners come and go. An owner the budget holds back counts in
	// neither.
	total Use
	use   map[string]*Use
	// peaks are the high-water marks of the maps that shrink
	// (shrinkMaps).
	peaks mapPeaks
	// backedOff holds the owners failOwner has backed off, for
	// nextRetry: the few that failed, not every owner.
	backedOff map[*owner]struct{}
	// scratch is the wire fingerprints' encoding buffer; wireMatches and
	// textCompares count the observed flows that the wire fingerprint
	// settled and those that took the text one (Fingerprints).
	scratch                   []byte
	wireMatches, textCompares uint64
	// groupsInPlace and groupsDecoded count the groups of full dumps
	// settled by their encoding, and those decoded to be compared.
	groupsInPlace, groupsDecoded uint64
	// decoded counts the flows of dumps that were decoded (not settled in
	// place); undecodable those left out because they did not decode.
	decoded, undecodable uint64
	// textOnly compares every flow by its text, as the previous design
	// did (setTextOnly, for the benchmarks' comparison).
	textOnly bool
}

// setTextOnly turns the wire fingerprints' comparison off (on) or back on
// (off).
func (s *Store) setTextOnly(on bool) {
	s.mu.Lock()
	s.textOnly = on
	s.mu.Unlock()
}

// Fingerprints returns how many observed flows were found equal to the
// desired ones by their encoding alone (wire), how many needed the
// comparison of their text (text: different, or encoded otherwise by Open
// vSwitch), and how many of those read in place from a dump had to be
// decoded (decoded), since the store was made.
func (s *Store) Fingerprints() (wire, text, decoded uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wireMatches, s.textCompares, s.decoded
}

// GroupComparisons returns how many groups read by full dumps were found
// equal to the desired ones by their encoding alone, read in place
// (inPlace), and how many had to be decoded (decoded: different, not
// desired, held decoded, or encoded otherwise by Open vSwitch), since the
// store was made.
func (s *Store) GroupComparisons() (inPlace, decoded uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.groupsInPlace, s.groupsDecoded
}

// undecodableFlows returns how many flows read from dumps were left out
// because they did not decode, since the store was made.
func (s *Store) undecodableFlows() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.undecodable
}

// owner is one owner's desired state and bookkeeping. A node holds one
// per Service port and bridge, among others, so it is kept small: the
// caller's State is not kept (its flows and groups are held packed, its
// meters by the entries), and an apply failure's bookkeeping lives apart,
// allocated when the owner first fails.
type owner struct {
	name    string
	cookie  uint64 // feature and owner bits; generation 0
	flows   []flowEntry
	groups  []groupEntry
	meters  []meterEntry
	fail    *ownerFailure // nil until an apply fails
	feature plan.Feature
	// ns is the namespace of the owner's object (plan.OwnerNamespace), ""
	// for the node's own.
	ns string
	// buckets is how many buckets its groups have; bytes estimates what
	// the store holds for it (ownerBytes).
	buckets int
	bytes   int64
	// held marks an owner the namespace budget holds back: it is known
	// (Owners, Get) but none of its entries is desired; refusal says why
	// (a *BudgetError, or the conflict that keeps it out after the budget
	// let it in again).
	held    bool
	refusal error
}

// ownerFailure is what keeps an owner's changes off the switch: the owner
// is left out of diffs until retryAt, so that one bad owner does not block
// the others. A zero retryAt means no back-off: the owner waits for a
// change it needs (a group nobody wants yet).
type ownerFailure struct {
	err      error
	failures int
	retryAt  time.Time
}

// lastErr returns the error that last kept o's changes off the switch, or
// nil.
func (o *owner) lastErr() error {
	if o.fail == nil {
		return nil
	}
	return o.fail.err
}

// waitingAt reports whether o failed and may not be retried before now.
func (o *owner) waitingAt(now time.Time) bool {
	return o.fail != nil && o.fail.err != nil && now.Before(o.fail.retryAt)
}

type flowEntry struct {
	key openflow.FlowKey
	// packed is a desired flow, held in its encoding; flow is an installed
	// flow as read from the switch. Exactly one of them is set.
	packed openflow.PackedFlow
	flow   *openflow.Flow
	owner  *owner // nil for an observed flow nobody wants
	// sum is the fingerprint, computed when first needed (0 until then):
	// a flow that only ever gets added never needs it.
	sum uint64
	// wire is the wire fingerprint (wireFingerprint), computed when first
	// needed: an audit compares it first.
	wire uint64
	// ref is the group or meter a packed flow uses when nrefs is 1; a flow
	// that uses more is decoded to visit them (see visitRefs).
	ref   refKey
	nrefs uint8
}

// flowsDiffer reports whether the desired entry d and the installed
// entry i are different flows: equal wire fingerprints say they are the
// same, and otherwise the text fingerprints decide. s.mu must be held.
func (s *Store) flowsDiffer(d, i *flowEntry) bool {
	if d == i {
		return false
	}
	if !s.textOnly {
		var wd, wi uint64
		wd, s.scratch = d.wireFP(s.scratch)
		wi, s.scratch = i.wireFP(s.scratch)
		if wd != 0 && wd == wi {
			return false
		}
	}
	return d.fp() != i.fp()
}

// ownerCookie returns the feature and owner bits of the entry's owner, or
// 0 for a flow nobody wants.
func (e *flowEntry) ownerCookie() uint64 {
	if e.owner != nil {
		return e.owner.cookie
	}
	return 0
}

// wireFP returns the entry's wire fingerprint; buf is scratch space. s.mu
// must be held.
func (e *flowEntry) wireFP(buf []byte) (uint64, []byte) {
	if e.wire == 0 {
		if e.flow == nil {
			p := &e.packed
			e.wire = wireSum(e.ownerCookie(), p.IdleTimeout, p.HardTimeout, p.Flags, p.Importance, p.Instructions())
		} else {
			e.wire, buf = wireFingerprint(e.flow, e.ownerCookie(), buf)
		}
	}
	return e.wire, buf
}

// fp returns the entry's fingerprint. s.mu must be held.
func (e *flowEntry) fp() uint64 {
	if e.sum == 0 {
		e.sum = fingerprint(e.value(), e.ownerCookie()) | 1
	}
	return e.sum
}

// value returns the entry's flow as a value: the installed flow itself, or
// a decoded copy of the packed one (which the caller may keep). Its cookie
// is the one read from the switch, or 0.
func (e *flowEntry) value() *openflow.Flow {
	if e.flow != nil {
		return e.flow
	}
	f, err := e.packed.Unpack()
	if err != nil {
		// Packed by prepare from a flow that encoded: cannot happen. Keep
		// what identifies it.
		return &openflow.Flow{Table: e.key.Table, Priority: e.key.Priority}
	}
	return &f
}

// String renders the entry's flow as Flow.String does.
func (e *flowEntry) String() string { return e.value().String() }

// visitRefs calls group and meter with each group and meter the entry's
// flow uses (see visitInstructions).
func (e *flowEntry) visitRefs(group, meter func(uint32)) {
	switch {
	case e.flow != nil:
		visitInstructions(e.flow.Instructions, group, meter)
	case e.nrefs == 0:
	case e.nrefs == 1 && e.ref.meter:
		meter(e.ref.id)
	case e.nrefs == 1:
		group(e.ref.id)
	default:
		visitInstructions(e.value().Instructions, group, meter)
	}
}

type groupEntry struct {
	id uint32
	// packed is a desired group, held in its encoding; group is an
	// installed group as read from the switch, or a desired group too big
	// for one message (see openflow.PackGroup). Exactly one is set.
	packed openflow.PackedGroup
	group  *openflow.GroupEntry
	owner  *owner
	sum    uint64
	// refs are the groups and meters the desired group's buckets use.
	refs []refKey
	// buckets is how many buckets the group has.
	buckets int
	// large marks a group whose description cannot be read back (see
	// groupReadLimit).
	large bool
}

// newGroupEntry returns the entry of the desired group g of owner o.
// buf is scratch space for the encoding.
func newGroupEntry(g *openflow.GroupEntry, o *owner, buf []byte) (groupEntry, error) {
	e := groupEntry{id: g.ID, owner: o, buckets: len(g.Buckets)}
	p, err := openflow.PackGroupInto(buf, g)
	switch {
	case err == nil:
		e.packed = p
		e.large = p.MessageLen() > groupReadLimit
	case errors.Is(err, openflow.ErrTooLong):
		e.group, e.large = g, true
	default:
		return e, err
	}
	for _, b := range g.Buckets {
		visitActions(b.Actions, func(id uint32) { e.refs = append(e.refs, refKey{false, id}) }, func(id uint32) { e.refs = append(e.refs, refKey{true, id}) })
	}
	return e, nil
}

// value returns the entry's group as a value: the held one, or a decoded
// copy of the packed one.
func (e *groupEntry) value() *openflow.GroupEntry {
	if e.group != nil {
		return e.group
	}
	g, err := e.packed.Unpack()
	if err != nil {
		// Packed from a group that encoded: cannot happen.
		return &openflow.GroupEntry{ID: e.id}
	}
	return &g
}

// String renders the entry's group as GroupEntry.String does.
func (e *groupEntry) String() string { return e.value().String() }

// fp returns the fingerprint of the group's text, computed when first
// needed. s.mu must be held.
func (e *groupEntry) fp() uint64 {
	if e.sum == 0 {
		e.sum = stringSum(e.String()) | 1
	}
	return e.sum
}

// sameAs reports whether the desired entry e and the group g read from
// the switch are the same group: by their encoding first, then by their
// text.
func (e *groupEntry) sameAs(g *openflow.GroupEntry) bool {
	if e.group == nil {
		if p, err := openflow.PackGroup(g); err == nil && p.Equal(&e.packed) {
			return true
		}
	}
	return e.fp() == stringSum(g.String())|1
}

// mods returns the messages that add or modify the desired group.
func (e *groupEntry) mods(v openflow.Version) ([]openflow.Message, error) {
	if e.group == nil {
		return e.packed.Mods(openflow.GroupAddOrModify, v, 0)
	}
	mods, err := e.group.Mods(openflow.GroupAddOrModify, v, 0)
	out := make([]openflow.Message, len(mods))
	for i, m := range mods {
		out[i] = m
	}
	return out, err
}

// deleteMod returns the message that deletes the group.
func (e *groupEntry) deleteMod() openflow.Message {
	return openflow.GroupEntry{ID: e.id}.DeleteMod()
}

// countGroupRefs counts the groups and meters e's buckets use d times
// more. s.mu is held.
func (s *Store) countGroupRefs(e *groupEntry, d int32) {
	for _, k := range e.refs {
		s.addRef(k, d)
	}
}

type meterEntry struct {
	meter *openflow.MeterEntry
	owner *owner
	sum   uint64
}

// slot pairs what is wanted with what is installed for one flow key,
// group id or meter id. A nil installed entry means "not on the switch, as
// far as we know".
type slot[E any] struct {
	desired, installed *E
	epoch              uint32 // last observation that saw it
	dirty              bool
}

type (
	flowSlot  = slot[flowEntry]
	groupSlot = slot[groupEntry]
	meterSlot = slot[meterEntry]
)

// slotStep is what a dirty slot asks of the next diff.
type slotStep uint8

const (
	stepEmpty  slotStep = iota // neither wanted nor installed: drop the slot
	stepInStep                 // installed as wanted: nothing to send
	stepChange                 // an Add, Modify or Delete to send
)

// step returns what the slot asks for and, for stepChange, the change's
// kind; differ tells whether two entries differ (it is called only when
// both exist). A slot in step is settled: its installed entry becomes the
// desired one.
func (sl *slot[E]) step(differ func(desired, installed *E) bool) (slotStep, ChangeKind) {
	switch {
	case sl.desired == nil && sl.installed == nil:
		return stepEmpty, 0
	case sl.desired == nil:
		return stepChange, Delete
	case sl.installed == nil:
		return stepChange, Add
	case differ(sl.desired, sl.installed):
		return stepChange, Modify
	}
	sl.installed = sl.desired
	return stepInStep, 0
}

type refKey struct {
	meter bool
	id    uint32
}

// NewStore returns an empty Store.
func NewStore(opts StoreOptions) *Store {
	return &Store{
		opts:    opts,
		owners:  map[string]*owner{},
		byHash:  map[uint64]*owner{},
		flows:   map[openflow.FlowKey]flowSlot{},
		groups:  map[uint32]*groupSlot{},
		meters:  map[uint32]*meterSlot{},
		refs:    map[refKey]int32{},
		use:     map[string]*Use{},
		changed: make(chan struct{}, 1),

		backedOff: map[*owner]struct{}{},
	}
}

// Budget returns the namespace budget the Store shares, nil for none.
func (s *Store) Budget() *Budget { return s.opts.Budget }

// Changed returns a channel that receives a value (coalesced: at most one
// pending) after each Set that changed something.
func (s *Store) Changed() <-chan struct{} { return s.changed }

func (s *Store) notify() {
	s.version++
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// changeVersion returns the store's change count (see Store.version).
func (s *Store) changeVersion() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Set replaces everything owner wants with st. An empty st removes the
// owner. The whole update is checked first and applied all at once, or not
// at all: the error names the owner and the offending flow, group or
// meter, and wraps ErrInvalid or ErrConflict.
//
// With a Budget, a state charged to an object (State.Charge) that does not
// fit its namespace's budget is kept but held back: Set returns nil, none
// of its entries is desired until there is room, and Errors reports it (a
// *BudgetError).
func (s *Store) Set(name string, st State) error {
	feature, err := plan.OwnerFeature(name)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if feature == plan.FeatureLearned {
		return fmt.Errorf("reconcile: owner %s: learned flows are not desired state: %w", name, ErrInvalid)
	}
	cookie := uint64(plan.MakeCookie(feature, name, 0))
	o := &owner{name: name, feature: feature, cookie: cookie, ns: plan.OwnerNamespace(name)}
	if c := st.Charge; c != nil && !st.Empty() {
		if err := c.check(o); err != nil {
			return err
		}
	}
	// The flows and groups are held packed (see flowEntry, groupEntry);
	// the values are the caller's to drop.
	if err := s.prepare(o, st); err != nil {
		return err
	}
	o.bytes = ownerBytes(o)
	if b := s.opts.Budget; b != nil {
		return b.set(s, o, st.Charge, st.Empty())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkConflicts(o); err != nil {
		return err
	}
	s.replace(o, st.Empty(), nil)
	return nil
}

// checkConflicts returns the error of a Set of o when another owner wants
// one of its flows, groups or meters, or has its cookie. s.mu is held.
func (s *Store) checkConflicts(o *owner) error {
	name := o.name
	for i := range o.flows {
		e := &o.flows[i]
		if sl, ok := s.flows[e.key]; ok && sl.desired != nil && sl.desired.owner.name != name {
			return fmt.Errorf("reconcile: owner %s: flow%s: %w: %s", name, e.String(), ErrConflict, sl.desired.owner.name)
		}
	}
	for i := range o.groups {
		e := &o.groups[i]
		if sl, ok := s.groups[e.id]; ok && sl.desired != nil && sl.desired.owner.name != name {
			return fmt.Errorf("reconcile: owner %s: group %d: %w: %s", name, e.id, ErrConflict, sl.desired.owner.name)
		}
	}
	for i := range o.meters {
		e := &o.meters[i]
		if sl, ok := s.meters[e.meter.ID]; ok && sl.desired != nil && sl.desired.owner.name != name {
			return fmt.Errorf("reconcile: owner %s: meter %d: %w: %s", name, e.meter.ID, ErrConflict, sl.desired.owner.name)
		}
	}
	if other, ok := s.byHash[o.cookie]; ok && other.name != name {
		return fmt.Errorf("reconcile: owner %s: cookie %#x: %w: %s (owner hash collision; rename one)", name, o.cookie, ErrConflict, other.name)
	}
	return nil
}

// replace puts o in place of the owner of its name: gone when empty, held
// back when refusal is not nil, else desired. s.mu is held.
func (s *Store) replace(o *owner, empty bool, refusal error) {
	if old := s.owners[o.name]; old != nil {
		if !old.held {
			s.release(old)
			s.count(old, -1)
		}
		delete(s.backedOff, old)
	}
	switch {
	case empty:
		delete(s.owners, o.name)
		delete(s.byHash, o.cookie)
		s.shrinkOwners()
	case refusal != nil:
		o.held, o.refusal = true, refusal
		s.owners[o.name] = o
		s.byHash[o.cookie] = o
	default:
		s.owners[o.name] = o
		s.byHash[o.cookie] = o
		s.claim(o)
		s.count(o, 1)
		s.shrinkOwners() // notes the peak
	}
	s.notify()
}

// hold holds back the owner name, known already, for refusal (a
// *BudgetError), or, with a nil refusal, lets it in again unless another
// owner has taken one of its entries meanwhile. s.mu is held.
func (s *Store) hold(name string, refusal error) {
	o := s.owners[name]
	switch {
	case o == nil:
	case refusal != nil && o.held:
		o.refusal = refusal
	case refusal != nil:
		s.release(o)
		s.count(o, -1)
		delete(s.backedOff, o)
		o.held, o.refusal = true, refusal
		s.notify()
	case !o.held:
	default:
		if err := s.checkConflicts(o); err != nil {
			o.refusal = err
			return
		}
		o.held, o.refusal = false, nil
		s.claim(o)
		s.count(o, 1)
		s.notify()
	}
}

// Contest is one flow of a State that another owner already wants.
type Contest struct {
	Index int    // index in the State's Flows
	Owner string // the owner that has it
}

// Contested returns the flows of st that owners other than name already
// want, in st's order: what makes Set(name, st) fail with ErrConflict on a
// flow. A caller may drop them and Set the rest, leaving each contested
// flow to its first owner. A state Set would refuse as invalid has none.
func (s *Store) Contested(name string, st State) []Contest {
	feature, err := plan.OwnerFeature(name)
	if err != nil {
		return nil
	}
	o := &owner{name: name, feature: feature}
	if s.prepare(o, st) != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Contest
	for i := range o.flows {
		if sl, ok := s.flows[o.flows[i].key]; ok && sl.desired != nil && sl.desired.owner.name != name {
			out = append(out, Contest{Index: i, Owner: sl.desired.owner.name})
		}
	}
	return out
}

// Delete removes everything owner wants.
func (s *Store) Delete(name string) error { return s.Set(name, State{}) }

// prepare validates st and fills o's entries from it. It takes no lock.
func (s *Store) prepare(o *owner, st State) error {
	o.flows = make([]flowEntry, len(st.Flows))
	var seen map[openflow.FlowKey]int
	scratch := scratchBuffers.Get().(*[]byte)
	defer scratchBuffers.Put(scratch)
	buf := *scratch
	if len(st.Flows) > 1 {
		seen = make(map[openflow.FlowKey]int, len(st.Flows))
	}
	for i := range st.Flows {
		f := &st.Flows[i]
		if f.Cookie != 0 {
			return fmt.Errorf("reconcile: owner %s: flow %d (%s): cookie is set by the reconciler: %w", o.name, i, strings.TrimSpace(f.String()), ErrInvalid)
		}
		if f.IdleTimeout != 0 || f.HardTimeout != 0 {
			return fmt.Errorf("reconcile: owner %s: flow %d (%s): desired flows are permanent (no timeouts): %w", o.name, i, strings.TrimSpace(f.String()), ErrInvalid)
		}
		if f.Table == openflow.TableAll {
			return fmt.Errorf("reconcile: owner %s: flow %d: table 255 is not a table: %w", o.name, i, ErrInvalid)
		}
		if s.opts.Bridge != 0 {
			t, ok := plan.LookupTable(s.opts.Bridge, plan.TableID(f.Table))
			if !ok {
				return fmt.Errorf("reconcile: owner %s: flow %d (%s): %s has no table %d in the plan: %w", o.name, i, strings.TrimSpace(f.String()), s.opts.Bridge, f.Table, ErrInvalid)
			}
			if !t.Allows(o.feature) {
				return fmt.Errorf("reconcile: owner %s: flow %d (%s): feature %s may not write to %s: %w", o.name, i, strings.TrimSpace(f.String()), o.feature, t, ErrInvalid)
			}
		}
		e := flowEntry{owner: o}
		if err := e.pack(f, &buf); err != nil {
			return fmt.Errorf("reconcile: owner %s: flow %d (%s): %w: %w", o.name, i, strings.TrimSpace(f.String()), err, ErrInvalid)
		}
		if seen != nil {
			if j, dup := seen[e.key]; dup {
				return fmt.Errorf("reconcile: owner %s: flows %d and %d have the same table, priority and match (%s): %w", o.name, j, i, strings.TrimSpace(f.String()), ErrInvalid)
			}
			seen[e.key] = i
		}
		o.flows[i] = e
	}
	o.groups = make([]groupEntry, len(st.Groups))
	gseen := map[uint32]bool{}
	for i := range st.Groups {
		g := &st.Groups[i]
		if g.ID > openflow.GroupMax {
			return fmt.Errorf("reconcile: owner %s: group %d: id past OFPG_MAX: %w", o.name, g.ID, ErrInvalid)
		}
		if gseen[g.ID] {
			return fmt.Errorf("reconcile: owner %s: group %d listed twice: %w", o.name, g.ID, ErrInvalid)
		}
		gseen[g.ID] = true
		bids := map[uint32]bool{}
		for j, b := range g.Buckets {
			if bids[b.ID] {
				return fmt.Errorf("reconcile: owner %s: group %d: bucket %d: duplicate bucket id %d: %w", o.name, g.ID, j, b.ID, ErrInvalid)
			}
			bids[b.ID] = true
			if g.Type == openflow.GroupTypeSelect && b.Weight == 0 {
				return fmt.Errorf("reconcile: owner %s: group %d: bucket %d: weight 0 in a select group is never chosen: %w", o.name, g.ID, j, ErrInvalid)
			}
		}
		e, err := newGroupEntry(g, o, buf)
		if err != nil {
			return fmt.Errorf("reconcile: owner %s: group %d: %w: %w", o.name, g.ID, err, ErrInvalid)
		}
		o.groups[i] = e
		o.buckets += len(g.Buckets)
	}
	o.meters = make([]meterEntry, len(st.Meters))
	mseen := map[uint32]bool{}
	for i := range st.Meters {
		m := &st.Meters[i]
		if m.ID == 0 || m.ID > openflow.MeterMax {
			return fmt.Errorf("reconcile: owner %s: meter %d: id outside 1-OFPM_MAX: %w", o.name, m.ID, ErrInvalid)
		}
		if mseen[m.ID] {
			return fmt.Errorf("reconcile: owner %s: meter %d listed twice: %w", o.name, m.ID, ErrInvalid)
		}
		mseen[m.ID] = true
		o.meters[i] = meterEntry{meter: m, owner: o, sum: stringSum(m.String())}
	}
	return nil
}

// release withdraws everything o wanted. s.mu is held.
func (s *Store) release(o *owner) {
	for i := range o.flows {
		e := &o.flows[i]
		sl := s.flows[e.key]
		if sl.desired == e {
			sl.desired = nil
			s.markFlow(e.key, &sl)
		}
		s.countFlowRefs(e, -1)
	}
	for i := range o.groups {
		e := &o.groups[i]
		if sl := s.groups[e.id]; sl != nil && sl.desired == e {
			sl.desired = nil
			s.markGroup(e.id, sl)
		}
		s.countGroupRefs(e, -1)
	}
	for i := range o.meters {
		e := &o.meters[i]
		if sl := s.meters[e.meter.ID]; sl != nil && sl.desired == e {
			sl.desired = nil
			s.markMeter(e.meter.ID, sl)
		}
	}
}

// claim installs o's entries as desired. s.mu is held.
func (s *Store) claim(o *owner) {
	for i := range o.flows {
		e := &o.flows[i]
		sl := s.flows[e.key]
		sl.desired = e
		s.markFlow(e.key, &sl)
		s.countFlowRefs(e, 1)
	}
	for i := range o.groups {
		e := &o.groups[i]
		sl := s.groups[e.id]
		if sl == nil {
			sl = &groupSlot{}
			s.groups[e.id] = sl
		}
		sl.desired = e
		s.markGroup(e.id, sl)
		s.countGroupRefs(e, 1)
	}
	for i := range o.meters {
		e := &o.meters[i]
		sl := s.meters[e.meter.ID]
		if sl == nil {
			sl = &meterSlot{}
			s.meters[e.meter.ID] = sl
		}
		sl.desired = e
		s.markMeter(e.meter.ID, sl)
	}
}

// countFlowRefs counts the groups and meters e uses d times more. s.mu is
// held.
func (s *Store) countFlowRefs(e *flowEntry, d int32) {
	e.visitRefs(func(id uint32) { s.addRef(refKey{false, id}, d) }, func(id uint32) { s.addRef(refKey{true, id}, d) })
}

func (s *Store) addRef(k refKey, d int32) {
	if n := s.refs[k] + d; n != 0 {
		s.refs[k] = n
	} else {
		delete(s.refs, k)
	}
}

// markFlow stores sl under k and queues it for the next diff.
func (s *Store) markFlow(k openflow.FlowKey, sl *flowSlot) {
	if !sl.dirty {
		sl.dirty = true
		s.dirtyF = append(s.dirtyF, k)
	}
	s.flows[k] = *sl
}

func (s *Store) markGroup(id uint32, sl *groupSlot) {
	if !sl.dirty {
		sl.dirty = true
		s.dirtyG = append(s.dirtyG, id)
	}
}

func (s *Store) markMeter(id uint32, sl *meterSlot) {
	if !sl.dirty {
		sl.dirty = true
		s.dirtyM = append(s.dirtyM, id)
	}
}

// Get returns what owner wants.
func (s *Store) Get(name string) (State, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.owners[name]
	if !ok {
		return State{}, false
	}
	var st State
	st.Flows = make([]openflow.Flow, len(o.flows))
	for i := range o.flows {
		st.Flows[i] = *o.flows[i].value()
	}
	if len(o.groups) > 0 {
		st.Groups = make([]openflow.GroupEntry, len(o.groups))
		for i := range o.groups {
			st.Groups[i] = *o.groups[i].value()
		}
	}
	if len(o.meters) > 0 {
		st.Meters = make([]openflow.MeterEntry, len(o.meters))
		for i := range o.meters {
			st.Meters[i] = *o.meters[i].meter
		}
	}
	return st, true
}

// Owners returns the names of the owners whose name starts with prefix,
// sorted.
func (s *Store) Owners(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.owners {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Counts returns how many flows, groups and meters are desired.
func (s *Store) Counts() (flows, groups, meters int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total.Flows, s.total.Groups, s.total.Meters
}

// Total returns what every owner wants.
func (s *Store) Total() Use {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// NamespaceUse returns what the owners of each namespace want, by
// namespace ("" for the node's own owners: the pipeline, node networking,
// shared meters and guards). A namespace that wants nothing is absent.
// Owners the budget holds back count in none.
func (s *Store) NamespaceUse() map[string]Use {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Use, len(s.use))
	for ns, u := range s.use {
		out[ns] = *u
	}
	return out
}

// count adds (sign 1) or removes (sign -1) an owner's entries from the
// totals and its namespace's use.
func (s *Store) count(o *owner, sign int) {
	s.total.add(o, sign)
	u := s.use[o.ns]
	if u == nil {
		u = &Use{}
		s.use[o.ns] = u
	}
	u.add(o, sign)
	if u.IsZero() {
		delete(s.use, o.ns)
	}
}

// Pending reports whether some desired change has not been applied yet.
func (s *Store) Pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.dirtyF)+len(s.dirtyG)+len(s.dirtyM) > 0
}

// Errors returns, per owner, the last error that kept its changes off the
// switch (a rejected bundle, a reference to a group nobody wants, its
// namespace's budget: a *BudgetError). An owner whose changes went through
// has none.
func (s *Store) Errors() map[string]error {
	s.mu.Lock()
	out := map[string]error{}
	for n, o := range s.owners {
		if o.held {
			out[n] = o.refusal
		} else if err := o.lastErr(); err != nil {
			out[n] = err
		}
	}
	s.mu.Unlock()
	if b := s.opts.Budget; b != nil {
		// The refusals with the budget's numbers as they are now (taken
		// after s.mu: the budget's lock comes first).
		for n, err := range out {
			if be, ok := err.(*BudgetError); ok {
				out[n] = b.refresh(be)
			}
		}
	}
	return out
}

// OwnerOfCookie returns the name of the owner whose flows carry cookie c
// (any generation).
func (s *Store) OwnerOfCookie(c uint64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.byHash[c&uint64(plan.OwnerMask)]; ok {
		return o.name, true
	}
	return "", false
}

// scratchBuffers hold the space prepare encodes flows and groups in before
// they are copied into their packed form: a cold start prepares every
// owner at once, and a buffer grown anew for each flow and group was 25 MB
// of its garbage at 10,000 Services.
var scratchBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 4096)
	return &b
}}

// groupReadLimit is the largest group description the reconciler reads
// back. Open vSwitch 3.1 cannot report a group whose description does not
// fit one OpenFlow message: the length fields of its reply overflow and
// the connection's byte stream falls out of step (ovs-ofctl dump-groups
// fails the same way). Such groups are written, never read.
const groupReadLimit = 60000

// groupReadSet returns the ids of the desired groups that can be read
// back, and whether some desired group cannot (then groups must be read
// one by one, by id, and never all at once).
func (s *Store) groupReadSet() (readable []uint32, someLarge bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sl := range s.groups {
		if sl.desired == nil {
			continue
		}
		if sl.desired.large {
			someLarge = true
			continue
		}
		readable = append(readable, id)
	}
	sort.Slice(readable, func(i, j int) bool { return readable[i] < readable[j] })
	return readable, someLarge
}
