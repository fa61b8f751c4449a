package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"nodeflow/agent/feature"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/repair"
	"nodeflow/internal/kubeclient"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/lib/ovsdb"
)

// featureHost is the agent as one feature sees it (feature.Host): its own
// logger, and owner writers restricted to the plan features it declared.
type featureHost struct {
	a      *Agent
	log    logrus.FieldLogger
	owners map[plan.Bridge]feature.Owners
}

func (a *Agent) hostFor(f feature.Feature) *featureHost {
	h := &featureHost{a: a, log: a.log.WithField("feature", f.Name()), owners: map[plan.Bridge]feature.Owners{}}
	for _, b := range plan.Bridges {
		h.owners[b] = feature.Restrict(a.stores[b], f.Name(), f.Owns())
	}
	return h
}

func (h *featureHost) Log() logrus.FieldLogger                    { return h.log }
func (h *featureHost) Kube() kubernetes.Interface                 { return h.a.kube }
func (h *featureHost) Informers() informers.SharedInformerFactory { return h.a.informers }
func (h *featureHost) LocalPods() informers.SharedInformerFactory { return h.a.localPods }
func (h *featureHost) Recorder() record.EventRecorder             { return h.a.recorder }
func (h *featureHost) Registry() prometheus.Registerer            { return h.a.metrics.Registry }
func (h *featureHost) Node() feature.Node                         { return h.a.Node() }
func (h *featureHost) NamespaceIDs() feature.NamespaceIDs         { return h.a.namespaces }
func (h *featureHost) Owners(b plan.Bridge) feature.Owners        { return h.owners[b] }
func (h *featureHost) Repairs() *repair.Tracker                   { return h.a.repairs }
func (h *featureHost) OnBridgeReady(f func(b plan.Bridge)) {
	h.a.nodeMu.Lock()
	defer h.a.nodeMu.Unlock()
	h.a.onReady = append(h.a.onReady, f)
}
func (h *featureHost) OnNodeChange(f func()) {
	h.a.nodeMu.Lock()
	defer h.a.nodeMu.Unlock()
	h.a.onNode = append(h.a.onNode, f)
}

// Flush waits until the bridges named (both when none is) hold every state
// set before the call; it returns at once before the reconcilers run (their
// start-up pass installs everything).
func (h *featureHost) Flush(ctx context.Context, bridges ...plan.Bridge) error {
	if len(bridges) == 0 {
		bridges = plan.Bridges
	}
	for _, b := range bridges {
		r := h.a.recs[b]
		if r == nil {
			return nil
		}
		if err := r.Flush(ctx); err != nil {
			return fmt.Errorf("controller: flush %s: %w", h.a.bridgeName(b), err)
		}
	}
	return nil
}

// FlushThen waits until bridge b holds every state set before the call and
// sends msgs right behind it (see reconcile.Reconciler.FlushThen).
func (h *featureHost) FlushThen(ctx context.Context, b plan.Bridge, msgs ...openflow.Message) error {
	r := h.a.recs[b]
	if r == nil {
		return h.Send(ctx, b, msgs...)
	}
	if err := r.FlushThen(ctx, msgs...); err != nil {
		return fmt.Errorf("controller: flush %s: %w", h.a.bridgeName(b), err)
	}
	return nil
}

// Dynamic returns the agent's dynamic client, made on first use.
func (h *featureHost) Dynamic() (dynamic.Interface, error) {
	h.a.dynOnce.Do(func() {
		if h.a.rest == nil {
			h.a.dynErr = errors.New("controller: no API client configuration")
			return
		}
		h.a.dyn, h.a.dynErr = kubeclient.NewDynamic(h.a.rest)
	})
	if h.a.dynErr != nil {
		return nil, fmt.Errorf("controller: dynamic client: %w", h.a.dynErr)
	}
	return h.a.dyn, nil
}

// errNotConnected is returned by Send before the bridges are connected.
var errNotConnected = errors.New("not connected yet")

// Send sends msgs on bridge b's connection.
func (h *featureHost) Send(ctx context.Context, b plan.Bridge, msgs ...openflow.Message) error {
	c, ok := h.a.conns.Load(b)
	if !ok {
		return fmt.Errorf("controller: send to %s: %w", h.a.bridgeName(b), errNotConnected)
	}
	return c.(*ofconn.Conn).Send(ctx, msgs...)
}

// FlowStats reads the statistics of bridge b's flows in table t with
// cookies of feature f on the agent's connection of b.
func (h *featureHost) FlowStats(ctx context.Context, b plan.Bridge, t plan.TableID, f plan.Feature) ([]openflow.FlowStats, error) {
	c, ok := h.a.conns.Load(b)
	if !ok {
		return nil, fmt.Errorf("controller: flow stats of %s table %d: %w", h.a.bridgeName(b), t, errNotConnected)
	}
	stats, err := flowStats(ctx, c.(*ofconn.Conn), t, f)
	if err != nil {
		return nil, fmt.Errorf("controller: flow stats of %s table %d: %w", h.a.bridgeName(b), t, err)
	}
	return stats, nil
}

// MeterStats reads the statistics of bridge b's meters on the agent's
// connection of b.
func (h *featureHost) MeterStats(ctx context.Context, b plan.Bridge) ([]openflow.MeterStats, error) {
	c, ok := h.a.conns.Load(b)
	if !ok {
		return nil, fmt.Errorf("controller: meter stats of %s: %w", h.a.bridgeName(b), errNotConnected)
	}
	rep, err := c.(*ofconn.Conn).MultipartReply(ctx, &openflow.MeterStatsRequest{MeterID: openflow.MeterAll})
	if err != nil {
		return nil, fmt.Errorf("controller: meter stats of %s: %w", h.a.bridgeName(b), err)
	}
	stats, err := rep.MeterStats()
	if err != nil {
		return nil, fmt.Errorf("controller: meter stats of %s: %w", h.a.bridgeName(b), err)
	}
	return stats, nil
}

// Interfaces returns OVSDB's Interface cache.
func (h *featureHost) Interfaces() *ovsdb.InterfaceCache { return h.a.Interfaces() }

// OVSDB returns the agent's OVSDB client.
func (h *featureHost) OVSDB() *ovsdb.Client { return h.a.OVSDB() }

// ReadFlows reads the flows of bridge b in table t with cookies of feature
// f over a short-lived connection of its own.
func (h *featureHost) ReadFlows(ctx context.Context, b plan.Bridge, t plan.TableID, f plan.Feature) ([]openflow.Flow, error) {
	return readFlows(ctx, h.a.cfg.MgmtSocket(h.a.bridgeName(b)), t, f, h.log.WithField("bridge", h.a.bridgeName(b)))
}

func readFlows(ctx context.Context, socket string, t plan.TableID, f plan.Feature, log logrus.FieldLogger) ([]openflow.Flow, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := ofconn.Dial(ctx, socket, ofconn.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("controller: read flows of table %d: %w", t, err)
	}
	defer c.Close()
	stats, err := flowStats(ctx, c, t, f)
	if err != nil {
		return nil, fmt.Errorf("controller: read flows of table %d: %w", t, err)
	}
	return openflow.FlowsFromStats(stats), nil
}

// flowStats reads the statistics of the flows in table t with cookies of
// feature f over c.
func flowStats(ctx context.Context, c *ofconn.Conn, t plan.TableID, f plan.Feature) ([]openflow.FlowStats, error) {
	req := openflow.NewFlowStatsRequest()
	req.Table = uint8(t)
	req.Cookie = uint64(f) << 56
	req.CookieMask = uint64(plan.FeatureMask)
	rep, err := c.MultipartReply(ctx, req)
	if err != nil {
		return nil, err
	}
	return rep.FlowStats()
}

var _ feature.Host = (*featureHost)(nil)
var _ feature.OwnerStore = (*reconcile.Store)(nil)
