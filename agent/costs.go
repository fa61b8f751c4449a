package agent

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/memlimit"
)

// What each namespace costs the node, and the budget that bounds it. The
// stores attribute every owner to its namespace (plan.OwnerNamespace);
// the agent exports that per namespace, reports the objects a namespace
// budget holds back as events on them, and gives memory back to the
// system after the desired state shrinks.

// Event reasons of the namespace budget.
const (
	// ReasonBudgetExceeded is the Warning event on an object the budget
	// holds back.
	ReasonBudgetExceeded = "NamespaceBudgetExceeded"
	// ReasonBudgetAdmitted is the Normal event on it once it is let in.
	ReasonBudgetAdmitted = "NamespaceBudgetAdmitted"
)

// newBudget returns the budget of the agent's stores, nil without one.
func (a *Agent) newBudget() *reconcile.Budget {
	if a.cfg.NamespaceBudget <= 0 {
		return nil
	}
	return reconcile.NewBudget(a.cfg.NamespaceBudget)
}

// budgetEventDelay is how long a refusal (or admission) waits before its
// event: a Service's owners arrive one bridge at a time, and a sync may
// hold back and let in the same object; the event tells the outcome, with
// the object's whole cost.
const budgetEventDelay = time.Second

// reportBudget records, budgetEventDelay later, an event on each object
// the budget held back that still is then (once, until it is let in), and
// on each such object let in again, and logs them.
func (a *Agent) reportBudget(b *reconcile.Budget) func([]reconcile.Refusal) {
	var mu sync.Mutex
	warned := map[reconcile.Refusal]bool{} // by identity (key), the objects with a Warning
	key := func(r reconcile.Refusal) reconcile.Refusal {
		return reconcile.Refusal{Namespace: r.Namespace, Kind: r.Kind, Name: r.Name}
	}
	return func(rs []reconcile.Refusal) {
		time.AfterFunc(budgetEventDelay, func() {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rs {
				cur, ok := b.Current(r.Namespace, r.Kind, r.Name)
				k := key(r)
				switch {
				case !ok:
					delete(warned, k)
				case cur.Admitted != r.Admitted:
				case !cur.Admitted && !warned[k]:
					warned[k] = true
					a.budgetEvent(cur)
				case cur.Admitted && warned[k]:
					delete(warned, k)
					a.budgetEvent(cur)
				}
			}
			for k := range warned {
				if _, ok := b.Current(k.Namespace, k.Kind, k.Name); !ok {
					delete(warned, k) // gone while held back
				}
			}
		})
	}
}

// budgetEvent logs r and records its event on the object.
func (a *Agent) budgetEvent(r reconcile.Refusal) {
	log := a.log.WithFields(logrus.Fields{"kind": r.Kind, "namespace": r.Namespace, "name": r.Name,
		"cost": r.Cost, "use": r.Use, "budget": r.Budget})
	typ, reason := corev1.EventTypeWarning, ReasonBudgetExceeded
	if r.Admitted {
		typ, reason = corev1.EventTypeNormal, ReasonBudgetAdmitted
		log.Info("object let in again by its namespace's budget")
	} else {
		log.Warn("object held back by its namespace's budget")
	}
	if a.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: r.Kind, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name, UID: types.UID(r.UID)}
	a.recorder.Event(ref, typ, reason, r.String())
}

// startReleaser gives memory back to the system after the bridges'
// desired state shrinks (memlimit.Releaser), observed after each pass.
func (a *Agent) startReleaser(ctx context.Context) {
	a.releaser = memlimit.NewReleaser(memlimit.ReleaseOptions{})
	a.metrics.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nodeflow_memory_releases_total",
		Help: "Collections that returned freed memory to the system after the desired state shrank.",
	}, func() float64 { return float64(a.releaser.Releases()) }))
	go a.releaser.Run(ctx)
}

// observeSize tells the releaser the size of the desired state.
func (a *Agent) observeSize() {
	if a.releaser == nil {
		return
	}
	var n int64
	for _, s := range a.stores {
		n += s.Total().Bytes
	}
	a.releaser.Observe(n)
}

// costCollector exports what each namespace costs the node's bridges. A
// namespace whose owners want nothing has no series: the metrics'
// cardinality is the namespaces that cost something.
type costCollector struct {
	a                              *Agent
	flows, groups, buckets, bytes  *prometheus.Desc
	budget, budgetUsed, budgetHeld *prometheus.Desc
}

func newCostCollector(a *Agent) *costCollector {
	ns := []string{"namespace"}
	return &costCollector{
		a: a,
		flows: prometheus.NewDesc("nodeflow_namespace_flows",
			"Desired flows of a namespace's objects, by bridge.", []string{"bridge", "namespace"}, nil),
		groups: prometheus.NewDesc("nodeflow_namespace_groups",
			"Desired groups of a namespace's objects.", ns, nil),
		buckets: prometheus.NewDesc("nodeflow_namespace_group_buckets",
			"Buckets of the desired groups of a namespace's objects.", ns, nil),
		bytes: prometheus.NewDesc("nodeflow_namespace_memory_bytes",
			"Estimated memory the agent's desired state holds for a namespace's objects (their flows and groups, encoded, and their entries).", ns, nil),
		budget: prometheus.NewDesc("nodeflow_namespace_budget",
			"The flows and buckets each namespace's objects may have on this node (--namespace-budget).", nil, nil),
		budgetUsed: prometheus.NewDesc("nodeflow_namespace_budget_used",
			"Flows and buckets of a namespace's objects that its budget lets in.", ns, nil),
		budgetHeld: prometheus.NewDesc("nodeflow_namespace_budget_held_objects",
			"Objects of a namespace that its budget holds back.", ns, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *costCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.flows, c.groups, c.buckets, c.bytes, c.budget, c.budgetUsed, c.budgetHeld} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *costCollector) Collect(ch chan<- prometheus.Metric) {
	sum := map[string]*reconcile.Use{}
	var budget *reconcile.Budget
	for _, b := range plan.Bridges {
		s := c.a.stores[b]
		if s == nil {
			continue
		}
		name := c.a.bridgeName(b)
		for ns, u := range s.NamespaceUse() {
			if ns == "" {
				continue // the node's own: nodeflow_flows has them
			}
			ch <- prometheus.MustNewConstMetric(c.flows, prometheus.GaugeValue, float64(u.Flows), name, ns)
			t := sum[ns]
			if t == nil {
				t = &reconcile.Use{}
				sum[ns] = t
			}
			t.Groups += u.Groups
			t.Buckets += u.Buckets
			t.Bytes += u.Bytes
		}
		if s.Budget() != nil {
			budget = s.Budget()
		}
	}
	for ns, u := range sum {
		ch <- prometheus.MustNewConstMetric(c.groups, prometheus.GaugeValue, float64(u.Groups), ns)
		ch <- prometheus.MustNewConstMetric(c.buckets, prometheus.GaugeValue, float64(u.Buckets), ns)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(u.Bytes), ns)
	}
	if budget == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, float64(budget.Limit()))
	for ns, su := range budget.Spaces() {
		ch <- prometheus.MustNewConstMetric(c.budgetUsed, prometheus.GaugeValue, float64(su.Used), ns)
		ch <- prometheus.MustNewConstMetric(c.budgetHeld, prometheus.GaugeValue, float64(su.Refused), ns)
	}
}
