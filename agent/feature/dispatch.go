package feature

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// DefaultQueue is the queue size of a category that declares none: about
// what a meter lets through in a second, as OVS's own controller queue
// (100 packets).
const DefaultQueue = 256

// Dispatcher routes packet-ins to the feature that handles their category.
// Each category has its own bounded queue and goroutine, so a flood of one
// category (rejects, say) cannot delay another (unidling). Within a
// category the queue is fair between sources (fairQueue): packet-ins wait
// per source and are handled round robin, and a full queue drops from the
// source that holds the most, so a flood that passed its own meter in the
// datapath cannot fill the queue for anyone else either. A packet-in's
// source is the per-source meter it passed (plan.PuntSource, set by the
// punt table), or its in_port when it carries none. Dispatch never
// blocks; what it drops is counted.
type Dispatcher struct {
	log      logrus.FieldLogger
	received *prometheus.CounterVec
	dropped  *prometheus.CounterVec

	mu      sync.Mutex
	routes  map[plan.PacketInCategory]*route
	started bool
}

type route struct {
	feature string
	queue   *fairQueue
	handle  func(PacketIn)
	label   string
}

// Drop reasons in the dropped counter.
const (
	DropQueueFull = "queue_full"
	DropUnknown   = "unknown_category"
	DropMalformed = "malformed"
)

// NewDispatcher returns a dispatcher whose counters are registered in reg:
// nodeflow_packet_ins_received_total{category} and
// nodeflow_packet_ins_dropped_total{category,reason}.
func NewDispatcher(reg prometheus.Registerer, log logrus.FieldLogger) *Dispatcher {
	d := &Dispatcher{
		log: log,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_packet_ins_received_total", Help: "Packet-ins received, by category (the first userdata byte).",
		}, []string{"category"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_packet_ins_dropped_total", Help: "Packet-ins dropped before a feature handled them, by category and reason.",
		}, []string{"category", "reason"}),
		routes: map[plan.PacketInCategory]*route{},
	}
	if reg != nil {
		reg.MustRegister(d.received, d.dropped)
	}
	return d
}

// Register routes category c to handle, from feature, with a queue of size
// (0: DefaultQueue). A category has one handler: registering it twice is
// an error, and so is registering after Run.
func (d *Dispatcher) Register(feature string, c PacketInCategory, handle func(PacketIn)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return fmt.Errorf("feature: packet-in category %d for %s: dispatcher already running", c.Category, feature)
	}
	if r, ok := d.routes[c.Category]; ok {
		return fmt.Errorf("feature: packet-in category %d for %s: already handled by %s", c.Category, feature, r.feature)
	}
	size := c.Queue
	if size <= 0 {
		size = DefaultQueue
	}
	label := c.Category.String()
	d.routes[c.Category] = &route{feature: feature, queue: newFairQueue(size), handle: handle, label: label}
	// Every series exists from the start, at zero.
	d.received.WithLabelValues(label)
	d.dropped.WithLabelValues(label, DropQueueFull)
	return nil
}

// Run starts one goroutine per category and returns; they stop when ctx
// ends.
func (d *Dispatcher) Run(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.started = true
	for _, r := range d.routes {
		go func(r *route) {
			for {
				p, ok := r.queue.pop(ctx)
				if !ok {
					return
				}
				r.handle(p)
			}
		}(r)
	}
}

// Dispatch queues one packet-in from bridge b for its category's feature.
// It never blocks: a packet-in whose queue is full, whose category nobody
// handles, or that carries no category is dropped and counted.
func (d *Dispatcher) Dispatch(b plan.Bridge, m *openflow.PacketIn) {
	if m == nil || len(m.Userdata) == 0 {
		d.dropped.WithLabelValues("none", DropMalformed).Inc()
		return
	}
	c := plan.PacketInCategory(m.Userdata[0])
	d.mu.Lock()
	r := d.routes[c]
	d.mu.Unlock()
	if r == nil {
		d.dropped.WithLabelValues(strconv.Itoa(int(c)), DropUnknown).Inc()
		return
	}
	d.received.WithLabelValues(r.label).Inc()
	if r.queue.push(SourceOf(m), PacketIn{Bridge: b, Category: c, Msg: m}) {
		d.dropped.WithLabelValues(r.label, DropQueueFull).Inc()
	}
}

// SourceOf returns the source a packet-in is queued under: the per-source
// meter it passed (plan.PuntSource), or, when it carries none, its
// in_port (above 2^32, apart from the meters).
func SourceOf(m *openflow.PacketIn) uint64 {
	if v := m.Reg(plan.PuntSource.Index()); v != 0 {
		return uint64(v)
	}
	return 1<<32 | uint64(m.InPort())
}
