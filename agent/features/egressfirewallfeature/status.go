package egressfirewallfeature

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"nodeflow/datapath/plan"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/agent/feature"
	"nodeflow/lib/syncloop"
	"nodeflow/model/egressfirewall"
)

// Status messages, as ovn-kubernetes writes them: one per node in
// status.messages, "<node>: EgressFirewall Rules applied" or
// "<node>: EgressFirewall Rules not correctly applied: <why>", and their
// roll-up in status.status.
const (
	StatusApplied    = "EgressFirewall Rules applied"
	StatusNotApplied = "EgressFirewall Rules not correctly applied"
)

func applied() string { return StatusApplied }

func notApplied(why error) string { return StatusNotApplied + ": " + why.Error() }

// FieldManager returns the field manager that writes node's status
// message: one per node, so that each node's server-side apply owns its
// own element of status.messages (a set) and never removes another's.
func FieldManager(node string) string { return "nodeflow-agent-" + node }

// Rollup returns status.status for a set of per-node messages:
// StatusApplied when every node applied the rules, StatusNotApplied when
// one did not; "" when there is no message.
func Rollup(messages []string) string {
	if len(messages) == 0 {
		return ""
	}
	for _, m := range messages {
		if !strings.HasSuffix(m, ": "+StatusApplied) {
			return StatusNotApplied
		}
	}
	return StatusApplied
}

// statusRetry is the wait before a status that could not be written is
// tried again.
const statusRetry = 2 * time.Second

// statusWriter writes this node's status message on the enforced
// EgressFirewalls, once the flows it reports on are in the switch. Its
// loop is a syncloop.Keyed over the objects' namespace/name.
type statusWriter struct {
	f    *Firewall
	node string
	loop *syncloop.Keyed[string]

	mu      sync.Mutex
	desired map[string]desiredStatus // namespace/name -> this node's message
}

type desiredStatus struct {
	ref egressfirewall.ObjectRef
	msg string // with the node's prefix
}

func newStatusWriter(f *Firewall) *statusWriter {
	w := &statusWriter{f: f, node: f.h.Node().Name, desired: map[string]desiredStatus{}}
	w.loop = syncloop.NewKeyed(w.pass, syncloop.KeyedOptions{RetryInterval: statusRetry})
	return w
}

func key(ns, name string) string { return ns + "/" + name }

// want records the message this node reports on ref.
func (w *statusWriter) want(ref egressfirewall.ObjectRef, body string) {
	d := desiredStatus{ref: ref, msg: w.node + ": " + body}
	k := key(ref.Namespace, ref.Name)
	w.mu.Lock()
	old, ok := w.desired[k]
	changed := !ok || old != d
	w.desired[k] = d
	w.mu.Unlock()
	if changed {
		w.loop.Mark(k)
	}
}

// keepOnly forgets the messages for ns's objects other than keep.
func (w *statusWriter) keepOnly(ns string, keep egressfirewall.ObjectRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, d := range w.desired {
		if d.ref.Namespace == ns && (d.ref.Name != keep.Name || d.ref.Kind != keep.Kind) {
			delete(w.desired, k)
		}
	}
}

// objectUpdated checks the status of an object whose status changed (the
// other nodes' writes): the roll-up may need this node's update.
func (w *statusWriter) objectUpdated(u *unstructured.Unstructured) {
	k := key(u.GetNamespace(), u.GetName())
	w.mu.Lock()
	_, ok := w.desired[k]
	w.mu.Unlock()
	if ok {
		w.loop.Mark(k)
	}
}

// run writes the pending messages until ctx ends.
func (w *statusWriter) run(ctx context.Context) { w.loop.Loop(ctx) }

// pass writes the messages of keys (those forgotten meanwhile are
// skipped): it waits until the bridges hold every flow set before, then
// applies each message. It returns the keys to retry.
func (w *statusWriter) pass(ctx context.Context, keys []string, _ bool) (failed []string) {
	w.mu.Lock()
	var todo []desiredStatus
	for _, k := range keys {
		if d, ok := w.desired[k]; ok {
			todo = append(todo, d)
		}
	}
	w.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := w.f.h.Flush(fctx, plan.Pod)
	cancel()
	for _, d := range todo {
		if err != nil || !w.write(ctx, d) {
			failed = append(failed, key(d.ref.Namespace, d.ref.Name))
		}
	}
	if err != nil {
		w.f.log.WithError(err).Warn("status: waiting for the bridges")
	}
	return failed
}

// write applies d unless the object already says it; it reports false
// when it must be retried.
func (w *statusWriter) write(ctx context.Context, d desiredStatus) bool {
	obj, ok, err := w.f.efInf.GetIndexer().GetByKey(key(d.ref.Namespace, d.ref.Name))
	cur := unstructuredOf(obj)
	if err != nil || !ok || cur == nil || cur.GetUID() != d.ref.UID {
		return true // gone or replaced: its namespace is synced again
	}
	msgs, _, _ := unstructured.NestedStringSlice(cur.Object, "status", "messages")
	status, _, _ := unstructured.NestedString(cur.Object, "status", "status")
	all := []string{d.msg}
	for _, m := range msgs {
		if !strings.HasPrefix(m, w.node+": ") {
			all = append(all, m)
		}
	}
	roll := Rollup(all)
	if slices.Contains(msgs, d.msg) && status == roll {
		return true
	}
	apply := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": egressfirewall.EgressFirewallGVR.GroupVersion().String(),
		"kind":       string(egressfirewall.KindEgressFirewall),
		"metadata":   map[string]any{"name": d.ref.Name, "namespace": d.ref.Namespace, "uid": string(d.ref.UID)},
		"status":     map[string]any{"messages": []any{d.msg}, "status": roll},
	}}
	actx, cancel := context.WithTimeout(ctx, w.f.opts.StatusTimeout)
	defer cancel()
	_, err = w.f.dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace(d.ref.Namespace).
		ApplyStatus(actx, d.ref.Name, apply, metav1.ApplyOptions{FieldManager: FieldManager(w.node), Force: true})
	if err != nil {
		if isNotFound(err) {
			return true
		}
		w.f.m.statusWrites.WithLabelValues("error").Inc()
		w.f.log.WithError(err).WithField("object", d.ref.String()).Warn("cannot write the status")
		return false
	}
	w.f.m.statusWrites.WithLabelValues("ok").Inc()
	return true
}

// reporter records a Warning event for each problem of each object, once
// per object, reason and message.
type reporter struct {
	h feature.Host
	m *metrics

	mu   sync.Mutex
	seen map[string]map[string]string // namespace -> object uid/reason -> message
}

func newReporter(h feature.Host, m *metrics) *reporter {
	return &reporter{h: h, m: m, seen: map[string]map[string]string{}}
}

// problems reports ns's problems that are new or changed, and forgets
// the ones that are gone, so that they are reported again if they come
// back.
func (r *reporter) problems(ns string, ps []egressfirewall.Problem) {
	r.mu.Lock()
	prev := r.seen[ns]
	cur := make(map[string]string, len(ps))
	var report []egressfirewall.Problem
	for _, p := range ps {
		k := string(p.Object.UID) + "/" + p.Object.Name + "/" + p.Reason
		msg := p.Err.Error()
		cur[k] = msg
		if prev[k] != msg {
			report = append(report, p)
		}
	}
	if len(cur) == 0 {
		delete(r.seen, ns)
	} else {
		r.seen[ns] = cur
	}
	r.mu.Unlock()
	for _, p := range report {
		r.m.problems.WithLabelValues(p.Reason).Inc()
		r.h.Log().WithError(p.Err).WithFields(map[string]any{"object": p.Object.String(), "reason": p.Reason}).
			Warn("egress firewall object not enforced as it stands")
		r.h.Recorder().Event(objectReference(p), corev1.EventTypeWarning, p.Reason, p.Err.Error())
	}
}

// objectReference is the event's involved object: the object, with the
// first field at fault.
func objectReference(p egressfirewall.Problem) *corev1.ObjectReference {
	gvk := p.Object.Kind.GVK()
	ref := &corev1.ObjectReference{
		Kind: string(p.Object.Kind), APIVersion: gvk.GroupVersion().String(),
		Namespace: p.Object.Namespace, Name: p.Object.Name, UID: types.UID(p.Object.UID),
	}
	var fe *egressfirewall.FieldError
	if errors.As(p.Err, &fe) {
		ref.FieldPath = fe.Field
	}
	return ref
}
