package dnsnames

import (
	"container/heap"
	"net/netip"
	"strings"
	"time"

	"nodeflow/lib/dnsmsg"
)

// Observe learns addresses that a DNS answer gave for name, for example
// one that a pod received and that the agent holds until the addresses
// are installed. The addresses go to the exact name if it is registered
// and to the wildcard one label above it ("*.example.com" for
// "www.example.com") if that is; each expires ttl (within MinTTL and
// MaxAddrTTL) from now unless seen again. Addresses in the excluded
// prefixes are dropped.
//
// Observe returns the registered names whose address sets changed, nil
// if none did: the caller applies them before releasing the answer. They
// are not posted to Changes. Observe takes the cache's lock only for
// map updates and never waits for the network.
func (c *Cache) Observe(name string, addrs []netip.Addr, ttl time.Duration) []string {
	c.m.observed.inc()
	if len(addrs) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := c.learnLocked(name, len(addrs), func(i int) (netip.Addr, time.Duration) { return addrs[i], ttl }, c.clk.Now(), nil, nil)
	if len(changed) > 0 {
		c.m.observedChanges.inc()
	}
	return changed
}

// ObserveReply observes every name of a reply (the question and each
// alias of its CNAME chain) with the reply's records, each with its own
// TTL. It returns the registered names whose address sets changed, each
// once.
func (c *Cache) ObserveReply(r *dnsmsg.Reply) []string {
	c.m.observed.inc()
	if r.RCode != dnsmsg.RcodeSuccess || len(r.Records) == 0 {
		return nil
	}
	get := func(i int) (netip.Addr, time.Duration) {
		return r.Records[i].Addr, time.Duration(r.Records[i].TTL) * time.Second
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	var changed []string
	for _, n := range r.Names {
		changed = c.learnLocked(n, len(r.Records), get, now, nil, changed)
	}
	if len(changed) > 0 {
		c.m.observedChanges.inc()
	}
	return changed
}

// Matches reports whether an answer for name would be learned: the
// exact name, or the wildcard one label above it, is registered.
func (c *Cache) Matches(name string) bool {
	n := canonical(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exact[n] != nil {
		return true
	}
	i := strings.IndexByte(n, '.')
	return i > 0 && c.wildcards[n[i+1:]] != nil
}

// learnLocked adds n addresses (from get) for name to the exact entry
// and the wildcard that match it, except skip. It appends the names that
// changed to changed, each once, and returns it.
func (c *Cache) learnLocked(name string, n int, get func(int) (netip.Addr, time.Duration), now time.Time, skip *entry, changed []string) []string {
	cn := canonical(name)
	var targets [2]*entry
	if e := c.exact[cn]; e != nil && e != skip {
		targets[0] = e
	}
	if i := strings.IndexByte(cn, '.'); i > 0 {
		if e := c.wildcards[cn[i+1:]]; e != nil && e != skip {
			targets[1] = e
		}
	}
	for _, e := range targets {
		if e == nil {
			continue
		}
		did := false
		for i := range n {
			a, ttl := get(i)
			if a, ok := c.keep(a); ok && c.putLocked(e, a, now.Add(c.addrTTL(ttl))) {
				did = true
			}
		}
		if did && !contains(changed, e.name) {
			changed = append(changed, e.name)
		}
	}
	return changed
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// keep returns the address as the firewall matches it (IPv4-mapped
// addresses as IPv4), and false if it is unspecified or excluded.
func (c *Cache) keep(a netip.Addr) (netip.Addr, bool) {
	a = a.Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		c.m.excluded.inc()
		return a, false
	}
	for _, p := range c.opts.Exclude {
		if p.Contains(a) {
			c.m.excluded.inc()
			return a, false
		}
	}
	return a, true
}

// addrTTL is how long an address lives after it was seen with ttl.
func (c *Cache) addrTTL(ttl time.Duration) time.Duration {
	return min(max(ttl, c.opts.MinTTL), c.opts.MaxAddrTTL)
}

// lookupTTL is how long after an answer with ttl a name is looked up
// again.
func (c *Cache) lookupTTL(ttl time.Duration) time.Duration {
	return min(max(ttl, c.opts.MinTTL), c.opts.MaxTTL)
}

// putLocked sets a's expiry in e to at least exp, and reports whether a
// is new to e. A full entry first drops the address that expires
// soonest.
func (c *Cache) putLocked(e *entry, a netip.Addr, exp time.Time) bool {
	if old, ok := e.addrs[a]; ok {
		if exp.After(old) {
			e.addrs[a] = exp
		}
		return false
	}
	if len(e.addrs) >= c.opts.MaxAddrs {
		var victim netip.Addr
		var at time.Time
		for v, t := range e.addrs {
			if !victim.IsValid() || t.Before(at) {
				victim, at = v, t
			}
		}
		delete(e.addrs, victim)
		c.m.evicted.inc()
	}
	e.addrs[a] = exp
	if e.wildcard && (e.expireAt.IsZero() || exp.Before(e.expireAt)) {
		e.expireAt = exp
		heap.Push(&c.timers, timer{at: exp, e: e})
		c.wake()
	}
	return true
}

// expireLocked removes a wildcard's expired addresses, plans its next
// expiry, and reports whether any went.
func (c *Cache) expireLocked(e *entry, now time.Time) bool {
	did := false
	var next time.Time
	for a, exp := range e.addrs {
		if !exp.After(now) {
			delete(e.addrs, a)
			did = true
		} else if next.IsZero() || exp.Before(next) {
			next = exp
		}
	}
	e.expireAt = next
	if !next.IsZero() {
		heap.Push(&c.timers, timer{at: next, e: e})
	}
	return did
}
