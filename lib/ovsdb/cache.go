package ovsdb

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
)

// EventKind says what happened to an Interface row.
type EventKind int

// Kinds of InterfaceEvent.
const (
	// InterfaceAdded: a row appeared (New set, Old nil).
	InterfaceAdded EventKind = iota + 1
	// InterfaceUpdated: monitored columns changed (Old and New set).
	InterfaceUpdated
	// InterfaceDeleted: the row went away (Old set, New nil).
	InterfaceDeleted
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case InterfaceAdded:
		return "added"
	case InterfaceUpdated:
		return "updated"
	case InterfaceDeleted:
		return "deleted"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// InterfaceEvent is one change of the Interface table.
type InterfaceEvent struct {
	Kind EventKind
	// Old is the row before the change, nil for InterfaceAdded. Old and New
	// are copies the cache never touches, shared by every subscriber: treat
	// them as read-only.
	Old *Interface
	// New is the row after the change, nil for InterfaceDeleted.
	New *Interface
	// OldOfport and NewOfport are the ofport before and after (0 when the
	// row did not exist or had none).
	OldOfport, NewOfport int64
	// Resync is true for events found by comparing the cache with the fresh
	// snapshot taken after a reconnection.
	Resync bool
}

// Name returns the interface name the event is about.
func (e InterfaceEvent) Name() string {
	if e.New != nil {
		return e.New.Name
	}
	if e.Old != nil {
		return e.Old.Name
	}
	return ""
}

// OfportChanged reports whether the event changes the ofport.
func (e InterfaceEvent) OfportChanged() bool { return e.OldOfport != e.NewOfport }

// InterfaceCache is a monitor-backed copy of the Interface table (the columns
// in InterfaceColumns). After a reconnection it compares the fresh snapshot
// with what it held and reports the differences as events, deletions of
// rows that vanished meanwhile included.
type InterfaceCache struct {
	c   *Client
	mon *Monitor

	mu     sync.RWMutex
	byUUID map[UUID]*Interface
	byName map[string]UUID
	subs   map[*Subscription]struct{}
	synced bool
}

// Interfaces returns the client's Interface cache, starting its monitor on
// first use.
func (c *Client) Interfaces(ctx context.Context) (*InterfaceCache, error) {
	c.mu.Lock()
	ic := c.ifaces
	c.mu.Unlock()
	if ic != nil {
		return ic, nil
	}
	ic = &InterfaceCache{c: c, byUUID: map[UUID]*Interface{}, byName: map[string]UUID{}, subs: map[*Subscription]struct{}{}}
	mon, err := c.Monitor(ctx, DatabaseName, map[string]MonitorRequest{
		TableInterface: {Columns: InterfaceColumns},
	}, ic.apply)
	if err != nil {
		return nil, wrap(err, "interface cache")
	}
	ic.mon = mon
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ifaces != nil { // another caller won the race
		go func() { _ = mon.Cancel(context.Background()) }()
		return c.ifaces, nil
	}
	c.ifaces = ic
	return ic, nil
}

// apply folds one monitor update into the cache and publishes the events.
func (ic *InterfaceCache) apply(u MonitorUpdate) {
	log := ic.c.log.WithField("table", TableInterface)
	rows := u.Tables[TableInterface]
	var events []InterfaceEvent
	ic.mu.Lock()
	if u.Snapshot {
		fresh := make(map[UUID]*Interface, len(rows))
		for id, ru := range rows {
			if ru.New == nil {
				continue
			}
			iface, err := InterfaceFromRow(id, ru.New)
			if err != nil {
				log.WithError(err).Warn("ovsdb: interface cache: row ignored")
				continue
			}
			fresh[id] = &iface
		}
		resync := ic.synced
		for id, old := range ic.byUUID {
			if _, ok := fresh[id]; !ok {
				events = append(events, InterfaceEvent{Kind: InterfaceDeleted, Old: old.clone(), OldOfport: old.Ofport, Resync: resync})
			}
		}
		for id, n := range fresh {
			old, ok := ic.byUUID[id]
			switch {
			case !ok:
				events = append(events, InterfaceEvent{Kind: InterfaceAdded, New: n.clone(), NewOfport: n.Ofport, Resync: resync})
			case !reflect.DeepEqual(old, n):
				events = append(events, InterfaceEvent{Kind: InterfaceUpdated, Old: old.clone(), New: n.clone(), OldOfport: old.Ofport, NewOfport: n.Ofport, Resync: resync})
			}
		}
		ic.byUUID = fresh
		ic.byName = make(map[string]UUID, len(fresh))
		for id, i := range fresh {
			ic.byName[i.Name] = id
		}
		ic.synced = true
	} else {
		for id, ru := range rows {
			old := ic.byUUID[id]
			if ru.New == nil {
				if old != nil {
					delete(ic.byUUID, id)
					if ic.byName[old.Name] == id {
						delete(ic.byName, old.Name)
					}
					events = append(events, InterfaceEvent{Kind: InterfaceDeleted, Old: old.clone(), OldOfport: old.Ofport})
				}
				continue
			}
			n, err := InterfaceFromRow(id, ru.New)
			if err != nil {
				log.WithError(err).Warn("ovsdb: interface cache: row ignored")
				continue
			}
			ic.byUUID[id] = &n
			ic.byName[n.Name] = id
			switch {
			case old == nil:
				events = append(events, InterfaceEvent{Kind: InterfaceAdded, New: n.clone(), NewOfport: n.Ofport})
			case !reflect.DeepEqual(old, &n):
				events = append(events, InterfaceEvent{Kind: InterfaceUpdated, Old: old.clone(), New: n.clone(), OldOfport: old.Ofport, NewOfport: n.Ofport})
			}
		}
	}
	// Deterministic order: deletions first, then by name.
	sort.SliceStable(events, func(i, j int) bool {
		di, dj := events[i].Kind == InterfaceDeleted, events[j].Kind == InterfaceDeleted
		if di != dj {
			return di
		}
		return events[i].Name() < events[j].Name()
	})
	for s := range ic.subs {
		s.push(events)
	}
	ic.mu.Unlock()
}

// Get returns a copy of the interface named name.
func (ic *InterfaceCache) Get(name string) (Interface, bool) {
	ic.mu.RLock()
	defer ic.mu.RUnlock()
	id, ok := ic.byName[name]
	if !ok {
		return Interface{}, false
	}
	return *ic.byUUID[id].clone(), true
}

// List returns copies of all interfaces, sorted by name.
func (ic *InterfaceCache) List() []Interface {
	ic.mu.RLock()
	out := make([]Interface, 0, len(ic.byUUID))
	for _, i := range ic.byUUID {
		out = append(out, *i.clone())
	}
	ic.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// closeSubscriptions ends every subscription (the client is closing).
func (ic *InterfaceCache) closeSubscriptions() {
	ic.mu.RLock()
	subs := make([]*Subscription, 0, len(ic.subs))
	for s := range ic.subs {
		subs = append(subs, s)
	}
	ic.mu.RUnlock()
	for _, s := range subs {
		s.Close()
	}
}

// Subscription delivers InterfaceEvents in order. Events queue without bound
// inside the subscription, so a slow reader never stalls the cache.
type Subscription struct {
	ic     *InterfaceCache
	ch     chan InterfaceEvent
	mu     sync.Mutex
	queue  []InterfaceEvent
	wake   chan struct{}
	stopCh chan struct{}
	done   chan struct{}
	once   sync.Once
}

// Subscribe returns a subscription to every event from now on. Close it
// when done.
func (ic *InterfaceCache) Subscribe() *Subscription {
	s := &Subscription{
		ic: ic, ch: make(chan InterfaceEvent), wake: make(chan struct{}, 1),
		stopCh: make(chan struct{}), done: make(chan struct{}),
	}
	ic.mu.Lock()
	ic.subs[s] = struct{}{}
	ic.mu.Unlock()
	go s.pump()
	return s
}

// OnChange calls f after each event from now on, until ctx ends: for a
// reader that re-reads the cache rather than follow the events.
func (ic *InterfaceCache) OnChange(ctx context.Context, f func()) {
	sub := ic.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-sub.Events():
			if !ok {
				return
			}
			f()
		}
	}
}

// Events returns the channel of events; it is closed by Close.
func (s *Subscription) Events() <-chan InterfaceEvent { return s.ch }

// Close ends the subscription and closes its channel.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.ic.mu.Lock()
		delete(s.ic.subs, s)
		s.ic.mu.Unlock()
		close(s.stopCh)
		<-s.done
	})
}

func (s *Subscription) push(evs []InterfaceEvent) {
	if len(evs) == 0 {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, evs...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Subscription) pump() {
	defer close(s.done)
	defer close(s.ch)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-s.stopCh:
				return
			}
		}
		ev := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		select {
		case s.ch <- ev:
		case <-s.stopCh:
			return
		}
	}
}

// WaitOfport waits until the interface named name has an OpenFlow port
// number and returns it. It watches the Interface cache (no polling). When
// ovs-vswitchd reports ofport -1, the error carries the Interface's error
// column.
func (c *Client) WaitOfport(ctx context.Context, name string) (int64, error) {
	ic, err := c.Interfaces(ctx)
	if err != nil {
		return 0, wrap(err, "wait ofport "+name)
	}
	sub := ic.Subscribe()
	defer sub.Close()
	check := func(i Interface) (int64, bool, error) {
		switch {
		case i.Ofport > 0:
			return i.Ofport, true, nil
		case i.Ofport == -1:
			msg := i.Error
			if msg == "" {
				msg = "no error reported"
			}
			return 0, true, fmt.Errorf("ovsdb: wait ofport %s: interface %s (type %q) has ofport -1: %s", name, name, i.Type, msg)
		}
		return 0, false, nil
	}
	last := "no such interface"
	if i, ok := ic.Get(name); ok {
		if n, done, err := check(i); done {
			return n, err
		}
		last = "no ofport yet"
	}
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return 0, fmt.Errorf("ovsdb: wait ofport %s: subscription closed", name)
			}
			if ev.Name() != name {
				continue
			}
			if ev.New == nil {
				last = "interface deleted"
				continue
			}
			if n, done, err := check(*ev.New); done {
				return n, err
			}
			last = "no ofport yet"
		case <-ctx.Done():
			return 0, fmt.Errorf("ovsdb: wait ofport %s: %s: %w", name, last, ctx.Err())
		}
	}
}
