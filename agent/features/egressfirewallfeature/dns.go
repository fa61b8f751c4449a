package egressfirewallfeature

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/dnsmsg"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
)

// DNS learning: the replies to the pods of namespaces with dnsName rules
// reach the agent by packet-in (efflows.DNSFlows). A reply that answers a
// name no rule names, or that is no answer at all, is released at once.
// One that does is handed to the learner, which installs its addresses in
// every namespace whose rules name them, waits until the bridge holds
// them, and only then releases the reply, so that the pod's first
// connection to the address meets the rule. Replies held at the same time
// are installed and released together.

// HandlePacketIn implements feature.PacketInHandler: one DNS reply caught
// by the learning flows.
func (f *Firewall) HandlePacketIn(p feature.PacketIn) {
	start := time.Now()
	pin := p.Msg
	if p.Bridge != plan.Pod || pin == nil || len(pin.Userdata) == 0 || pin.Userdata[0] != byte(plan.PacketInDNS) {
		return
	}
	d, err := dnsmsg.DecodeFrame(pin.Data)
	if err != nil {
		f.learn.releaseNow(pin, ReplyPassed)
		return
	}
	// The flows send only trusted replies; the sources may have changed
	// since they were built (an endpoint gone, its address reused).
	if !f.trust.sources().Trusts(egressfirewallflows.DNSReplyOf(pin, d.Src.Addr())) {
		f.learn.releaseNow(pin, ReplyUntrusted)
		return
	}
	h, err := dnsmsg.ParseHeader(d.Payload)
	if err != nil || h.Class() != dnsmsg.Hold {
		f.learn.releaseNow(pin, ReplyPassed)
		return
	}
	rep, err := dnsmsg.ParseReply(d.Payload)
	if err != nil {
		f.learn.releaseNow(pin, ReplyPassed)
		return
	}
	match := false
	for _, n := range rep.Names {
		if f.names.Matches(n) {
			match = true
			break
		}
	}
	if !match {
		f.learn.releaseNow(pin, ReplyPassed)
		return
	}
	changed := f.names.ObserveReply(rep)
	f.learn.hold(heldReply{pin: pin, start: start, changed: changed})
}

// heldReply is one DNS reply the learner holds.
type heldReply struct {
	pin     *openflow.PacketIn
	start   time.Time
	changed []string // names whose addresses the reply changed
}

// learner holds DNS replies until their addresses are installed.
type learner struct {
	f     *Firewall
	queue chan heldReply
}

func newLearner(f *Firewall) *learner {
	return &learner{f: f, queue: make(chan heldReply, f.opts.MaxHeld)}
}

// hold queues r for the learner; a full queue drops it.
func (l *learner) hold(r heldReply) {
	select {
	case l.queue <- r:
		l.f.m.dnsHeld.Inc()
	default:
		l.f.m.dnsReplies.WithLabelValues(ReplyDroppedFull).Inc()
	}
}

// releaseNow releases a reply that is not held, counting it as result.
func (l *learner) releaseNow(pin *openflow.PacketIn, result string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.f.h.Send(ctx, plan.Pod, egressfirewallflows.Release(pin)); err != nil {
		l.f.m.dnsReplies.WithLabelValues(ReplySendError).Inc()
		l.f.log.WithError(err).Debug("cannot release a DNS reply")
		return
	}
	l.f.m.dnsReplies.WithLabelValues(result).Inc()
}

// maxBatch bounds the replies installed and released together.
const maxBatch = 256

// run installs and releases the held replies until ctx ends.
func (l *learner) run(ctx context.Context) {
	batch := make([]heldReply, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case r := <-l.queue:
			batch = append(batch, r)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case r := <-l.queue:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		l.f.m.dnsHeld.Sub(float64(len(batch)))
		l.process(ctx, batch)
	}
}

// process installs the batch's addresses and releases the replies behind
// them, within MaxHold: the packet-outs travel in the bundle that installs
// the addresses (FlushThen), so the switch runs them against the new
// flows with no round trip in between.
func (l *learner) process(ctx context.Context, batch []heldReply) {
	f := l.f
	var names []string
	for _, r := range batch {
		for _, n := range r.changed {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	f.syncNow(names) // the learned addresses are on br0 alone
	for len(batch) > 0 {
		msgs := make([]openflow.Message, len(batch))
		for i, r := range batch {
			msgs[i] = egressfirewallflows.Release(r.pin)
		}
		fctx, cancel := context.WithDeadline(ctx, batch[0].start.Add(f.opts.MaxHold))
		err := f.h.FlushThen(fctx, plan.Pod, msgs...)
		cancel()
		switch {
		case err == nil, errors.Is(err, reconcile.ErrSentWithPass):
			// Released (with the pass, when it outlived the deadline).
			l.released(batch)
			return
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			// Not installed in time, and not sent: drop what has waited
			// too long, and try again for the others.
			now := time.Now()
			kept := batch[:0]
			for _, r := range batch {
				if now.Sub(r.start) >= f.opts.MaxHold {
					f.m.dnsReplies.WithLabelValues(ReplyDroppedTimeout).Inc()
					continue
				}
				kept = append(kept, r)
			}
			batch = kept
		case ctx.Err() != nil:
			return
		default:
			// The bridge reported an error, which may be another owner's
			// (the namespace's own flows were set): the replies went out
			// after the pass, unless the connection is down.
			f.log.WithError(err).Debug("dns learning: flush reported an error")
			if errors.Is(err, ofconn.ErrDisconnected) || errors.Is(err, ofconn.ErrClosed) {
				f.m.dnsReplies.WithLabelValues(ReplySendError).Add(float64(len(batch)))
				return
			}
			l.released(batch)
			return
		}
	}
}

// released counts the batch's replies as learned and released.
func (l *learner) released(batch []heldReply) {
	now := time.Now()
	for _, r := range batch {
		l.f.m.dnsReplies.WithLabelValues(ReplyLearned).Inc()
		l.f.m.dnsHold.Observe(now.Sub(r.start).Seconds())
	}
}

// syncNow applies, in this goroutine, the names changed by observed
// answers and by lookups, and every namespace waiting for a sync: when it
// returns, every address the cache holds is set in the namespaces' owners.
func (f *Firewall) syncNow(observed []string) {
	if nss := f.namespacesUsing(observed); len(nss) > 0 {
		f.loop.Mark(nss...)
	}
	if f.loop.SyncNow(context.Background()) {
		f.loop.Mark() // the loop retries what failed
	}
}

// syncDNSFlowsLocked sets the DNS learning flows for every address of each
// local pod (not host-network) of the namespaces whose enforced rules name
// DNS names, from the trusted sources, and their meter. f.mu is held.
func (f *Firewall) syncDNSFlowsLocked() error {
	var addrs []netip.Addr
	for ns := range f.withDNS {
		objs, err := f.podInf.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				addrs = append(addrs, podAddrs(p)...)
			}
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	src := f.trust.sources()
	if slices.Equal(addrs, f.dnsPods) && f.dnsPods != nil && src.Equal(f.dnsSrc) {
		return nil
	}
	st := reconcile.State{}
	if len(addrs) > 0 {
		flows, err := egressfirewallflows.DNSFlows(addrs, src)
		if err != nil {
			return err
		}
		st = reconcile.State{Flows: flows, Meters: []openflow.MeterEntry{egressfirewallflows.DNSMeter()}}
	}
	if err := f.pod.Set(egressfirewallflows.DNSOwner, st); err != nil {
		return err
	}
	if addrs == nil {
		addrs = []netip.Addr{}
	}
	f.dnsPods, f.dnsSrc = addrs, src
	return nil
}
