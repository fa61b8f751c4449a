package service

import (
	"cmp"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/lib/shrink"
)

// ErrorFunc receives bad input found while recording a change. It is called
// from Record (so from the informer's goroutine) and from Update.
type ErrorFunc func(err error)

// ServiceTracker records Service changes and applies them in Update. It is
// safe for concurrent use: informer callbacks call Record, the sync loop
// calls Update and Ports.
type ServiceTracker struct {
	mu      sync.Mutex
	onError ErrorFunc
	// pending holds, per Service, the processed form before the first
	// unapplied change (previous) and after the latest (current); nil
	// stands for "absent".
	pending changes[serviceInfo]
	// all is every valid Service as last applied; active the service ports
	// in use (a Service that lost a ClusterIP conflict is in all but not
	// in active).
	all     map[types.NamespacedName]*serviceInfo
	active  map[ServicePortName]*ServicePort
	ipOwner map[netip.Addr]types.NamespacedName
	blocked map[types.NamespacedName]bool
	// Indexes that keep Update linear in the changes, not the cluster:
	// the addresses each Service holds in ipOwner, and its ports in active.
	ipsOf   map[types.NamespacedName][]netip.Addr
	portsOf map[types.NamespacedName][]ServicePortName
	// ipMoves holds the ClusterIPs taken or freed by the Updates since
	// the last TakeClusterIPChanges.
	ipMoves map[netip.Addr]struct{}
	// peaks are the high-water marks of the maps above (see package
	// shrink).
	peaks [5]shrink.Peak
}

// changes coalesces the changes recorded for each object (by namespace
// and name) between two Updates: its processed form before the first
// (previous) and after the latest (current); nil stands for "absent". The
// trackers hold it under their mutex.
type changes[V any] map[types.NamespacedName]*change[V]

type change[V any] struct {
	previous, current *V
}

// keepMapAt is the most entries a map of changes between two Updates may
// have held and still be cleared for reuse: a bigger one (a resync, the
// cluster's Services arriving at start-up) is dropped instead, as a Go map
// keeps the room it grew to, and 10,000 Services' worth is 1.5 MB held for
// nothing after the first Update.
const keepMapAt = 256

// reset empties m for reuse, or returns a fresh map when m grew past
// keepMapAt entries.
func reset[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > keepMapAt {
		return make(map[K]V)
	}
	clear(m)
	return m
}

// sized returns m, or an empty map with room for n entries when m is empty
// and n is past keepMapAt: the start-up's first Update brings every
// Service or slice of the cluster at once, and growing the maps to that
// size one rehash at a time took about 4% of the start-up's CPU.
func sized[K comparable, V any](m map[K]V, n int) map[K]V {
	if len(m) == 0 && n > keepMapAt {
		return make(map[K]V, n)
	}
	return m
}

// record notes a change of key from prev to cur and reports whether one is
// pending afterwards: false when it cancelled out (same says so).
func (c changes[V]) record(key types.NamespacedName, prev, cur *V, same func(a, b *V) bool) bool {
	ch, ok := c[key]
	if !ok {
		ch = &change[V]{previous: prev}
		c[key] = ch
	}
	ch.current = cur
	if same(ch.previous, ch.current) {
		delete(c, key)
		return false
	}
	return true
}

// NewServiceTracker returns an empty tracker. onError may be nil.
func NewServiceTracker(onError ErrorFunc) *ServiceTracker {
	if onError == nil {
		onError = func(error) {}
	}
	return &ServiceTracker{
		onError: onError,
		pending: changes[serviceInfo]{},
		all:     map[types.NamespacedName]*serviceInfo{},
		active:  map[ServicePortName]*ServicePort{},
		ipOwner: map[netip.Addr]types.NamespacedName{},
		blocked: map[types.NamespacedName]bool{},
		ipsOf:   map[types.NamespacedName][]netip.Addr{},
		portsOf: map[types.NamespacedName][]ServicePortName{},
		ipMoves: map[netip.Addr]struct{}{},
	}
}

// Record notes a change of one Service from previous to current; either
// may be nil (an add or a delete). It reports whether a change is pending
// for that Service afterwards: false when the change cancelled out.
func (t *ServiceTracker) Record(previous, current *v1.Service) bool {
	return t.RecordService(ServiceOf(previous), ServiceOf(current))
}

// RecordService is Record with Services processed already (ServiceOf):
// the current one's bad fields are reported now.
func (t *ServiceTracker) RecordService(previous, current *Service) bool {
	key, prev, cur, ok := unpackChange(previous, current, t.onError)
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending.record(key, prev, cur, sameService)
}

// processed is a Service or a Slice as the proxy keeps it: an identity,
// the processed form, and the bad fields found on the way.
type processed[V any] interface {
	parts() (*Identity, *V, []error)
}

// unpackChange returns the name of the object a change from previous to
// current is about (the current one's, or the previous one's for a
// delete) and both processed forms, and reports the current one's bad
// fields to onError; false when both are nil.
func unpackChange[V any, T processed[V]](previous, current T, onError ErrorFunc) (types.NamespacedName, *V, *V, bool) {
	prevID, prev, _ := previous.parts()
	id, cur, errs := current.parts()
	if id == nil {
		id = prevID
	}
	if id == nil {
		return types.NamespacedName{}, nil, nil, false
	}
	for _, err := range errs {
		onError(err)
	}
	return types.NamespacedName{Namespace: id.Namespace, Name: id.Name}, prev, cur, true
}

// sameService compares processed forms, ignoring the creation time.
func sameService(a, b *serviceInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.key == b.key && reflect.DeepEqual(a.clusterIPs, b.clusterIPs) && reflect.DeepEqual(a.ports, b.ports)
}

// PendingCount returns how many Services have changes waiting for Update
// (kube-proxy's service_changes_pending gauge); 0 means Update has
// nothing to do.
func (t *ServiceTracker) PendingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// Update applies the pending changes and returns the service ports whose
// model changed (added, removed or different).
//
// A ClusterIP belongs to the Service that holds it; another Service
// claiming it is reported (ErrDuplicateIP) and left out until the address
// is free. Among Services claiming a free address at once, the oldest (then
// the first by namespace/name) wins.
func (t *ServiceTracker) Update() ChangeSet {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		return ChangeSet{}
	}
	// Sized for the batch: a start-up's holds every Service of the cluster.
	n := len(t.pending)
	changed := make(ChangeSet, n)
	candidates := make(map[types.NamespacedName]bool, n)
	fresh := make(map[types.NamespacedName]bool, n)
	held := make(map[types.NamespacedName][]netip.Addr, n) // before this Update
	t.all, t.ipsOf, t.portsOf = sized(t.all, n), sized(t.ipsOf, n), sized(t.portsOf, n)
	t.active, t.ipOwner = sized(t.active, n), sized(t.ipOwner, n)
	for key, ch := range t.pending {
		fresh[key] = true
		held[key] = t.ipsOf[key]
		if ch.current == nil {
			delete(t.all, key)
		} else {
			t.all[key] = ch.current
		}
		candidates[key] = true
		t.release(key)
	}
	t.pending = reset(t.pending)
	for key := range t.blocked {
		candidates[key] = true
	}
	order := make([]types.NamespacedName, 0, len(candidates))
	for key := range candidates {
		order = append(order, key)
	}
	slices.SortFunc(order, func(a, b types.NamespacedName) int {
		ia, ib := t.all[a], t.all[b]
		if ia != nil && ib != nil {
			if c := ia.created.Compare(ib.created); c != 0 {
				return c
			}
		}
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, key := range order {
		info := t.all[key]
		wasBlocked := t.blocked[key]
		delete(t.blocked, key)
		var want []*ServicePort
		if info != nil {
			conflict := false
			for _, a := range info.clusterIPs {
				if o, held := t.ipOwner[a]; held && o != key {
					conflict = true
					if !wasBlocked || fresh[key] {
						t.onError(&InputError{Kind: "Service", Namespace: key.Namespace, Name: key.Name,
							Field: "spec.clusterIPs", Err: fmt.Errorf("%w: %s is held by service %s", ErrDuplicateIP, a, o)})
					}
				}
			}
			if conflict {
				t.blocked[key] = true
			} else {
				for _, a := range info.clusterIPs {
					t.ipOwner[a] = key
				}
				t.ipsOf[key] = info.clusterIPs
				want = info.ports
			}
		}
		t.noteMoves(held[key], t.ipsOf[key])
		// Diff this Service's active ports against want.
		for _, name := range t.portsOf[key] {
			if q := portNamed(want, name); q == nil || !reflect.DeepEqual(t.active[name], q) {
				changed[name] = struct{}{}
				delete(t.active, name)
			}
		}
		delete(t.portsOf, key)
		for _, p := range want {
			if _, ok := t.active[p.Name]; !ok {
				t.active[p.Name] = p
				changed[p.Name] = struct{}{}
			}
			t.portsOf[key] = append(t.portsOf[key], p.Name)
		}
	}
	t.all, t.active = shrink.Map(t.all, &t.peaks[0]), shrink.Map(t.active, &t.peaks[1])
	t.ipOwner, t.ipsOf = shrink.Map(t.ipOwner, &t.peaks[2]), shrink.Map(t.ipsOf, &t.peaks[3])
	t.portsOf = shrink.Map(t.portsOf, &t.peaks[4])
	return changed
}

// noteMoves records the ClusterIPs in one of before and after (what a
// Service held before and after an Update) but not in both.
func (t *ServiceTracker) noteMoves(before, after []netip.Addr) {
	for _, a := range before {
		if !slices.Contains(after, a) {
			t.ipMoves[a] = struct{}{}
		}
	}
	for _, a := range after {
		if !slices.Contains(before, a) {
			t.ipMoves[a] = struct{}{}
		}
	}
}

// TakeClusterIPChanges returns and forgets the ClusterIPs that a Service
// took or freed in the Updates since the last call, sorted: an endpoint at
// one of them has become, or stopped being, a service address.
func (t *ServiceTracker) TakeClusterIPChanges() []netip.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ipMoves) == 0 {
		return nil
	}
	out := make([]netip.Addr, 0, len(t.ipMoves))
	for a := range t.ipMoves {
		out = append(out, a)
	}
	t.ipMoves = reset(t.ipMoves)
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// ClusterIPOwner returns the Service that holds a as a ClusterIP (as of
// the last Update).
func (t *ServiceTracker) ClusterIPOwner(a netip.Addr) (types.NamespacedName, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	svc, ok := t.ipOwner[a]
	return svc, ok
}

// release frees the ClusterIPs key holds.
func (t *ServiceTracker) release(key types.NamespacedName) {
	for _, a := range t.ipsOf[key] {
		if t.ipOwner[a] == key {
			delete(t.ipOwner, a)
		}
	}
	delete(t.ipsOf, key)
}

// Created returns when the Service key was created, as last applied.
func (t *ServiceTracker) Created(key types.NamespacedName) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	info := t.all[key]
	if info == nil {
		return time.Time{}, false
	}
	return info.created, true
}

// Ports returns the active service ports. The map is a copy; the ports are
// shared and must not be modified.
func (t *ServiceTracker) Ports() map[ServicePortName]*ServicePort {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[ServicePortName]*ServicePort, len(t.active))
	for n, p := range t.active {
		out[n] = p
	}
	return out
}

// Port returns one active service port.
func (t *ServiceTracker) Port(n ServicePortName) (*ServicePort, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.active[n]
	return p, ok
}

// EndpointsTracker records EndpointSlice changes and applies them in
// Update. It merges every slice of a Service into one endpoint list per
// service port. It is safe for concurrent use.
type EndpointsTracker struct {
	mu      sync.Mutex
	onError ErrorFunc
	pending changes[sliceInfo] // by slice namespace/name
	// slices holds the applied slices of each Service, sorted by slice
	// name: a Service has one or a few, and a map each would cost more.
	slices    map[types.NamespacedName][]namedSlice
	endpoints map[ServicePortName][]Endpoint
	// portsOf indexes each Service's ports in endpoints, so that Update
	// stays linear in the changes. (The Service an applied slice belongs
	// to needs no index: a pending change's previous form is the one
	// applied, and names it.)
	portsOf map[types.NamespacedName][]ServicePortName
	// triggers holds the last-change-trigger-time of the changes recorded
	// since the last Update, per Service.
	triggers map[types.NamespacedName][]time.Time
	// peaks are the high-water marks of slices, endpoints and portsOf (see
	// package shrink).
	peaks [3]shrink.Peak
}

// namedSlice is one applied slice of a Service.
type namedSlice struct {
	name string
	info *sliceInfo
}

// findSlice returns where the slice called name is in l (sorted by name),
// or where it would go, and whether it is there.
func findSlice(l []namedSlice, name string) (int, bool) {
	return slices.BinarySearchFunc(l, name, func(s namedSlice, n string) int { return strings.Compare(s.name, n) })
}

// NewEndpointsTracker returns an empty tracker. onError may be nil.
func NewEndpointsTracker(onError ErrorFunc) *EndpointsTracker {
	if onError == nil {
		onError = func(error) {}
	}
	return &EndpointsTracker{
		onError:   onError,
		pending:   changes[sliceInfo]{},
		slices:    map[types.NamespacedName][]namedSlice{},
		endpoints: map[ServicePortName][]Endpoint{},
		triggers:  map[types.NamespacedName][]time.Time{},
		portsOf:   map[types.NamespacedName][]ServicePortName{},
	}
}

// Record notes a change of one EndpointSlice from previous to current;
// either may be nil. It reports whether a change is pending for that slice
// afterwards: false when the change cancelled out.
func (t *EndpointsTracker) Record(previous, current *discovery.EndpointSlice) bool {
	return t.RecordSlice(SliceOf(previous), SliceOf(current))
}

// RecordSlice is Record for slices already processed (SliceOf), as an
// informer whose transform is SliceOf hands them over.
func (t *EndpointsTracker) RecordSlice(previous, current *Slice) bool {
	key, prev, cur, ok := unpackChange(previous, current, t.onError)
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur != nil && !current.trigger.IsZero() {
		t.triggers[cur.service] = append(t.triggers[cur.service], current.trigger)
	}
	return t.pending.record(key, prev, cur, func(a, b *sliceInfo) bool { return reflect.DeepEqual(a, b) })
}

// PendingCount returns how many EndpointSlices have changes waiting for
// Update (kube-proxy's endpoint_changes_pending gauge).
func (t *EndpointsTracker) PendingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// Update applies the pending changes and returns the service ports whose
// endpoints changed.
func (t *EndpointsTracker) Update() ChangeSet {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := make(ChangeSet, len(t.pending))
	affected := make(map[types.NamespacedName]bool, len(t.pending))
	t.slices, t.portsOf = sized(t.slices, len(t.pending)), sized(t.portsOf, len(t.pending))
	t.endpoints = sized(t.endpoints, len(t.pending))
	for key, ch := range t.pending {
		if ch.previous != nil {
			affected[ch.previous.service] = true
		}
		if ch.current != nil {
			affected[ch.current.service] = true
		}
		// The slice may have moved between Services (its label changed):
		// remove it from where it was applied (its previous form, the
		// applied one, names the Service), then add it where it belongs.
		if ch.previous != nil {
			svc := ch.previous.service
			l := t.slices[svc]
			if i, found := findSlice(l, key.Name); found {
				l = slices.Delete(l, i, i+1)
			}
			if len(l) == 0 {
				delete(t.slices, svc)
			} else {
				t.slices[svc] = l
			}
		}
		if ch.current != nil {
			l := t.slices[ch.current.service]
			i, found := findSlice(l, key.Name)
			if found {
				l[i] = namedSlice{key.Name, ch.current}
			} else {
				l = slices.Insert(l, i, namedSlice{key.Name, ch.current})
			}
			t.slices[ch.current.service] = l
		}
	}
	t.pending = reset(t.pending)
	for svc := range affected {
		merged := map[ServicePortName][]Endpoint{}
		if infos := t.slices[svc]; len(infos) == 1 {
			// One slice, the usual case: its lists, sorted and without
			// duplicates when the slice was processed, are the Service's
			// (capped, so that appending to one copies it).
			for _, p := range infos[0].info.ports {
				merged[p.name] = p.eps[:len(p.eps):len(p.eps)]
			}
		} else {
			for _, ns := range infos {
				for _, p := range ns.info.ports {
					merged[p.name] = append(merged[p.name], p.eps...)
				}
			}
			for name, eps := range merged {
				merged[name] = sortEndpoints(eps)
			}
		}
		for _, name := range t.portsOf[svc] {
			if eps, ok := merged[name]; !ok || !slices.Equal(t.endpoints[name], eps) {
				changed[name] = struct{}{}
				delete(t.endpoints, name)
			}
		}
		delete(t.portsOf, svc)
		for name, eps := range merged {
			if _, ok := t.endpoints[name]; !ok {
				t.endpoints[name] = eps
				changed[name] = struct{}{}
			}
			t.portsOf[svc] = append(t.portsOf[svc], name)
		}
	}
	t.slices, t.endpoints = shrink.Map(t.slices, &t.peaks[0]), shrink.Map(t.endpoints, &t.peaks[1])
	t.portsOf = shrink.Map(t.portsOf, &t.peaks[2])
	return changed
}

// Endpoints returns the endpoints of one service port (sorted; shared, do
// not modify).
func (t *EndpointsTracker) Endpoints(n ServicePortName) []Endpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endpoints[n]
}

// PortsUsing returns the service ports with an endpoint at one of addrs
// (ports whose usable endpoints change when a ClusterIP is taken or freed).
// It reads every endpoint: call it only when addrs is not empty.
func (t *EndpointsTracker) PortsUsing(addrs []netip.Addr) ChangeSet {
	out := ChangeSet{}
	if len(addrs) == 0 {
		return out
	}
	set := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		set[a] = struct{}{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, eps := range t.endpoints {
		for _, e := range eps {
			if _, ok := set[e.IP]; ok {
				out[name] = struct{}{}
				break
			}
		}
	}
	return out
}

// Usable returns the endpoints of service port n that check accepts, and
// an *InputError for each entry of the Service's EndpointSlices that holds
// an address check refuses (Kind EndpointSlice, Field
// "endpoints[i].addresses[0]"). The list is shared: do not modify it.
func (t *EndpointsTracker) Usable(n ServicePortName, check *EndpointCheck) ([]Endpoint, []error) {
	// The check runs without t's lock: it may ask the ServiceTracker.
	eps, refused := check.Filter(t.Endpoints(n))
	if len(refused) == 0 {
		return eps, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, r := range refused {
		for _, ns := range t.slices[n.NamespacedName] {
			ns.info.addrs.each(func(i int, a netip.Addr) {
				if a == r.IP {
					errs = append(errs, &InputError{Kind: "EndpointSlice", Namespace: n.Namespace, Name: ns.name,
						Field: fmt.Sprintf("endpoints[%d].addresses[0]", i), Err: r.Err})
				}
			})
		}
	}
	return eps, errs
}

// TakeTriggerTimes returns and forgets the
// endpoints.kubernetes.io/last-change-trigger-time values recorded since
// the last call, per Service: the start of kube-proxy's
// network_programming_duration_seconds.
func (t *EndpointsTracker) TakeTriggerTimes() map[types.NamespacedName][]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.triggers
	t.triggers = map[types.NamespacedName][]time.Time{}
	return out
}
