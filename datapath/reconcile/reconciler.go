package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
)

// Options configure a Reconciler.
type Options struct {
	// Bridge names the bridge in logs and errors.
	Bridge string
	// MaxBundle is the number of changes above which an incremental diff
	// is split into several bundles, between owners. The start-up
	// reconcile is never split. Default 10,000; negative means never.
	MaxBundle int
	// AuditInterval is how often the whole switch is compared with the
	// desired state, as the safety net behind the flow monitor. Default
	// 30 s; negative disables the periodic audit. A bridge so large that
	// an audit takes longer than 1/AuditDutyFactor of the interval is
	// audited less often: at AuditDutyFactor times the last full pass's
	// duration, so audits never take more than about 1% of a core.
	AuditInterval time.Duration
	// AuditPartFlows is about the most flows the periodic audit reads at
	// once. The switch serves one read at a time and nothing else meanwhile
	// (a read of 100,000 flows holds it for about 0.2-0.3 s), so a bridge
	// with more flows is audited in parts, each read and compared in a pass
	// of its own with the changes that arrive in between: no change waits
	// for more than one part. The parts split the flows by their cookie's
	// owner hash (a power of two of them, at most MaxAuditParts), and one
	// more reads the groups and meters whole. Default 5,000; negative reads
	// the switch whole. Start-up, reconnect and the audits that the flow
	// monitor asks for always read it whole.
	AuditPartFlows int
	// MinInterval is the least time between two incremental syncs, to
	// coalesce bursts further than the one-slot wake-up does. Default 0.
	MinInterval time.Duration
	// OnSync, when set, is called after every sync pass with its report.
	// It runs on the reconciler's goroutine: keep it short.
	OnSync func(SyncReport)
	// Logger receives the reconciler's logs. Default: logrus's standard
	// logger.
	Logger logrus.FieldLogger
	// Clock times the audits, the failed owners' back-off and
	// MinInterval. Default: the wall clock.
	Clock Clock
	// Agent names the program that owns the bridge (its version), written
	// into the version note so that a dump shows which build programmed
	// the bridge; empty leaves it out.
	Agent string
}

// Clock is the reconciler's time source (k8s.io/utils/clock's RealClock
// and testing.FakeClock are ones).
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once, d after now.
	After(d time.Duration) <-chan time.Time
}

// wallClock is the default Clock.
type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// SyncKind says why a sync pass ran.
type SyncKind string

// Sync kinds.
const (
	// SyncStartup is the first pass after the reconciler starts: it reads
	// the switch and replaces what differs in one bundle.
	SyncStartup SyncKind = "startup"
	// SyncReconnect is the same after the connection came back (after a
	// switch restart that means replaying everything).
	SyncReconnect SyncKind = "reconnect"
	// SyncAudit compares the whole switch as a safety net, or after the
	// flow monitor lost updates or groups were deleted.
	SyncAudit SyncKind = "audit"
	// SyncAuditPart is one part of a periodic audit read in parts (see
	// Options.AuditPartFlows); it also applies the changes queued.
	SyncAuditPart SyncKind = "audit-part"
	// SyncIncremental applies queued desired-state changes and repairs
	// reported by the flow monitor.
	SyncIncremental SyncKind = "incremental"
)

// SyncReport describes one sync pass.
type SyncReport struct {
	Kind  SyncKind
	Start time.Time
	// Duration covers reading the switch (full passes), the diff, and
	// every bundle up to its commit reply.
	Duration time.Duration
	Stats    DiffStats
	Bundles  int
	// Unwanted counts flows and groups on the switch that nobody wanted
	// (full passes only).
	Unwanted int
	// Blocked are owners held back, with the reason.
	Blocked map[string]error
	// Err is the first error, if the pass did not fully succeed.
	Err error
	// Part and Parts say which part of its audit a SyncAuditPart pass
	// read, from 1, and of how many; the last part reads the groups and
	// meters. Zero for other passes.
	Part, Parts int

	version uint64 // the diff's Version (0: no diff was taken)
}

// Reconciler keeps one bridge equal to a Store. Create it with New, wire
// it into the bridge's connection with ConnOptions, then call Run.
type Reconciler struct {
	store *Store
	opts  Options
	log   logrus.FieldLogger

	conn atomic.Pointer[ofconn.Conn]
	gen  atomic.Uint32 // plan.Generation; 0 until the first full sync

	monitorDropped atomic.Uint64 // flow monitor messages the connection dropped
	undecodable    uint64        // dumped flows that did not decode, as last logged (the sync loop's)
	groupsByID     atomic.Bool   // read groups one by one (see dump)

	wake    chan struct{} // repairs queued by the flow monitor
	full    chan SyncKind // a full pass is needed
	flushes chan *flushRequest
	// done is the store version the last pass without an error saw (the
	// sync loop's).
	done uint64
	// audit is the periodic audit in progress when it is read in parts
	// (the sync loop's).
	audit *auditParts

	mu          sync.Mutex
	pendingFull SyncKind
	synced      chan struct{} // closed after the first successful full pass
	syncedOnce  sync.Once
	started     bool
}

// New returns a Reconciler for store.
func New(store *Store, opts Options) *Reconciler {
	if opts.MaxBundle == 0 {
		opts.MaxBundle = 10000
	}
	if opts.MaxBundle < 0 {
		opts.MaxBundle = 0
	}
	if opts.AuditInterval == 0 {
		opts.AuditInterval = 30 * time.Second
	}
	if opts.AuditPartFlows == 0 {
		opts.AuditPartFlows = DefaultAuditPartFlows
	}
	if opts.Logger == nil {
		opts.Logger = logrus.StandardLogger()
	}
	return &Reconciler{
		store:   store,
		opts:    opts,
		log:     opts.Logger.WithField("bridge", opts.Bridge),
		wake:    make(chan struct{}, 1),
		full:    make(chan SyncKind, 1),
		flushes: make(chan *flushRequest, 8),
		synced:  make(chan struct{}),
	}
}

// Store returns the reconciler's store.
func (r *Reconciler) Store() *Store { return r.store }

// Generation returns the generation this reconciler writes, 0 before its
// first full sync.
func (r *Reconciler) Generation() plan.Generation { return plan.Generation(r.gen.Load()) }

// Synced returns a channel closed once the first full sync has succeeded.
func (r *Reconciler) Synced() <-chan struct{} { return r.synced }

// ConnOptions returns base with the reconciler's connect callback and flow
// monitor handler added (chained after base's own). Dial the bridge's
// management socket with it; the flow monitor must run on the connection
// the reconciler writes with, so that its own changes are recognised.
//
// Unless base says otherwise, reconnection is quick (from 50 ms, at most
// 500 ms apart): the socket is local, and the time to redial is most of the
// time it takes to restore the flows after ovs-vswitchd restarts.
func (r *Reconciler) ConnOptions(base ofconn.Options) ofconn.Options {
	if base.ReconnectMin == 0 {
		base.ReconnectMin = 50 * time.Millisecond
	}
	if base.ReconnectMax == 0 {
		base.ReconnectMax = 500 * time.Millisecond
	}
	prevConnect := base.OnConnect
	base.OnConnect = func(ctx context.Context, c *ofconn.Conn, ev ofconn.ConnectEvent) {
		if prevConnect != nil {
			prevConnect(ctx, c, ev)
		}
		r.onConnect(ctx, c, ev)
	}
	prevMon := base.Handlers.FlowMonitor
	base.Handlers.FlowMonitor = func(m ofconn.AsyncMessage) {
		if prevMon != nil {
			prevMon(m)
		}
		r.handleFlowMonitor(m)
	}
	return base
}

// monitorID is the flow monitor id the reconciler uses on its connection.
const monitorID = 0x6e66

func (r *Reconciler) onConnect(ctx context.Context, c *ofconn.Conn, ev ofconn.ConnectEvent) {
	r.conn.Store(c)
	log := r.log.WithFields(logrus.Fields{"session": ev.Session, "version": ev.Version.String()})
	if ev.Restarted {
		log = log.WithField("restart", ev.Reason)
	}
	// Start the monitor before reading the switch, so that nothing changed
	// between the dump and the monitor goes unseen.
	if ev.Version >= openflow.Version14 {
		req := openflow.NewFlowMonitorRequest(monitorID, openflow.MonitorAdded|openflow.MonitorRemoved|openflow.MonitorModified|openflow.MonitorInstructions)
		if _, err := c.Multipart(ctx, req); err != nil {
			log.WithError(err).Warn("flow monitor not started; drift is repaired by the periodic audit only")
		}
	} else {
		log.Warn("OpenFlow 1.3 has no flow monitor; drift is repaired by the periodic audit only")
	}
	r.mu.Lock()
	kind := SyncReconnect
	if !r.started {
		kind = SyncStartup
		r.started = true
	}
	r.mu.Unlock()
	log.WithField("sync", kind).Info("connected; reconciling")
	r.requestFull(kind)
}

// requestFull asks the loop for a full pass; a startup request is never
// downgraded.
func (r *Reconciler) requestFull(kind SyncKind) {
	r.mu.Lock()
	if r.pendingFull == "" || kind == SyncStartup || (kind == SyncReconnect && r.pendingFull == SyncAudit) {
		r.pendingFull = kind
	}
	r.mu.Unlock()
	select {
	case r.full <- kind:
	default:
	}
}

func (r *Reconciler) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// handleFlowMonitor turns flow monitor updates about other connections'
// changes into repairs. Updates the connection had to drop (its handler
// queue was full) make it read the whole switch instead.
func (r *Reconciler) handleFlowMonitor(m ofconn.AsyncMessage) {
	if c := r.conn.Load(); c != nil {
		if d := c.Stats().Async[ofconn.KindFlowMonitor].Dropped; d > r.monitorDropped.Load() {
			r.monitorDropped.Store(d)
			r.log.WithField("dropped", d).Warn("flow monitor updates were dropped; auditing")
			r.requestFull(SyncAudit)
		}
	}
	reply, ok := m.Message.(*openflow.MultipartReply)
	if !ok {
		return
	}
	updates, err := reply.FlowUpdates()
	if err != nil {
		r.log.WithError(err).Warn("undecodable flow monitor update; auditing")
		r.requestFull(SyncAudit)
		return
	}
	res := r.store.observeUpdates(updates)
	if res.audit {
		r.requestFull(SyncAudit)
	}
	if res.repair {
		r.poke()
	}
}

// Flush runs a sync pass that starts after the call and waits for it:
// every change queued before the call is then on the switch, or held back
// (see Store.Errors). It returns the pass's error.
//
// It always runs a pass of its own, even when an earlier one already saw
// the changes: a caller that then sends packets through the new flows
// (the unidler's re-injection) also gets the switch a round trip to
// revalidate its datapath flows, which it does apart from the commit.
func (r *Reconciler) Flush(ctx context.Context) error {
	return r.FlushThen(ctx)
}

// FlushThen is Flush, and then sends msgs (packet-outs, typically) on the
// bridge's connection right after those changes: added to the end of the
// pass's last bundle, so that the switch runs them against the flows the
// bundle commits and only if it commits, or sent as soon as the pass is
// done when it had no bundle (or its last one failed). When the last batch
// is a single message, they follow it with one barrier and no bundle, and
// run whether the switch took it or refused it, as after a failed bundle.
// They are sent whatever the error returned, unless the connection is down. With msgs,
// a pass that began after the changes serves the call, and none of its
// own is run.
func (r *Reconciler) FlushThen(ctx context.Context, msgs ...openflow.Message) error {
	req := &flushRequest{version: r.store.changeVersion(), after: msgs, done: make(chan error, 1)}
	select {
	case r.flushes <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		if req.state.CompareAndSwap(flushPending, flushCancelled) {
			return ctx.Err()
		}
		return fmt.Errorf("reconcile: %s: %w: %w", r.opts.Bridge, ErrSentWithPass, ctx.Err())
	}
}

// ErrSentWithPass is wrapped in FlushThen's error when its context ended
// after the sync loop took the call: its messages go out with that pass
// (or have gone). When the error does not wrap it, they were not sent.
var ErrSentWithPass = errors.New("the messages were already handed to a pass")

// flushRequest is one Flush call: the store version it waits for, the
// messages to send after it, and where to answer.
type flushRequest struct {
	version uint64
	after   []openflow.Message
	done    chan error
	state   atomic.Int32 // flushPending, then flushTaken or flushCancelled
}

// The states of a flushRequest.
const (
	flushPending = iota
	flushTaken
	flushCancelled
)

// takeFlushes returns first and every other flush request already queued,
// but those whose caller gave up.
func (r *Reconciler) takeFlushes(first *flushRequest) []*flushRequest {
	var reqs []*flushRequest
	take := func(f *flushRequest) {
		if f.state.CompareAndSwap(flushPending, flushTaken) {
			reqs = append(reqs, f)
		}
	}
	take(first)
	for {
		select {
		case f := <-r.flushes:
			take(f)
		default:
			return reqs
		}
	}
}

// served reports whether the last successful pass saw every change reqs
// wait for, with no full pass pending: they need no pass of their own.
// A plain Flush (no messages) always has one (see Flush).
func (r *Reconciler) served(reqs []*flushRequest) bool {
	for _, f := range reqs {
		if len(f.after) == 0 {
			return false
		}
	}
	r.mu.Lock()
	full := r.pendingFull != ""
	r.mu.Unlock()
	if full {
		return false
	}
	for _, f := range reqs {
		if f.version > r.done {
			return false
		}
	}
	return true
}

// sendAfter sends the messages of reqs that no bundle carried.
func (r *Reconciler) sendAfter(ctx context.Context, msgs []openflow.Message) {
	if len(msgs) == 0 {
		return
	}
	c := r.conn.Load()
	if c == nil {
		return
	}
	if err := c.Send(ctx, msgs...); err != nil {
		r.log.WithError(err).Debug("cannot send the messages queued after a flush")
	}
}

// Run reconciles until ctx ends. The connection must have been dialled
// with ConnOptions; until its first OnConnect, passes fail with "not
// connected" and changes stay queued.
func (r *Reconciler) Run(ctx context.Context) error {
	clk := r.clock()
	// The loop's deadlines: the next audit, and the earliest retry of a
	// backed-off owner (zero: none).
	var auditAt, retryAt time.Time
	if r.opts.AuditInterval > 0 {
		auditAt = clk.Now().Add(r.opts.AuditInterval)
	}
	var last time.Time
	for {
		var timer <-chan time.Time
		if next := earliest(auditAt, retryAt); !next.IsZero() {
			timer = clk.After(next.Sub(clk.Now()))
		}
		var flush *flushRequest
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.full:
		case <-r.store.Changed():
		case <-r.wake:
		case now := <-timer:
			if !auditAt.IsZero() && !now.Before(auditAt) {
				if !r.beginAudit() {
					r.requestFull(SyncAudit)
				}
				// Armed again when this audit ends.
				auditAt = time.Time{}
			}
			if !retryAt.IsZero() && !now.Before(retryAt) {
				retryAt = time.Time{}
			}
		case flush = <-r.flushes:
		}
		if flush == nil {
			// Someone waiting goes first (a flush reads no audit part).
			select {
			case flush = <-r.flushes:
			default:
			}
		}
		var flushes []*flushRequest
		var after []openflow.Message
		if flush != nil {
			if flushes = r.takeFlushes(flush); len(flushes) == 0 {
				continue
			}
			for _, f := range flushes {
				after = append(after, f.after...)
			}
			if r.served(flushes) {
				// The last pass saw their changes: no pass of their own.
				r.sendAfter(ctx, after)
				for _, f := range flushes {
					f.done <- nil
				}
				continue
			}
		}
		if wait := r.opts.MinInterval - clk.Now().Sub(last); wait > 0 && flush == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-clk.After(wait):
			}
		}
		last = clk.Now()
		audited, took, err := r.pass(ctx, after, flush != nil)
		switch {
		case r.opts.AuditInterval <= 0:
		case audited:
			// Any full pass audits: the next audit is counted from it.
			auditAt = clk.Now().Add(auditDelay(r.opts.AuditInterval, took))
		case r.audit != nil:
			// The next part, after the changes queued meanwhile.
			r.poke()
		case auditAt.IsZero():
			// An audit that did not end (an error): the next one as usual.
			auditAt = clk.Now().Add(r.opts.AuditInterval)
		}
		// Changes queued during the pass have signalled Changed again, so
		// the next iteration picks them up.
		for _, f := range flushes {
			f.done <- err
		}
		retryAt = r.store.nextRetry()
	}
}

// clock returns the reconciler's Clock.
func (r *Reconciler) clock() Clock {
	if r.opts.Clock != nil {
		return r.opts.Clock
	}
	return wallClock{}
}

// earliest returns the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// AuditDutyFactor bounds the share of time the periodic audit takes: the
// next audit comes at least this many times the last full pass's duration
// later.
const AuditDutyFactor = 100

// auditDelay is the wait before the next audit after a full pass that took
// took.
func auditDelay(interval, took time.Duration) time.Duration {
	return max(interval, AuditDutyFactor*took)
}

// pass runs one sync: a full one when requested, else the next part of
// an audit in parts when one is due, else an incremental one. It reports
// whether it ended an audit (a full pass, or an audit's last part), and
// how long that audit took.
//
// after are sent after its changes (see FlushThen); flushing says that
// someone waits for the pass (Flush), which therefore reads no part.
func (r *Reconciler) pass(ctx context.Context, after []openflow.Message, flushing bool) (audited bool, took time.Duration, err error) {
	c := r.conn.Load()
	if c == nil || !c.Connected() {
		// The connection's return reads the switch whole.
		r.audit = nil
		return false, 0, fmt.Errorf("reconcile: %s: not connected: %w", r.opts.Bridge, ofconn.ErrDisconnected)
	}
	r.mu.Lock()
	kind := r.pendingFull
	r.pendingFull = ""
	r.mu.Unlock()
	switch {
	case kind != "":
		// A whole read supersedes the parts.
		r.audit = nil
	case r.audit != nil && r.audit.due(flushing, r.store.Pending()):
		kind = SyncAuditPart
	default:
		kind = SyncIncremental
	}
	// Drain a full request that the assignment above consumed.
	select {
	case <-r.full:
	default:
	}
	rep := SyncReport{Kind: kind, Start: r.clock().Now()}
	if a := r.audit; kind == SyncAuditPart {
		rep.Part, rep.Parts = a.next+1, a.flowParts+1
	}
	err = r.sync(ctx, c, &rep, &after)
	// What no bundle carried goes now, whatever the pass's outcome.
	r.sendAfter(ctx, after)
	rep.Duration = r.clock().Now().Sub(rep.Start)
	rep.Err = err
	if err == nil && rep.version != 0 {
		// A pass with an error may have put changes back in the queue.
		r.done = rep.version
	}
	if err != nil && kind != SyncIncremental && kind != SyncAuditPart {
		// Try the full pass again on the next wake-up.
		r.requestFull(kind)
	}
	audited = kind != SyncIncremental && kind != SyncAuditPart
	took = rep.Duration
	if a := r.audit; kind == SyncAuditPart {
		a.took += rep.Duration
		switch {
		case a.readFailed:
			// The next audit reads everything again. (A change the
			// switch refused in this pass does not end the audit: the
			// part was read and compared.)
			r.audit = nil
		case a.next == a.flowParts:
			r.audit = nil
			audited, took = true, a.took
		default:
			a.next++
		}
	}
	log := r.log.WithFields(logrus.Fields{"sync": kind, "changes": rep.Stats.String(), "bundles": rep.Bundles, "took": rep.Duration.Round(time.Microsecond)})
	if rep.Parts > 0 {
		log = log.WithField("part", strconv.Itoa(rep.Part)+"/"+strconv.Itoa(rep.Parts))
	}
	switch {
	case err != nil:
		log.WithError(err).Warn("sync failed")
	case kind == SyncStartup || kind == SyncReconnect:
		// Once a connection: what a restart or an upgrade changed on the
		// switch, for whoever checks that it changed nothing else.
		log.WithField("unwanted", rep.Unwanted).Info("synced after connecting")
	case kind != SyncIncremental || rep.Stats.Total() > 0:
		if rep.Unwanted > 0 {
			log = log.WithField("unwanted", rep.Unwanted)
		}
		log.Debug("synced")
	}
	for owner, berr := range rep.Blocked {
		r.log.WithFields(logrus.Fields{"owner": owner}).WithError(berr).Warn("owner held back")
	}
	if r.opts.OnSync != nil {
		r.opts.OnSync(rep)
	}
	if err == nil && kind != SyncIncremental && kind != SyncAuditPart {
		r.syncedOnce.Do(func() { close(r.synced) })
	}
	return audited, took, err
}

func (r *Reconciler) sync(ctx context.Context, c *ofconn.Conn, rep *SyncReport, after *[]openflow.Message) error {
	maxBundle := r.opts.MaxBundle
	if rep.Kind == SyncAuditPart {
		unwanted, err := r.auditPart(ctx, c, r.audit)
		if err != nil {
			r.audit.readFailed = true
			return fmt.Errorf("reconcile: %s: read the switch (audit part %d of %d): %w", r.opts.Bridge, rep.Part, rep.Parts, err)
		}
		rep.Unwanted = unwanted
		r.noteUndecodable()
	} else if rep.Kind != SyncIncremental {
		obs, err := r.dump(ctx, c)
		if err != nil {
			return fmt.Errorf("reconcile: %s: read the switch: %w", r.opts.Bridge, err)
		}
		if rep.Kind == SyncStartup || r.gen.Load() == 0 {
			vf := versionFlow(obs)
			var prevGen plan.Generation
			if vf != nil {
				prevGen = plan.Cookie(vf.Cookie).Generation()
			}
			gen := prevGen.Next()
			r.gen.Store(uint32(gen))
			if prev, ok := noteOf(vf); ok && prev.Pipeline != plan.PipelineVersion {
				r.log.WithFields(logrus.Fields{"from": prev.Pipeline, "to": plan.PipelineVersion, "fromAgent": prev.Agent}).
					Info("pipeline upgrade: the bridge's flows are replaced in one bundle")
			}
			if err := r.store.Set(VersionOwner, VersionState(gen, r.opts.Agent)); err != nil {
				return err
			}
		}
		rep.Unwanted = r.store.observe(obs, rep.Kind != SyncAudit)
		r.noteUndecodable()
		maxBundle = 0 // one atomic bundle
	}
	d := r.store.diff(DiffOptions{MaxBundle: maxBundle, Now: r.clock().Now()})
	rep.Stats = d.Stats
	rep.Blocked = d.Blocked
	rep.Bundles = len(d.Batches)
	rep.version = d.Version
	return r.apply(ctx, c, d, after)
}

// apply sends a diff: meters first, bundles in order, then meter deletes.
// It reports every change to the store as applied or not. *after go at the
// end of the last bundle: apply clears it when that bundle committed them
// (or when one of them was refused), and leaves it for the caller to send
// otherwise.
func (r *Reconciler) apply(ctx context.Context, c *ofconn.Conn, d *Diff, after *[]openflow.Message) error {
	p := &applyPass{r: r, ctx: ctx, c: c, d: d, after: after, v: c.Version(), gen: r.Generation(), now: r.clock().Now()}
	if err := p.metersBefore(); err != nil {
		return err
	}
	for i, b := range d.Batches {
		if err := p.batch(i, b); err != nil {
			return err
		}
	}
	p.metersAfter()
	return p.firstErr
}

// applyPass is one apply: what it sends, over which connection, and the
// first error that did not stop it (a refused change: the pass goes on
// with the others).
type applyPass struct {
	r     *Reconciler
	ctx   context.Context
	c     *ofconn.Conn
	d     *Diff
	after *[]openflow.Message
	v     openflow.Version
	gen   plan.Generation
	now   time.Time

	firstErr error
}

// keep records err as the pass's error, unless it has one already.
func (p *applyPass) keep(err error) {
	if p.firstErr == nil {
		p.firstErr = err
	}
}

// lost reports whether err means that the connection is gone (or the
// pass cancelled): then nothing more can be sent.
func (p *applyPass) lost(err error) bool {
	return errors.Is(err, ofconn.ErrDisconnected) || errors.Is(err, ofconn.ErrClosed) || p.ctx.Err() != nil
}

// metersBefore adds and modifies the diff's meters, all at once and then
// those the switch refused one by one. Its error is a lost connection's:
// then every change of the diff goes back in the queues.
func (p *applyPass) metersBefore() error {
	r, store, chs := p.r, p.r.store, p.d.MetersBefore
	sent, err := r.applyMeters(p.ctx, p.c, chs)
	if err != nil {
		for _, ch := range chs {
			store.abortMeter(ch, nil, p.now)
		}
		r.abortRest(p.d, 0, p.now)
		return err
	}
	for i, ch := range chs {
		if sent[i] {
			store.commitMeter(ch)
			continue
		}
		if err := r.applyMeter(p.ctx, p.c, ch); err != nil {
			if p.lost(err) {
				for _, rest := range chs[i:] {
					store.abortMeter(rest, nil, p.now)
				}
				r.abortRest(p.d, 0, p.now)
				return err
			}
			store.abortMeter(ch, err, p.now)
			p.keep(err)
			continue
		}
		store.commitMeter(ch)
	}
	return nil
}

// batch sends batch i, b, with *after at the end of the last batch. Its
// error is a lost connection's: then b and the rest of the diff go back in
// the queues.
func (p *applyPass) batch(i int, b *Batch) error {
	msgs, origin, err := batchMessages(b, p.v, p.gen)
	if err != nil {
		p.r.store.abortBatch(b, err, p.now)
		p.keep(err)
		return nil
	}
	own := len(msgs)
	carries := len(*p.after) > 0 && i == len(p.d.Batches)-1
	if carries {
		msgs = append(msgs, *p.after...)
	}
	if err := p.send(msgs, own, carries); err != nil {
		return p.batchFailed(i, b, err, own, carries, origin)
	}
	p.r.store.commitBatch(b)
	if carries {
		*p.after = nil
	}
	return nil
}

// send sends a batch's messages, the first own of which are its changes,
// in a bundle; carries says whether *after follows them.
func (p *applyPass) send(msgs []openflow.Message, own int, carries bool) error {
	if own != 1 || !carries {
		return p.c.Bundle(p.ctx, msgs)
	}
	// One change needs no bundle (see ofconn.Conn.Bundle): it and the
	// messages after it go in order with one barrier, a round trip
	// instead of two. They run after the change as they would after the
	// bundle, and after a refused change as they would after a failed
	// bundle.
	err := p.c.Apply(p.ctx, msgs...)
	*p.after = nil // sent, or lost with the connection
	if err != nil && !changeRefused(err, own) {
		// The switch refused only messages after the change (a lost
		// connection is no *BatchError): it is applied.
		p.keep(fmt.Errorf("reconcile: %s: a message sent after the changes: %w", p.r.opts.Bridge, err))
		return nil
	}
	return err
}

// batchFailed puts batch i, b, back in the queues after sending it failed
// with err, and holds back the owner of the failing message (every owner
// of the batch when it is not known) so that the next pass sends the
// others. The error it returns is a lost connection's: then the rest of
// the diff goes back in the queues too.
func (p *applyPass) batchFailed(i int, b *Batch, err error, own int, carries bool, origin func(int) string) error {
	r, store := p.r, p.r.store
	if p.lost(err) {
		r.abortRest(p.d, i, p.now)
		return fmt.Errorf("reconcile: %s: %w", r.opts.Bridge, err)
	}
	var me *ofconn.MessageError
	if carries && errors.As(err, &me) && me.Index >= own {
		// A message sent after the changes failed, not a change: drop
		// them and let the next pass send the changes alone.
		*p.after = nil
		store.abortBatch(b, nil, p.now)
		p.keep(fmt.Errorf("reconcile: %s: a message sent after the changes: %w", r.opts.Bridge, err))
		r.poke()
		return nil
	}
	bad := ""
	what := ""
	if errors.As(err, &me) {
		bad = ownerOfMessage(b, p.v, me.Index)
		what = origin(me.Index)
	}
	store.abortBatch(b, nil, p.now)
	ferr := fmt.Errorf("reconcile: %s: %s: %w", r.opts.Bridge, what, err)
	store.mu.Lock()
	if bad != "" && bad != foreignOwner {
		store.failOwner(bad, ferr, p.now)
	} else {
		for _, o := range b.owners {
			store.failOwner(o, ferr, p.now)
		}
	}
	store.mu.Unlock()
	p.keep(ferr)
	r.poke()
	return nil
}

// metersAfter deletes the diff's meters that nobody wants any more.
func (p *applyPass) metersAfter() {
	for _, ch := range p.d.MetersAfter {
		if err := p.c.Apply(p.ctx, meterMessage(ch, openflow.MeterDelete)); err != nil {
			p.r.store.abortMeter(ch, err, p.now)
			p.keep(err)
			continue
		}
		p.r.store.commitMeter(ch)
	}
}

// changeRefused reports whether err names one of the first own messages
// of a batch (its changes, not the messages sent after them), or is no
// *ofconn.BatchError at all (a lost connection, a cancelled context).
func changeRefused(err error, own int) bool {
	var be *ofconn.BatchError
	if !errors.As(err, &be) {
		return true
	}
	for _, me := range be.Errors {
		if me.Index < own {
			return true
		}
	}
	return false
}

func (r *Reconciler) abortRest(d *Diff, from int, now time.Time) {
	for _, b := range d.Batches[from:] {
		r.store.abortBatch(b, nil, now)
	}
	for _, ch := range d.MetersAfter {
		r.store.abortMeter(ch, nil, now)
	}
}

// applyMeters sends meter changes (adds and modifies) all at once, one
// round trip for a node's pods' meters instead of one each, and reports
// which the switch took. Those it refused (a meter it has, or has lost,
// behind the store's back) are left to applyMeter, one by one. The error
// is the connection's: then nothing is known to be applied.
func (r *Reconciler) applyMeters(ctx context.Context, c *ofconn.Conn, chs []meterChange) ([]bool, error) {
	sent := make([]bool, len(chs))
	if len(chs) < 2 {
		return sent, nil
	}
	msgs := make([]openflow.Message, len(chs))
	for i, ch := range chs {
		cmd := openflow.MeterAdd
		if ch.kind == Modify {
			cmd = openflow.MeterModify
		}
		msgs[i] = meterMessage(ch, cmd)
	}
	err := c.Apply(ctx, msgs...)
	var be *ofconn.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be):
	case errors.Is(err, ofconn.ErrDisconnected) || errors.Is(err, ofconn.ErrClosed) || ctx.Err() != nil:
		return nil, err
	default:
		return sent, nil // each again, alone
	}
	for i := range sent {
		sent[i] = true
	}
	if be != nil {
		for _, me := range be.Errors {
			if me.Index >= 0 && me.Index < len(sent) {
				sent[me.Index] = false
			}
		}
	}
	return sent, nil
}

// applyMeter adds or modifies a meter, whichever the switch needs: meter
// mods cannot go in bundles, and the switch may have (or have lost) the
// meter behind the store's back.
func (r *Reconciler) applyMeter(ctx context.Context, c *ofconn.Conn, ch meterChange) error {
	first, second := openflow.MeterAdd, openflow.MeterModify
	if ch.kind == Modify {
		first, second = second, first
	}
	err := c.Apply(ctx, meterMessage(ch, first))
	if err == nil {
		return nil
	}
	var oe *openflow.OFError
	if errors.As(err, &oe) && (oe.Name() == "OFPMMFC_METER_EXISTS" || oe.Name() == "OFPMMFC_UNKNOWN_METER") {
		err = c.Apply(ctx, meterMessage(ch, second))
	}
	if err != nil {
		return fmt.Errorf("reconcile: %s: meter %d: %w", r.opts.Bridge, ch.id, err)
	}
	return nil
}

// DumpOptions choose how Dump reads groups.
type DumpOptions struct {
	// GroupIDs, when not nil, makes Dump read only these groups, one
	// request each, instead of every group at once: a group too big to
	// describe in one message breaks the connection when read (see
	// groupReadLimit).
	GroupIDs []uint32
}

// errDumpGroups marks a failure while reading groups.
var errDumpGroups = errors.New("dump groups")

// noteUndecodable logs the flows read from the switch that did not decode
// since it last did.
func (r *Reconciler) noteUndecodable() {
	if n := r.store.undecodableFlows(); n > r.undecodable {
		// Left out as if absent: a desired one is sent again.
		r.log.WithField("flows", n-r.undecodable).Warn("flows read from the switch did not decode; treated as absent")
		r.undecodable = n
	}
}

// Dump reads the flows, groups and meters of the switch on c.
func Dump(ctx context.Context, c *ofconn.Conn, opts DumpOptions) (*Observed, error) {
	obs, err := dumpFlows(ctx, c, openflow.NewFlowStatsRequest())
	if err != nil {
		return nil, err
	}
	if err := dumpGroupsAndMeters(ctx, c, opts, obs); err != nil {
		return nil, err
	}
	return obs, nil
}

// dumpFlows reads the flows that req asks for.
func dumpFlows(ctx context.Context, c *ofconn.Conn, req *openflow.FlowStatsRequest) (*Observed, error) {
	obs := &Observed{}
	parts, err := c.MultipartRaw(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("dump flows: %w", err)
	}
	if err := obs.readFlowParts(parts); err != nil {
		return nil, fmt.Errorf("dump flows: %w", err)
	}
	return obs, nil
}

// dumpGroupsAndMeters reads the groups and meters of the switch into obs.
func dumpGroupsAndMeters(ctx context.Context, c *ofconn.Conn, opts DumpOptions, obs *Observed) error {
	var err error
	if opts.GroupIDs == nil {
		gparts, err := c.MultipartRaw(ctx, &openflow.GroupDescRequest{GroupID: openflow.GroupAll})
		if err != nil {
			return fmt.Errorf("%w: %w", errDumpGroups, err)
		}
		if err := obs.readGroupParts(gparts); err != nil {
			return fmt.Errorf("%w: %w", errDumpGroups, err)
		}
	} else {
		obs.GroupIDs = opts.GroupIDs
		if obs.Groups, err = dumpGroupsByID(ctx, c, opts.GroupIDs); err != nil {
			return fmt.Errorf("%w: %w", errDumpGroups, err)
		}
	}
	mr, err := c.MultipartReply(ctx, &openflow.MeterConfigRequest{MeterID: openflow.MeterAll})
	if err != nil {
		return fmt.Errorf("dump meters: %w", err)
	}
	if obs.Meters, err = mr.MeterConfig(); err != nil {
		return fmt.Errorf("dump meters: %w", err)
	}
	return nil
}

// dumpGroupsByID reads the given groups, several requests in flight at a
// time. Absent groups are simply not in the result.
func dumpGroupsByID(ctx context.Context, c *ofconn.Conn, ids []uint32) ([]openflow.GroupEntry, error) {
	const inFlight = 32
	results := make([][]openflow.GroupEntry, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			gr, err := c.MultipartReply(ctx, &openflow.GroupDescRequest{GroupID: id})
			if err == nil {
				results[i], err = gr.GroupDesc()
			}
			if err != nil {
				errs[i] = fmt.Errorf("group %d: %w", id, err)
			}
		}()
	}
	wg.Wait()
	var out []openflow.GroupEntry
	for i := range ids {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, results[i]...)
	}
	return out, nil
}

// dump reads the switch for a full pass, reading groups one by one when
// some desired group is too big to read, or when reading all of them once
// broke the connection.
func (r *Reconciler) dump(ctx context.Context, c *ofconn.Conn) (*Observed, error) {
	opts := r.dumpOptions()
	obs, err := Dump(ctx, c, opts)
	r.noteGroupRead(opts, err)
	return obs, err
}

// dumpOptions says how to read the groups: one by one when some desired
// group is too big to read, or when reading all of them once broke the
// connection.
func (r *Reconciler) dumpOptions() DumpOptions {
	var opts DumpOptions
	readable, someLarge := r.store.groupReadSet()
	if someLarge || r.groupsByID.Load() {
		opts.GroupIDs = readable
		if opts.GroupIDs == nil {
			opts.GroupIDs = []uint32{}
		}
	}
	return opts
}

// noteGroupRead switches to reading groups one by one when reading all of
// them with opts broke the connection.
func (r *Reconciler) noteGroupRead(opts DumpOptions, err error) {
	if err != nil && opts.GroupIDs == nil && errors.Is(err, errDumpGroups) && errors.Is(err, ofconn.ErrDisconnected) {
		r.log.WithError(err).Warn("reading all groups broke the connection (a group too big to describe?); reading them one by one from now on")
		r.groupsByID.Store(true)
	}
}

// Compare reads the switch and reports how it differs from what the
// owners whose name starts with prefix want, changing nothing.
func (r *Reconciler) Compare(ctx context.Context, prefix string) ([]Difference, error) {
	c := r.conn.Load()
	if c == nil {
		return nil, fmt.Errorf("reconcile: %s: not connected", r.opts.Bridge)
	}
	obs, err := r.dump(ctx, c)
	if err == nil {
		err = obs.decodeFlows()
	}
	if err == nil {
		err = obs.decodeGroups()
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile: %s: %w", r.opts.Bridge, err)
	}
	return r.store.Compare(obs, prefix, r.Generation()), nil
}

// VersionOwner owns the version note of a bridge.
const VersionOwner = "meta/version"

// VersionState is the version note for generation gen: the single flow of
// plan.VersionTable, priority 0, whose note reads
// "nodeflow pipeline=<plan.PipelineVersion> generation=<gen> agent=<agent>"
// (without " agent=..." when agent is empty). The generation itself
// travels in the cookie.
func VersionState(gen plan.Generation, agent string) State {
	note := Note{Pipeline: plan.PipelineVersion, Generation: gen, Agent: agent}.String()
	return State{Flows: []openflow.Flow{{
		Table:        uint8(plan.VersionTable),
		Priority:     uint16(plan.PriorityMiss),
		Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Note{Data: []byte(note)}}}},
	}}}
}

// Note is a version note's content.
type Note struct {
	// Pipeline is the plan.PipelineVersion of the program that wrote it.
	Pipeline int
	// Generation counts the program's start-ups on this bridge.
	Generation plan.Generation
	// Agent is the writer's version, "" when it gave none (pipeline 1
	// never did).
	Agent string
}

// String is the note's text.
func (n Note) String() string {
	s := fmt.Sprintf("nodeflow pipeline=%d generation=%d", n.Pipeline, n.Generation)
	if a := strings.Join(strings.Fields(n.Agent), "_"); a != "" {
		s += " agent=" + a
	}
	return s
}

// ParseNote reads a version note's text; ok is false when it is not one.
func ParseNote(text string) (n Note, ok bool) {
	fields := strings.Fields(text)
	if len(fields) < 3 || fields[0] != "nodeflow" {
		return Note{}, false
	}
	for _, f := range fields[1:] {
		k, v, found := strings.Cut(f, "=")
		if !found {
			return Note{}, false
		}
		switch k {
		case "pipeline":
			p, err := strconv.Atoi(v)
			if err != nil {
				return Note{}, false
			}
			n.Pipeline = p
		case "generation":
			g, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return Note{}, false
			}
			n.Generation = plan.Generation(g)
		case "agent":
			n.Agent = v
		}
	}
	return n, n.Pipeline > 0
}

// noteOf reads the version note flow f (nil: none).
func noteOf(f *openflow.Flow) (Note, bool) {
	if f == nil {
		return Note{}, false
	}
	return ParseNote(VersionNote(f))
}

// VersionNote decodes the text of a version note flow's note action, or
// returns "" when f has none.
func VersionNote(f *openflow.Flow) string {
	for _, in := range f.Instructions {
		aa, ok := in.(openflow.ApplyActions)
		if !ok {
			continue
		}
		for _, a := range aa.Actions {
			if n, ok := a.(openflow.Note); ok {
				return strings.TrimRight(string(n.Data), "\x00")
			}
		}
	}
	return ""
}
