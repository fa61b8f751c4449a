package reconcile

// unit is a set of owners whose changes must be applied together: a flow
// changing hands joins its old and new owner, a flow joins the owner of a
// group it uses that changes in the same diff. Units are the nodes of a
// unitSet, a union-find; only a root unit holds owners and changes.
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

// root returns the unit that u has been merged into (u itself when it is
// a root).
func (u *unit) root() *unit {
	for u.parent != nil {
		u = u.parent
	}
	return u
}

// block holds u's root back from the diff for err, unless it is held back
// already (the first reason stands).
func (u *unit) block(err error) {
	u = u.root()
	if u.err == nil {
		u.err = err
	}
}

// changes returns the number of changes the unit puts in a batch, as
// Batch.Len counts them.
func (u *unit) changes() int {
	return len(u.groupsBefore) + u.flowDeletes + u.flowUpdates + len(u.groupsAfter)
}

// absorb moves other's owners, error, size and changes into u, leaving
// other a child of u.
func (u *unit) absorb(other *unit) {
	other.parent = u
	u.owners = append(u.owners, other.owners...)
	other.owners = nil
	if other.name < u.name {
		u.name = other.name
	}
	if u.err == nil {
		u.err = other.err
	}
	u.size += other.size
	u.groupsBefore = append(u.groupsBefore, other.groupsBefore...)
	u.groupsAfter = append(u.groupsAfter, other.groupsAfter...)
	u.meters = append(u.meters, other.meters...)
	u.flowDeletes += other.flowDeletes
	u.flowUpdates += other.flowUpdates
	other.groupsBefore, other.groupsAfter, other.meters = nil, nil, nil
}

// foreignOwner names the unit of the flows and groups that nobody wants
// and no known owner wrote.
const foreignOwner = "(foreign)"

// unitSet is a union-find of units keyed by owner name: each owner starts
// in a unit of its own, and union merges two units for good. Units are
// keyed by name because an owner's entries from before its latest Set
// belong to an older *owner with the same name.
type unitSet struct {
	byName map[string]*unit
}

func newUnitSet() *unitSet { return &unitSet{byName: map[string]*unit{}} }

// of returns the root unit of owner o (foreignOwner's for nil), making o
// a unit of its own the first time.
func (s *unitSet) of(o *owner) *unit {
	name := foreignOwner
	if o != nil {
		name = o.name
	}
	return s.named(name)
}

// named returns the root unit of the owner called name, making it a unit
// of its own the first time.
func (s *unitSet) named(name string) *unit {
	u, ok := s.byName[name]
	if !ok {
		u = &unit{owners: []string{name}, name: name, batch: -1}
		s.byName[name] = u
	}
	return u.root()
}

// union merges the units of a and b and returns the merged root: the
// root with more owners absorbs the other (a's on a tie).
func (s *unitSet) union(a, b *unit) *unit {
	a, b = a.root(), b.root()
	if a == b {
		return a
	}
	if len(b.owners) > len(a.owners) {
		a, b = b, a
	}
	a.absorb(b)
	return a
}

// roots calls fn once for each root unit, in no particular order.
func (s *unitSet) roots(fn func(r *unit)) {
	seen := map[*unit]bool{}
	for _, u := range s.byName {
		r := u.root()
		if seen[r] {
			continue
		}
		seen[r] = true
		fn(r)
	}
}
