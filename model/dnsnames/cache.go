package dnsnames

import (
	"container/heap"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodeflow/lib/dnsmsg"
)

// ErrNoSuchName is the LastError of a name whose last lookup was
// answered NXDOMAIN. It is not a failure: the name's addresses expire as
// usual and the name is looked up again after the negative TTL.
var ErrNoSuchName = errors.New("no such name (NXDOMAIN)")

// Cache holds the addresses of the DNS names the egress firewall uses.
// Its methods are safe for concurrent use and never wait for the network.
type Cache struct {
	opts Options
	clk  Clock

	mu        sync.Mutex
	exact     map[string]*entry // canonical name -> entry
	wildcards map[string]*entry // the base of "*.base" -> entry
	timers    timerHeap
	ready     []*entry // exact names due for a lookup, in order
	inflight  int
	changed   map[string]struct{} // names whose addresses changed, not yet taken

	kick   chan struct{} // wakes Run: a timer or a ready name was added
	notify chan struct{} // one slot: changed is not empty

	m metrics
}

// entry is one registered name.
type entry struct {
	name     string // as registered: "a.example.com" or "*.example.com"
	wildcard bool
	refs     int
	removed  bool
	addrs    map[netip.Addr]time.Time // address -> expiry

	// Exact names: the lookup schedule.
	due         time.Time // next lookup; zero while queued or running
	queued      bool
	running     bool
	failures    int // in a row
	lastErr     error
	lastLookup  time.Time
	lastSuccess time.Time

	// Wildcards: when the next address expires.
	expireAt time.Time
}

// New returns a cache; start its lookups with Run. With no Servers in
// opts it reads the resolver configuration, and fails if that has no
// nameserver.
func New(opts Options) (*Cache, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Cache{
		opts:      o,
		clk:       o.Clock,
		exact:     map[string]*entry{},
		wildcards: map[string]*entry{},
		changed:   map[string]struct{}{},
		kick:      make(chan struct{}, 1),
		notify:    make(chan struct{}, 1),
		m:         newMetrics(),
	}, nil
}

// Servers returns the DNS servers the cache asks.
func (c *Cache) Servers() []string { return slices.Clone(c.opts.Servers) }

// canonical returns a name's compared form: lower case, no trailing dot.
func canonical(name string) string { return dnsmsg.Canonical(name) }

// parse splits a registered name into its kind and map key.
func parse(name string) (key string, wildcard bool, err error) {
	n := canonical(name)
	base, wildcard := strings.CutPrefix(n, "*.")
	switch {
	case base == "":
		return "", false, fmt.Errorf("dnsnames: name %q: empty", name)
	case strings.Contains(base, "*"):
		return "", false, fmt.Errorf("dnsnames: name %q: a wildcard is only \"*.\" at the start", name)
	case strings.HasPrefix(base, ".") || strings.HasSuffix(base, ".") || strings.Contains(base, ".."):
		return "", false, fmt.Errorf("dnsnames: name %q: empty label", name)
	}
	return base, wildcard, nil
}

// Add registers a name, or takes one more reference to it. An exact name
// ("www.example.com") is looked up at once and then as its TTL says. A
// wildcard ("*.example.com") matches the names exactly one label below
// its base and is never looked up: it collects the addresses that
// answers for such names bring (Observe, and the lookups of exact names).
// Names are compared in canonical form: lower case, without the
// trailing dot.
func (c *Cache) Add(name string) error {
	key, wildcard, err := parse(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.exact
	if wildcard {
		m = c.wildcards
	}
	if e := m[key]; e != nil {
		e.refs++
		return nil
	}
	e := &entry{name: canonical(name), wildcard: wildcard, refs: 1, addrs: map[netip.Addr]time.Time{}}
	m[key] = e
	if !wildcard {
		e.due = c.clk.Now()
		heap.Push(&c.timers, timer{at: e.due, e: e})
		c.wake()
	}
	return nil
}

// Release drops one reference to a name taken by Add. The last one
// removes the name and its addresses; no change is posted for it, since
// whoever released it no longer uses it. A lookup in flight for it is
// let finish and its answer dropped. Releasing a name that is not
// registered is logged and otherwise ignored.
func (c *Cache) Release(name string) {
	key, wildcard, err := parse(name)
	if err != nil {
		c.opts.Log.WithError(err).Warn("release of a bad name")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.exact
	if wildcard {
		m = c.wildcards
	}
	e := m[key]
	if e == nil {
		c.opts.Log.WithField("name", name).Warn("release of a name that is not registered")
		return
	}
	e.refs--
	if e.refs > 0 {
		return
	}
	e.removed = true
	delete(m, key)
	delete(c.changed, e.name)
}

// lookupEntry returns the entry of a registered name, nil if none.
func (c *Cache) lookupEntry(name string) *entry {
	key, wildcard, err := parse(name)
	if err != nil {
		return nil
	}
	if wildcard {
		return c.wildcards[key]
	}
	return c.exact[key]
}

// Addrs returns the addresses of a registered name, sorted; nil if it
// has none or is not registered.
func (c *Cache) Addrs(name string) []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.lookupEntry(name)
	if e == nil {
		return nil
	}
	return e.sortedAddrs()
}

func (e *entry) sortedAddrs() []netip.Addr {
	if len(e.addrs) == 0 {
		return nil
	}
	out := make([]netip.Addr, 0, len(e.addrs))
	for a := range e.addrs {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Names returns the registered names, sorted.
func (c *Cache) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.exact)+len(c.wildcards))
	for _, e := range c.exact {
		out = append(out, e.name)
	}
	for _, e := range c.wildcards {
		out = append(out, e.name)
	}
	slices.Sort(out)
	return out
}

// Status is what the cache knows of one name, for status messages and
// debugging.
type Status struct {
	Name     string
	Wildcard bool
	Refs     int
	// Addrs and their expiries, sorted by address.
	Addrs   []netip.Addr
	Expires []time.Time
	// The fields below are for exact names.
	// LastLookup is when the last lookup ended, zero before the first.
	LastLookup time.Time
	// LastSuccess is when a lookup last got an answer (NXDOMAIN
	// included) for both families.
	LastSuccess time.Time
	// Failures is the number of failed lookups in a row.
	Failures int
	// LastError is the last lookup's error: nil, ErrNoSuchName, or why
	// the servers gave no answer.
	LastError error
	// NextLookup is when the name is looked up next; zero while a lookup
	// is queued or running.
	NextLookup time.Time
}

// Status returns what the cache knows of a registered name.
func (c *Cache) Status(name string) (Status, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.lookupEntry(name)
	if e == nil {
		return Status{}, false
	}
	s := Status{
		Name: e.name, Wildcard: e.wildcard, Refs: e.refs, Addrs: e.sortedAddrs(),
		LastLookup: e.lastLookup, LastSuccess: e.lastSuccess, Failures: e.failures,
		LastError: e.lastErr, NextLookup: e.due,
	}
	for _, a := range s.Addrs {
		s.Expires = append(s.Expires, e.addrs[a])
	}
	return s, true
}

// Changes returns a channel that receives when names' addresses changed
// through lookups, alias answers or expiry, or when an exact name's
// lookup status changed (its first lookup ended; its lookups started or
// stopped failing; it became or stopped being NXDOMAIN); TakeChanged
// says which. One receive may stand for many changes. Changes made by
// Observe are returned to its caller instead.
func (c *Cache) Changes() <-chan struct{} { return c.notify }

// TakeChanged returns the names whose addresses changed since the last
// call, sorted, and forgets them.
func (c *Cache) TakeChanged() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.changed) == 0 {
		return nil
	}
	out := make([]string, 0, len(c.changed))
	for n := range c.changed {
		out = append(out, n)
	}
	clear(c.changed)
	slices.Sort(out)
	return out
}

// postLocked records that names changed and signals Changes.
func (c *Cache) postLocked(names ...string) {
	for _, n := range names {
		c.changed[n] = struct{}{}
	}
	if len(names) > 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// wake signals Run that timers or ready names changed.
func (c *Cache) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// timer is a scheduled lookup (exact) or expiry (wildcard). Timers are
// not removed when plans change; a timer whose time no longer matches
// its entry's is skipped when it comes due.
type timer struct {
	at time.Time
	e  *entry
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// ensure Cache is a prometheus.Collector.
var _ prometheus.Collector = (*Cache)(nil)

// counter is a monotonically increasing count.
type counter struct{ atomic.Uint64 }

func (c *counter) inc() { c.Add(1) }
