package reconcile

import (
	"context"
	"math/bits"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
)

// DefaultAuditPartFlows is the default of Options.AuditPartFlows.
const DefaultAuditPartFlows = 5000

// MaxAuditParts bounds the flow parts of one audit: the switch walks all
// of its flows to pick out each part's.
const MaxAuditParts = 64

// auditParts is a periodic audit read in parts: its flows part by part,
// split by their cookie's owner hash, then its groups and meters whole.
// Each part is read and compared in a sync pass of its own; the changes
// that arrive meanwhile go in the passes between them.
//
// A part's read is consistent with the store: nothing else is sent on the
// connection while it is read and compared. What the parts cannot see is
// which flows are absent, until every part has been read: endAudit takes
// those for absent, except the flows that a commit or the flow monitor
// settled after the audit began (commitFlow, observeFlowKeyLocked), which
// the store already has as the switch does.
type auditParts struct {
	epoch     uint32        // the store's epoch for this audit (Store.beginAudit)
	flowParts int           // a power of two; part flowParts reads the groups and meters
	next      int           // the next part to read, from 0
	took      time.Duration // the parts' passes so far
	waited    bool          // the last pass let queued changes go before the next part
	// readFailed says that the last part could not be read: the audit
	// ends there.
	readFailed bool
}

// beginAudit starts the periodic audit in parts when the bridge has flows
// for two parts or more. Otherwise it reports false: the audit reads the
// switch whole. So it does when groups are read one by one (see
// DumpOptions.GroupIDs): the unwanted groups that it cannot read are found
// through the flows that use them, all of them.
func (r *Reconciler) beginAudit() bool {
	if r.opts.AuditPartFlows < 0 || r.dumpOptions().GroupIDs != nil {
		return false
	}
	flows, _, _ := r.store.Counts()
	n := auditFlowParts(flows, r.opts.AuditPartFlows)
	if n < 2 {
		return false
	}
	r.audit = &auditParts{epoch: r.store.beginAudit(), flowParts: n}
	return true
}

// auditFlowParts is the number of flow parts that keeps them at about per
// flows each: the least power of two that does, up to MaxAuditParts.
func auditFlowParts(flows, per int) int {
	n := 1
	for n*per < flows && n < MaxAuditParts {
		n *= 2
	}
	return n
}

// due reports whether this pass reads the next part. A pass that someone
// waits for (flushing) reads none. Nor does one with changes queued
// (pending), unless the pass before it already let changes go first: a
// stream of changes delays the audit by one pass a part at most.
func (a *auditParts) due(flushing, pending bool) bool {
	if flushing {
		return false
	}
	if pending && !a.waited {
		a.waited = true
		return false
	}
	a.waited = false
	return true
}

// flowPartRequest asks for the flows of part (from 0) of parts, a power
// of two: those whose cookie's owner hash is part modulo parts.
func flowPartRequest(part, parts int) *openflow.FlowStatsRequest {
	shift := bits.TrailingZeros64(uint64(plan.OwnerHashMask))
	req := openflow.NewFlowStatsRequest()
	req.Cookie = uint64(part) << shift
	req.CookieMask = uint64(parts-1) << shift
	return req
}

// auditPart reads and compares the audit's next part: the flows of a flow
// part, or, last, the groups and meters (and then takes the flows that no
// part saw for absent). It returns how many flows or groups the part found
// that nobody wants.
func (r *Reconciler) auditPart(ctx context.Context, c *ofconn.Conn, a *auditParts) (unwanted int, err error) {
	if a.next < a.flowParts {
		obs, err := dumpFlows(ctx, c, flowPartRequest(a.next, a.flowParts))
		if err != nil {
			return 0, err
		}
		return r.store.observeFlowPart(obs, a.epoch), nil
	}
	opts := r.dumpOptions()
	obs := &Observed{}
	err = dumpGroupsAndMeters(ctx, c, opts, obs)
	r.noteGroupRead(opts, err)
	if err != nil {
		return 0, err
	}
	return r.store.endAudit(obs, a.epoch), nil
}
