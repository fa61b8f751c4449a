package dnsnames

import (
	"container/heap"
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"

	"nodeflow/lib/dnsmsg"
)

// Run looks names up when they are due and expires wildcard addresses,
// until ctx is done; then it waits for the lookups in flight, which ctx
// also cancels. Lookups run in their own goroutines, at most
// Options.Workers at once, without the cache's lock.
func (c *Cache) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c.mu.Lock()
		now := c.clk.Now()
		c.fireLocked(now)
		for c.inflight < c.opts.Workers && len(c.ready) > 0 {
			e := c.ready[0]
			c.ready[0] = nil
			c.ready = c.ready[1:]
			e.queued = false
			if e.removed {
				continue
			}
			e.running = true
			c.inflight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.lookup(ctx, e)
			}()
		}
		var timer <-chan time.Time
		if len(c.timers) > 0 {
			timer = c.clk.After(c.timers[0].at.Sub(now))
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-timer:
		case <-c.kick:
		}
	}
}

// fireLocked handles the timers due at now: exact names join the ready
// queue, wildcards drop their expired addresses.
func (c *Cache) fireLocked(now time.Time) {
	for len(c.timers) > 0 && !c.timers[0].at.After(now) {
		t := heap.Pop(&c.timers).(timer)
		e := t.e
		switch {
		case e.removed:
		case e.wildcard:
			if t.at.Equal(e.expireAt) && c.expireLocked(e, now) {
				c.postLocked(e.name)
			}
		case t.at.Equal(e.due) && !e.queued && !e.running:
			e.due = time.Time{}
			e.queued = true
			c.ready = append(c.ready, e)
		}
	}
}

// familyResult is the outcome of one query type.
type familyResult struct {
	qtype uint16
	reply *dnsmsg.Reply
	err   error
}

// lookup asks for e's A and AAAA records at once, then applies both.
func (c *Cache) lookup(ctx context.Context, e *entry) {
	start := c.clk.Now()
	var res [2]familyResult
	var wg sync.WaitGroup
	for i, qt := range [2]uint16{dns.TypeA, dns.TypeAAAA} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.query(ctx, e.name, qt)
			res[i] = familyResult{qtype: qt, reply: r, err: err}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	c.inflight--
	if ctx.Err() != nil {
		// Run is ending: the answers were cut short, not failures. The
		// name is due again at once if Run is started anew.
		e.running = false
		if !e.removed {
			e.due = c.clk.Now()
			heap.Push(&c.timers, timer{at: e.due, e: e})
		}
		c.mu.Unlock()
		return
	}
	c.applyLocked(e, res, start)
	c.mu.Unlock()
	c.wake()
}

// applyLocked applies a lookup's answers to e and plans its next lookup.
// A family that was answered sets its addresses' expiries from the
// answer and removes its addresses that have expired and were not in
// it; a family that failed keeps its addresses.
func (c *Cache) applyLocked(e *entry, res [2]familyResult, start time.Time) {
	now := c.clk.Now()
	e.running = false
	c.m.lookups.inc()
	c.m.duration.Observe(now.Sub(start).Seconds())
	if e.removed {
		return
	}
	var (
		changed []string
		errs    []error
		did     bool
		nx      = true
		refresh = c.opts.MaxTTL
	)
	for _, r := range res {
		if r.err != nil {
			errs = append(errs, r.err)
			nx = false
			continue
		}
		rep := r.reply
		ttl := c.opts.DefaultTTL
		if t, ok := rep.MinTTL(); ok {
			ttl = time.Duration(t) * time.Second
		} else if rep.HasNegativeTTL {
			ttl = time.Duration(rep.NegativeTTL) * time.Second
		}
		refresh = min(refresh, c.lookupTTL(ttl))
		nx = nx && rep.RCode == dnsmsg.RcodeNXDomain
		seen := make(map[netip.Addr]bool, len(rep.Records))
		for _, rec := range rep.Records {
			if a, ok := c.keep(rec.Addr); ok {
				seen[a] = true
				if c.putLocked(e, a, now.Add(c.addrTTL(time.Duration(rec.TTL)*time.Second))) {
					did = true
				}
			}
		}
		v4 := r.qtype == dns.TypeA
		for a, exp := range e.addrs {
			if a.Is4() == v4 && !exp.After(now) && !seen[a] {
				delete(e.addrs, a)
				did = true
			}
		}
		// The same records answer the wildcard above the name and every
		// alias of the chain, and the wildcards above those.
		get := func(i int) (netip.Addr, time.Duration) {
			return rep.Records[i].Addr, time.Duration(rep.Records[i].TTL) * time.Second
		}
		for _, n := range rep.Names {
			changed = c.learnLocked(n, len(rep.Records), get, now, e, changed)
		}
	}
	// A name whose lookups start or stop failing, or start or stop being
	// NXDOMAIN, is posted too, for its users to report it.
	first := e.lastLookup.IsZero()
	prevErr := e.lastErr
	defer func() {
		if !did && (first || (prevErr == nil) != (e.lastErr == nil) || errors.Is(prevErr, ErrNoSuchName) != errors.Is(e.lastErr, ErrNoSuchName)) {
			c.postLocked(e.name)
		}
	}()
	if did {
		changed = append(changed, e.name)
	}
	c.postLocked(changed...)

	e.lastLookup = now
	log := c.opts.Log.WithField("name", e.name)
	if len(errs) > 0 {
		e.failures++
		e.lastErr = errors.Join(errs...)
		c.m.failures.inc()
		wait := c.backoff(e.failures)
		e.due = now.Add(wait)
		l := log.WithError(e.lastErr).WithField("failures", e.failures).WithField("retry", wait)
		if e.failures == 1 {
			l.Warn("lookup failed; keeping the name's addresses")
		} else {
			l.Debug("lookup failed again")
		}
	} else {
		if e.failures > 0 {
			log.WithField("failures", e.failures).Info("lookup works again")
		}
		e.failures = 0
		e.lastSuccess = now
		e.lastErr = nil
		if nx {
			e.lastErr = ErrNoSuchName
		}
		e.due = now.Add(refresh)
	}
	heap.Push(&c.timers, timer{at: e.due, e: e})
}

// backoff is the wait after the n-th failure in a row.
func (c *Cache) backoff(n int) time.Duration {
	d := c.opts.MinBackoff
	for i := 1; i < n && d < c.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.opts.MaxBackoff)
}
