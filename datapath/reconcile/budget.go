package reconcile

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrOverBudget marks a state the Store holds back because its
// namespace's budget has no room for its object.
var ErrOverBudget = errors.New("over its namespace's budget")

// Charge names the object whose state an owner holds, for a namespace
// budget: every owner charged to the same object (a Service's ports, on
// both bridges) is let in or held back together. The namespace is the
// owner's (plan.OwnerNamespace).
type Charge struct {
	// Kind, APIVersion, Name and UID name the object in its namespace
	// ("Service", "v1", "web"); UID may be empty.
	Kind, APIVersion, Name, UID string
	// Created is the object's creation time. The budget lets objects in
	// from the oldest, so that the newest is the one held back, whatever
	// order their states arrive in.
	Created time.Time
}

// check validates c for owner o.
func (c *Charge) check(o *owner) error {
	switch {
	case o.ns == "":
		return fmt.Errorf("reconcile: owner %s: charged to %s %s, but it is no namespace's owner: %w", o.name, c.Kind, c.Name, ErrInvalid)
	case c.Kind == "" || c.Name == "":
		return fmt.Errorf("reconcile: owner %s: a charge needs the object's kind and name: %w", o.name, ErrInvalid)
	}
	return nil
}

// Refusal is an object a Budget holds back or, with Admitted, lets in
// again after it had been reported held back.
type Refusal struct {
	Namespace string
	// Kind, APIVersion, Name and UID are the object's (its Charge's).
	Kind, APIVersion, Name, UID string
	Created                     time.Time
	// Cost is the object's flows and buckets on the node's bridges; Use
	// is what the namespace's objects that the budget lets in take of
	// Budget, which is the limit.
	Cost, Use, Budget int
	// Admitted says the object is let in again.
	Admitted bool
}

// String describes the refusal for an event or a log line.
func (r Refusal) String() string {
	if r.Admitted {
		return fmt.Sprintf("%s %s/%s is programmed again: its %d flows and buckets fit the namespace's budget of %d (the namespace's objects use %d of it)",
			r.Kind, r.Namespace, r.Name, r.Cost, r.Budget, r.Use)
	}
	return fmt.Sprintf("%s %s/%s is not programmed: it needs %d flows and buckets, and namespace %s uses %d of its budget of %d on this node "+
		"(objects are let in from the oldest); it is programmed once there is room", r.Kind, r.Namespace, r.Name, r.Cost, r.Namespace, r.Use, r.Budget)
}

// BudgetError is why the Store holds an owner back (Store.Errors). It
// wraps ErrOverBudget.
type BudgetError struct {
	Owner string
	Refusal
}

// Error implements error.
func (e *BudgetError) Error() string {
	return fmt.Sprintf("reconcile: owner %s: %s: %s", e.Owner, ErrOverBudget, e.Refusal)
}

// Unwrap returns ErrOverBudget.
func (e *BudgetError) Unwrap() error { return ErrOverBudget }

// Budget bounds what the objects of each namespace may want of a node's
// bridges, in flows and group buckets (Use.Entries), across the Stores
// that share it (one per bridge).
//
// Only charged states count (State.Charge): they belong to objects a
// tenant creates at will and whose refusal fails closed (a Service that is
// not programmed is refused or dropped, it opens nothing). The decision is
// a function of the objects alone, not of the order their states arrive
// in: the objects of a namespace are let in from the oldest (by creation
// time, then kind and name), each if it fits in what the older ones let
// in leave of the budget. So the same objects are held back after a
// restart, on every node whose flows for them are the same; an object is
// never held back to make room for a newer one; and one held back is let
// in again, by itself, when room appears.
//
// A held-back state is kept: the Store's Owners and Get list it, Errors
// reports it (a *BudgetError), and none of its entries is desired.
type Budget struct {
	limit int

	mu     sync.Mutex
	spaces map[string]*space
	parts  map[part]*charged
	report func([]Refusal)
}

// NewBudget returns a budget of limit flows and buckets per namespace
// (at least 1).
func NewBudget(limit int) *Budget {
	return &Budget{limit: max(limit, 1), spaces: map[string]*space{}, parts: map[part]*charged{}}
}

// Limit returns the budget of each namespace.
func (b *Budget) Limit() int { return b.limit }

// part is one owner of one Store charged to an object.
type part struct {
	store *Store
	owner string
}

// objectKey is an object in its namespace.
type objectKey struct{ kind, name string }

// charged is one object and what its owners want.
type charged struct {
	key     objectKey
	sp      *space
	ref     Charge
	created time.Time
	parts   map[part]int // each owner's flows and buckets
	cost    int          // their sum
	// admitted says the budget lets it in; reported that its refusal was
	// reported (and so its admission will be).
	admitted, reported bool
}

// space is one namespace's objects, oldest first.
type space struct {
	name    string
	objects []*charged
	byKey   map[objectKey]*charged
	total   int // every object's cost
	used    int // the admitted objects' cost
	refused int // objects held back
}

// order is the budget's order of objects: oldest first, then by kind and
// name.
func order(a, b *charged) int {
	return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.kind, b.key.kind), strings.Compare(a.key.name, b.key.name))
}

// set is Store.Set of o in s under the budget: it charges o's entries to
// its object, decides which objects of the namespace are let in, and
// applies the decision to every owner it changes, in every Store.
func (b *Budget) set(s *Store, o *owner, c *Charge, empty bool) error {
	b.mu.Lock()
	s.mu.Lock()
	if !empty {
		if err := s.checkConflicts(o); err != nil {
			s.mu.Unlock()
			b.mu.Unlock()
			return err
		}
	}
	p := part{s, o.name}
	old := b.parts[p]
	var obj *charged
	if c != nil && !empty {
		obj = b.object(o.ns, c)
	}
	var touched []*space
	if old != nil {
		old.cost -= old.parts[p]
		old.sp.total -= old.parts[p]
		delete(old.parts, p)
		delete(b.parts, p)
		touched = append(touched, old.sp)
	}
	if obj != nil {
		cost := len(o.flows) + o.buckets
		obj.parts[p] = cost
		obj.cost += cost
		obj.sp.total += cost
		b.parts[p] = obj
		if len(touched) == 0 || touched[0] != obj.sp {
			touched = append(touched, obj.sp)
		}
	}
	if old != nil && old != obj && len(old.parts) == 0 {
		b.drop(old)
	}
	var flips []*charged
	for _, sp := range touched {
		flips = append(flips, sp.decide(b.limit)...)
		if len(sp.objects) == 0 {
			delete(b.spaces, sp.name)
		}
	}
	var refusal error
	if obj != nil && !obj.admitted {
		refusal = obj.refusal(b.limit, o.name)
	}
	s.replace(o, empty, refusal)
	others := map[*Store]bool{}
	for _, f := range flips {
		for q := range f.parts {
			switch {
			case q == p:
			case q.store == s:
				s.hold(q.owner, f.refusalIf(b.limit, q.owner))
			default:
				others[q.store] = true
			}
		}
	}
	s.mu.Unlock()
	for t := range others {
		t.mu.Lock()
		for _, f := range flips {
			for q := range f.parts {
				if q.store == t {
					t.hold(q.owner, f.refusalIf(b.limit, q.owner))
				}
			}
		}
		t.mu.Unlock()
	}
	var reports []Refusal
	report := b.report
	if report != nil {
		for _, f := range flips {
			if r, ok := f.transition(b.limit); ok {
				reports = append(reports, r)
			}
		}
	}
	b.mu.Unlock()
	if len(reports) > 0 {
		report(reports)
	}
	return nil
}

// object returns the object c names in namespace ns, made (admitted, at no
// cost) if new, and placed by its creation time.
func (b *Budget) object(ns string, c *Charge) *charged {
	sp := b.spaces[ns]
	if sp == nil {
		sp = &space{name: ns, byKey: map[objectKey]*charged{}}
		b.spaces[ns] = sp
	}
	k := objectKey{c.Kind, c.Name}
	obj := sp.byKey[k]
	if obj != nil && obj.created.Equal(c.Created) {
		obj.ref = *c
		return obj
	}
	if obj != nil {
		// Recreated under the same name: its place moves.
		sp.remove(obj)
	} else {
		obj = &charged{key: k, sp: sp, parts: map[part]int{}, admitted: true}
		sp.byKey[k] = obj
	}
	obj.ref, obj.created = *c, c.Created
	i, _ := slices.BinarySearchFunc(sp.objects, obj, order)
	sp.objects = slices.Insert(sp.objects, i, obj)
	if !obj.admitted {
		sp.refused++
	}
	return obj
}

// drop forgets obj, which has no owner left.
func (b *Budget) drop(obj *charged) {
	sp := obj.sp
	sp.remove(obj)
	delete(sp.byKey, obj.key)
}

// remove takes obj out of sp's order (not out of byKey).
func (sp *space) remove(obj *charged) {
	if i, found := slices.BinarySearchFunc(sp.objects, obj, order); found && sp.objects[i] == obj {
		sp.objects = slices.Delete(sp.objects, i, i+1)
	} else if i := slices.Index(sp.objects, obj); i >= 0 {
		sp.objects = slices.Delete(sp.objects, i, i+1)
	}
	if !obj.admitted {
		sp.refused--
	}
}

// decide lets sp's objects in from the oldest, each if it fits in what
// the older ones left of limit, and returns those whose admission changed.
func (sp *space) decide(limit int) []*charged {
	if sp.total <= limit && sp.refused == 0 {
		// Everything fits, and everything is in: the usual case, O(1).
		sp.used = sp.total
		return nil
	}
	var flips []*charged
	used, refused := 0, 0
	for _, obj := range sp.objects {
		in := used+obj.cost <= limit
		if in {
			used += obj.cost
		} else {
			refused++
		}
		if in != obj.admitted {
			obj.admitted = in
			flips = append(flips, obj)
		}
	}
	sp.used, sp.refused = used, refused
	return flips
}

// refusal returns the error that holds owner back for obj.
func (obj *charged) refusal(limit int, owner string) error {
	return &BudgetError{Owner: owner, Refusal: obj.describe(limit)}
}

// refusalIf returns refusal for an object held back, nil for one let in.
func (obj *charged) refusalIf(limit int, owner string) error {
	if obj.admitted {
		return nil
	}
	return obj.refusal(limit, owner)
}

// describe returns obj's refusal (or admission) as it stands.
func (obj *charged) describe(limit int) Refusal {
	return Refusal{
		Namespace: obj.sp.name, Kind: obj.ref.Kind, APIVersion: obj.ref.APIVersion, Name: obj.ref.Name, UID: obj.ref.UID,
		Created: obj.created, Cost: obj.cost, Use: obj.sp.used, Budget: limit, Admitted: obj.admitted,
	}
}

// transition returns what to report of a change of obj's admission: its
// refusal, or its admission after a reported refusal.
func (obj *charged) transition(limit int) (Refusal, bool) {
	switch {
	case !obj.admitted && !obj.reported:
		obj.reported = true
		return obj.describe(limit), true
	case obj.admitted && obj.reported:
		obj.reported = false
		return obj.describe(limit), true
	}
	return Refusal{}, false
}

// Report has f called, from then on, with the objects held back or let in
// again (after a reported refusal) by each change, outside every lock; it
// is called at once with the objects held back so far. Until Report, no
// change is reported: the agent's start-up sets its states in no useful
// order, and only the decision once they are all in is worth an event.
func (b *Budget) Report(f func([]Refusal)) {
	b.mu.Lock()
	b.report = f
	var now []Refusal
	for _, sp := range b.spaces {
		for _, obj := range sp.objects {
			if r, ok := obj.transition(b.limit); ok {
				now = append(now, r)
			}
		}
	}
	b.mu.Unlock()
	slices.SortFunc(now, func(x, y Refusal) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), x.Created.Compare(y.Created), strings.Compare(x.Name, y.Name))
	})
	if len(now) > 0 {
		f(now)
	}
}

// refresh returns be with the numbers of its object as they are now.
func (b *Budget) refresh(be *BudgetError) *BudgetError {
	if r, ok := b.Current(be.Namespace, be.Kind, be.Name); ok && !r.Admitted {
		return &BudgetError{Owner: be.Owner, Refusal: r}
	}
	return be
}

// Current returns the object's admission as it stands now; false when no
// state is charged to it.
func (b *Budget) Current(namespace, kind, name string) (Refusal, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sp := b.spaces[namespace]
	if sp == nil {
		return Refusal{}, false
	}
	obj := sp.byKey[objectKey{kind, name}]
	if obj == nil {
		return Refusal{}, false
	}
	return obj.describe(b.limit), true
}

// SpaceUse is what a namespace's charged objects take of its budget.
type SpaceUse struct {
	// Used is the admitted objects' flows and buckets, Wanted every
	// charged object's.
	Used, Wanted int
	// Refused counts the objects held back.
	Refused int
}

// Spaces returns, by namespace, what its charged objects take of the
// budget; a namespace without any is absent.
func (b *Budget) Spaces() map[string]SpaceUse {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]SpaceUse, len(b.spaces))
	for ns, sp := range b.spaces {
		out[ns] = SpaceUse{Used: sp.used, Wanted: sp.total, Refused: sp.refused}
	}
	return out
}

// Refused returns the objects held back now, by namespace, oldest first.
func (b *Budget) Refused() []Refusal {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Refusal
	for _, sp := range b.spaces {
		for _, obj := range sp.objects {
			if !obj.admitted {
				out = append(out, obj.describe(b.limit))
			}
		}
	}
	slices.SortFunc(out, func(x, y Refusal) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), x.Created.Compare(y.Created), strings.Compare(x.Kind, y.Kind), strings.Compare(x.Name, y.Name))
	})
	return out
}
