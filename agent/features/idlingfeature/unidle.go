// Package idlingfeature is the node agent's unidling feature. For every idled
// service port (its Service carries an idled-at annotation and it has no
// ready endpoint; the services feature says which, through its
// IdleHandler) it installs br0 flows that send the new connections of
// every VIP of the port to the agent, through a meter (datapath/idlingflows). The
// agent then:
//
//   - emits one Normal event NeedPods on the Service per wait cycle per port
//     ("The service-port NS/NAME:PORT needs pods."), which `nodeflow
//     unidler` (or openshift-controller-manager) answers by scaling the
//     port's workloads back up;
//   - holds the packets themselves, in bounded buffers (per port and in
//     total, by count and by bytes, for at most the hold time), keeping one
//     copy of a retransmitted TCP segment;
//   - once the port has endpoints and br0 holds its load-balancing flows
//     (the services feature calls Unidled after a barrier), takes its own
//     flows away, waits for the bridge, and re-injects every held packet
//     with a packet-out from its original in_port to table 0 (a packet
//     that came from breth0 goes back through breth0's patch port), so
//     that it goes through the whole pipeline as if it had never been
//     held;
//   - answers a packet held past the hold time as a service without
//     endpoints (TCP RST, ICMP unreachable), and so, at once, the packets
//     of a port whose Service is deleted. (A port whose Service loses its
//     idling annotations stays idled until it has endpoints: the services
//     feature decides.)
package idlingfeature

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/idlingflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// Defaults of Options.
const (
	DefaultHoldTime      = 60 * time.Second
	DefaultPortPackets   = 256
	DefaultPortBytes     = 1 << 20
	DefaultTotalPackets  = 8192
	DefaultTotalBytes    = 16 << 20
	DefaultQueue         = 1024
	defaultExpiryCheck   = 200 * time.Millisecond
	releaseFlushDeadline = 10 * time.Second
	// lateWindow is how long after a port's release its ServiceIDs are
	// remembered, so that packet-ins still raised for it are re-injected
	// (or rejected) like its held packets.
	lateWindow = 2 * time.Second
)

// EventReason is the reason of the event that asks for pods.
const EventReason = "NeedPods"

// Options configure the feature.
type Options struct {
	// HoldTime bounds how long a packet is held (DefaultHoldTime).
	HoldTime time.Duration
	// PortPackets and PortBytes bound one port's held packets;
	// TotalPackets and TotalBytes all of them. Zero takes the defaults.
	PortPackets, PortBytes, TotalPackets, TotalBytes int
	// Reject answers a packet held past the hold time as a service
	// without endpoints; nil drops it.
	Reject func(*openflow.PacketIn) bool
	// Now defaults to time.Now.
	Now func() time.Time
}

func (o *Options) defaults() {
	feature.DefaultIfUnset(&o.HoldTime, DefaultHoldTime)
	feature.DefaultIfUnset(&o.PortPackets, DefaultPortPackets)
	feature.DefaultIfUnset(&o.PortBytes, DefaultPortBytes)
	feature.DefaultIfUnset(&o.TotalPackets, DefaultTotalPackets)
	feature.DefaultIfUnset(&o.TotalBytes, DefaultTotalBytes)
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Unidler is the feature. It implements feature.Feature,
// feature.PacketInHandler and the services feature's IdleHandler.
type Unidler struct {
	opts    Options
	h       feature.Host
	log     logrus.FieldLogger
	svcs    cache.Indexer // the Services' informer cache: *corev1.Service, or *proxy.Service when the service proxy runs
	m       *metrics
	release chan releaseReq

	mu      sync.Mutex
	byID    map[uint32]*port
	byName  map[service.ServicePortName]*port
	packets int
	bytes   int
	// recent are the ServiceIDs of ports released within lateWindow.
	recent map[uint32]releasedPort
}

// releasedPort is a port released a moment ago: packet-ins still raised
// for it are late, not unknown.
type releasedPort struct {
	name  service.ServicePortName
	ready bool // released to endpoints (else rejected)
	at    time.Time
}

// port is one idled service port and what is held for it.
type port struct {
	name    service.ServicePortName
	ids     []uint32
	held    []held
	bytes   int
	seen    map[segmentKey]bool
	waiting bool // NeedPods sent for this wait cycle
	first   time.Time
}

// held is one held packet.
type held struct {
	pin *openflow.PacketIn
	at  time.Time
}

// segmentKey identifies a TCP segment, so that a retransmit of a held one
// takes no room.
type segmentKey struct {
	inPort           uint32
	src, dst         netip.Addr
	sport, dport     uint16
	seq              uint32
	synOnly, payload bool
}

type releaseReq struct {
	name service.ServicePortName
	held []held
	// reject: the port went away or lost its annotation without an
	// endpoint; its packets are answered as a service without endpoints.
	reject bool
}

// New returns the feature.
func New(opts Options) *Unidler {
	opts.defaults()
	return &Unidler{opts: opts, byID: map[uint32]*port{}, byName: map[service.ServicePortName]*port{}, recent: map[uint32]releasedPort{},
		release: make(chan releaseReq, 1024)}
}

// Name implements feature.Feature.
func (u *Unidler) Name() string { return "unidle" }

// Owns implements feature.Feature.
func (u *Unidler) Owns() []plan.Feature { return []plan.Feature{plan.FeatureUnidle} }

// Init implements feature.Feature.
func (u *Unidler) Init(h feature.Host) error {
	u.h = h
	u.log = h.Log()
	// The service proxy keeps its processed form of each Service in this
	// cache (proxy.ServiceOf); only the identity is read here.
	u.svcs = h.Informers().Core().V1().Services().Informer().GetIndexer()
	u.m = newMetrics()
	if err := u.m.register(h.Registry()); err != nil {
		return fmt.Errorf("unidle: metrics: %w", err)
	}
	return nil
}

// Sync implements feature.Feature: the unidle meter.
func (u *Unidler) Sync(context.Context) error {
	if err := u.h.Owners(plan.Pod).Set(idlingflows.MeterOwner, reconcile.State{Meters: []openflow.MeterEntry{idlingflows.Meter()}}); err != nil {
		return fmt.Errorf("unidle: meter: %w", err)
	}
	return nil
}

// Run implements feature.Feature: it expires held packets and releases
// the ports that got endpoints.
func (u *Unidler) Run(ctx context.Context) {
	t := time.NewTicker(defaultExpiryCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-u.release:
			u.doRelease(ctx, r)
		case <-t.C:
			u.expire()
		}
	}
}

// PacketIns implements feature.PacketInHandler.
func (u *Unidler) PacketIns() []feature.PacketInCategory {
	return []feature.PacketInCategory{{Category: plan.PacketInUnidle, Queue: DefaultQueue}}
}

// Idled implements the services feature's IdleHandler: port name is
// idled; its flows catch its new connections from now on.
func (u *Unidler) Idled(name service.ServicePortName, sp *service.ServicePort, groupIDs map[string]uint32) {
	st, err := idlingflows.Build(sp, u.h.Node().NodePortAddrs, groupIDs)
	if err == nil {
		err = u.h.Owners(plan.Pod).Set(idlingflows.Owner(name), st)
	}
	if err != nil {
		// The services feature's drop stays: the port is held back, not
		// leaked; its clients wait for the unidler's own timeouts.
		u.log.WithError(err).WithField("service", name.String()).Error("cannot catch an idled port's connections")
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.byName[name]
	if p == nil {
		p = &port{name: name, seen: map[segmentKey]bool{}}
		u.byName[name] = p
	}
	u.forgetIDs(p)
	for _, id := range groupIDs {
		if q := u.byID[id]; q != nil && q != p {
			// The services feature gave the id to this port after
			// taking it from q: q's flows no longer carry it.
			q.ids = slices.DeleteFunc(q.ids, func(x uint32) bool { return x == id })
		}
		p.ids = append(p.ids, id)
		u.byID[id] = p
	}
	u.m.idled.Set(float64(len(u.byName)))
}

// forgetIDs removes p's ids from byID, those that are still p's: group ids
// are reused, and one p had may belong to another port by now.
func (u *Unidler) forgetIDs(p *port) {
	for _, id := range p.ids {
		if u.byID[id] == p {
			delete(u.byID, id)
		}
	}
	p.ids = p.ids[:0]
}

// Unidled implements the services feature's IdleHandler: port name has
// its flows again (or is gone). Its held packets are re-injected once its
// own flows are off br0 when it has an endpoint (ready), else answered as
// a service without endpoints (TCP RST, ICMP unreachable).
func (u *Unidler) Unidled(name service.ServicePortName, ready bool) {
	u.mu.Lock()
	p := u.byName[name]
	var h []held
	if p != nil {
		delete(u.byName, name)
		now := u.opts.Now()
		for _, id := range p.ids {
			if u.byID[id] == p {
				u.recent[id] = releasedPort{name: name, ready: ready, at: now}
			}
		}
		u.forgetIDs(p)
		h = p.held
		u.packets -= len(p.held)
		u.bytes -= p.bytes
		if p.waiting {
			u.m.unidle.Observe(u.opts.Now().Sub(p.first).Seconds())
		}
	}
	u.m.idled.Set(float64(len(u.byName)))
	u.m.setHeld(u.packets, u.bytes)
	u.mu.Unlock()
	if err := u.h.Owners(plan.Pod).Set(idlingflows.Owner(name), reconcile.State{}); err != nil {
		u.log.WithError(err).WithField("service", name.String()).Error("cannot remove an unidled port's flows")
	}
	select {
	case u.release <- releaseReq{name: name, held: h, reject: !ready}:
	default:
		u.m.dropped.WithLabelValues("release-queue").Add(float64(len(h)))
	}
}

// doRelease waits until br0 no longer holds the port's catch flows, then
// re-injects its held packets to table 0 from their original ports.
func (u *Unidler) doRelease(ctx context.Context, r releaseReq) {
	if len(r.held) == 0 {
		return
	}
	if r.reject {
		for _, h := range r.held {
			u.m.rejected.Inc()
			if u.opts.Reject != nil {
				u.opts.Reject(h.pin)
			}
		}
		u.log.WithFields(logrus.Fields{"service": r.name.String(), "packets": len(r.held)}).Info("rejected the held packets: the port has no endpoint")
		return
	}
	fctx, cancel := context.WithTimeout(ctx, releaseFlushDeadline)
	defer cancel()
	if err := u.h.Flush(fctx); err != nil {
		u.log.WithError(err).WithField("service", r.name.String()).Warn("bridges not in step; re-injecting anyway")
	}
	now := u.opts.Now()
	ports := u.h.Node().Ports
	var pod, gw []openflow.Message
	for _, h := range r.held {
		bridge, po := reinjection(h.pin, ports)
		if bridge == plan.Gateway {
			gw = append(gw, po)
		} else {
			pod = append(pod, po)
		}
		u.m.holdTime.Observe(now.Sub(h.at).Seconds())
	}
	for _, b := range []struct {
		bridge plan.Bridge
		msgs   []openflow.Message
	}{{plan.Pod, pod}, {plan.Gateway, gw}} {
		if len(b.msgs) == 0 {
			continue
		}
		if err := u.h.Send(fctx, b.bridge, b.msgs...); err != nil {
			u.m.dropped.WithLabelValues("reinject-error").Add(float64(len(b.msgs)))
			u.log.WithError(err).WithFields(logrus.Fields{"service": r.name.String(), "bridge": b.bridge.String()}).Error("cannot re-inject held packets")
			continue
		}
		u.m.released.Add(float64(len(b.msgs)))
	}
	u.log.WithFields(logrus.Fields{"service": r.name.String(), "packets": len(r.held), "from-gateway": len(gw)}).Info("re-injected the held packets")
}

// reinjection is the packet-out that puts a held packet back where it was
// caught, and the bridge to send it to. A packet from a port of br0 goes
// back to br0's table 0 from that port. A packet that came from breth0
// through the patch port is sent again through breth0's patch port, as
// breth0 sent it (masqueraded, router MAC), from breth0's LOCAL port: br0
// sees it arrive on its patch port, exactly as the first time. Sending it
// to br0 with in_port=patch would lose it: the patch port has no
// datapath port, and the userspace datapath drops a packet-out without
// one at its first recirculation (coverage counter
// datapath_drop_upcall_error).
//
// A packet that arrived on a tunnel port keeps its tunnel metadata (the
// id and outer addresses the tunnel port set before table 0). No path
// catches one today, since a remote pod's connection is load-balanced on
// its own node, but the pipeline may match on them.
func reinjection(pin *openflow.PacketIn, ports feature.Ports) (plan.Bridge, *openflow.PacketOut) {
	if in := pin.InPort(); in != ports.PodPatch || ports.PodPatch == 0 || ports.GatewayPatch == 0 {
		return plan.Pod, &openflow.PacketOut{InPort: in, Match: tunnelMetadata(pin.Match),
			Actions: []openflow.Action{openflow.OutputPort(openflow.PortTable)}, Data: pin.Data}
	}
	return plan.Gateway, &openflow.PacketOut{InPort: openflow.PortLocal, Actions: []openflow.Action{openflow.OutputPort(ports.GatewayPatch)}, Data: pin.Data}
}

// tunnelFields are the fields a tunnel port sets on a packet it receives.
var tunnelFields = []openflow.Field{
	openflow.TunnelID(0),
	openflow.TunIPv4Src(netip.IPv4Unspecified()), openflow.TunIPv4Dst(netip.IPv4Unspecified()),
	openflow.TunIPv6Src(netip.IPv6Unspecified()), openflow.TunIPv6Dst(netip.IPv6Unspecified()),
}

// tunnelMetadata returns the tunnel fields of a packet-in's match.
func tunnelMetadata(m openflow.Match) openflow.Match {
	var out openflow.Match
	for _, f := range m.Fields {
		for _, t := range tunnelFields {
			if f.Class == t.Class && f.Field == t.Field && f.Experimenter == t.Experimenter {
				out.Fields = append(out.Fields, f)
			}
		}
	}
	return out
}

// HandlePacketIn implements feature.PacketInHandler: it holds the packet
// and asks for pods once per wait cycle.
func (u *Unidler) HandlePacketIn(pi feature.PacketIn) {
	u.m.packetIns.Inc()
	pin := pi.Msg
	if pi.Bridge != plan.Pod {
		u.m.dropped.WithLabelValues("bridge").Inc()
		return
	}
	id, err := idlingflows.ParseUserdata(pin.Userdata)
	if err != nil {
		u.m.dropped.WithLabelValues("malformed").Inc()
		return
	}
	now := u.opts.Now()
	u.mu.Lock()
	p := u.byID[id]
	if p == nil {
		r, late := u.recent[id]
		u.mu.Unlock()
		if late && now.Sub(r.at) < lateWindow {
			// A port released a moment ago: the datapath still had a
			// cached flow of its catch flows (OVS revalidates them
			// after the flow table changed, not at the barrier), and
			// the packet, new or just re-injected, came here again.
			// It goes back like the held ones.
			u.m.late.Inc()
			select {
			case u.release <- releaseReq{name: r.name, held: []held{{pin: pin, at: now}}, reject: !r.ready}:
			default:
				u.m.dropped.WithLabelValues("release-queue").Inc()
			}
			return
		}
		// Not a port idled now or a moment ago.
		u.m.dropped.WithLabelValues("not-idled").Inc()
		return
	}
	k, isTCP := tcpSegment(pin)
	if isTCP && p.seen[k] {
		u.mu.Unlock()
		u.m.dropped.WithLabelValues("retransmit").Inc()
		return
	}
	size := len(pin.Data)
	switch {
	case len(p.held) >= u.opts.PortPackets || p.bytes+size > u.opts.PortBytes:
		u.mu.Unlock()
		u.m.dropped.WithLabelValues("port-full").Inc()
		return
	case u.packets >= u.opts.TotalPackets || u.bytes+size > u.opts.TotalBytes:
		u.mu.Unlock()
		u.m.dropped.WithLabelValues("total-full").Inc()
		return
	}
	if isTCP {
		p.seen[k] = true
	}
	p.held = append(p.held, held{pin: pin, at: now})
	p.bytes += size
	u.packets++
	u.bytes += size
	ask := !p.waiting
	if ask {
		p.waiting, p.first = true, now
	}
	name := p.name
	u.m.setHeld(u.packets, u.bytes)
	u.mu.Unlock()
	if ask {
		u.needPods(name)
	}
}

// needPods emits the NeedPods event of a port on its Service.
func (u *Unidler) needPods(name service.ServicePortName) {
	obj, ok, err := u.svcs.GetByKey(name.NamespacedName.String())
	if err == nil && !ok {
		err = fmt.Errorf("service %s not found", name.NamespacedName)
	}
	var svc metav1.Object
	if err == nil {
		svc, err = meta.Accessor(obj)
	}
	if err != nil {
		u.log.WithError(err).WithField("service", name.String()).Warn("cannot ask for pods: no Service")
		return
	}
	ref := &corev1.Service{}
	ref.Namespace, ref.Name, ref.UID, ref.ResourceVersion = svc.GetNamespace(), svc.GetName(), svc.GetUID(), svc.GetResourceVersion()
	ref.Kind, ref.APIVersion = "Service", "v1"
	u.h.Recorder().Eventf(ref, corev1.EventTypeNormal, EventReason, "The service-port %s/%s:%s needs pods.", name.Namespace, name.Name, name.Port)
	u.m.needPods.Inc()
	u.log.WithField("service", name.String()).Info("asked for pods")
}

// expire answers the packets held past the hold time, and starts a new
// wait cycle for a port whose packets all expired.
func (u *Unidler) expire() {
	now := u.opts.Now()
	var out []*openflow.PacketIn
	u.mu.Lock()
	for _, p := range u.byName {
		n := 0
		for n < len(p.held) && now.Sub(p.held[n].at) >= u.opts.HoldTime {
			out = append(out, p.held[n].pin)
			p.bytes -= len(p.held[n].pin.Data)
			n++
		}
		if n == 0 {
			continue
		}
		p.held = append(p.held[:0], p.held[n:]...)
		u.packets -= n
		if len(p.held) == 0 {
			p.waiting = false
			clear(p.seen)
		}
	}
	u.bytes = 0
	for _, p := range u.byName {
		u.bytes += p.bytes
	}
	for id, r := range u.recent {
		if now.Sub(r.at) >= lateWindow {
			delete(u.recent, id)
		}
	}
	u.m.setHeld(u.packets, u.bytes)
	u.mu.Unlock()
	for _, pin := range out {
		u.m.expired.Inc()
		if u.opts.Reject != nil {
			u.opts.Reject(pin)
		}
	}
}

// tcpSegment returns the key of a TCP segment's frame.
func tcpSegment(pin *openflow.PacketIn) (segmentKey, bool) {
	f := pin.Data
	if len(f) < 14 {
		return segmentKey{}, false
	}
	k := segmentKey{inPort: pin.InPort()}
	var l4 []byte
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0800:
		ip := f[14:]
		if len(ip) < 20 || ip[9] != 6 {
			return k, false
		}
		ihl := int(ip[0]&0x0f) * 4
		if len(ip) < ihl+20 {
			return k, false
		}
		k.src, k.dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		l4 = ip[ihl:]
	case 0x86dd:
		ip := f[14:]
		if len(ip) < 60 || ip[6] != 6 {
			return k, false
		}
		k.src, k.dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		l4 = ip[40:]
	default:
		return k, false
	}
	k.sport, k.dport = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
	k.seq = binary.BigEndian.Uint32(l4[4:8])
	off := int(l4[12]>>4) * 4
	k.synOnly = l4[13]&0x02 != 0
	k.payload = off < len(l4)
	return k, true
}

// metrics are the feature's Prometheus metrics.
type metrics struct {
	packetIns, needPods, released, expired, rejected, late prometheus.Counter
	dropped                                                *prometheus.CounterVec
	heldPackets, heldBytes, idled                          prometheus.Gauge
	holdTime, unidle                                       prometheus.Histogram
}

func newMetrics() *metrics {
	buckets := []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120}
	return &metrics{
		packetIns:   feature.NewCounter("nodeflow_unidle_packet_ins_total", "Packet-ins of new connections to idled service ports."),
		needPods:    feature.NewCounter("nodeflow_unidle_needpods_events_total", "NeedPods events emitted (one per wait cycle per port)."),
		released:    feature.NewCounter("nodeflow_unidle_released_packets_total", "Held packets re-injected into br0's pipeline."),
		expired:     feature.NewCounter("nodeflow_unidle_expired_packets_total", "Held packets answered as a service without endpoints after the hold time."),
		rejected:    feature.NewCounter("nodeflow_unidle_rejected_packets_total", "Held packets answered as a service without endpoints because their Service was deleted."),
		late:        feature.NewCounter("nodeflow_unidle_late_packets_total", "Packet-ins of a port released a moment ago (a datapath flow not yet revalidated), sent on like its held packets."),
		dropped:     feature.NewCounterVec("nodeflow_unidle_dropped_packets_total", "Packet-ins of idled ports not held, by cause (retransmit, port-full, total-full, not-idled, malformed, bridge, reinject-error, release-queue).", "cause"),
		heldPackets: feature.NewGauge("nodeflow_unidle_held_packets", "Packets held for idled service ports."),
		heldBytes:   feature.NewGauge("nodeflow_unidle_held_bytes", "Bytes held for idled service ports."),
		idled:       feature.NewGauge("nodeflow_unidle_idled_ports", "Idled service ports whose connections are caught."),
		holdTime:    feature.NewHistogram("nodeflow_unidle_hold_seconds", "How long a re-injected packet was held.", buckets),
		unidle:      feature.NewHistogram("nodeflow_unidle_duration_seconds", "From a port's first held packet to its release.", buckets),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	if err := feature.Register(r, m.packetIns, m.needPods, m.released, m.expired, m.rejected, m.late, m.dropped, m.heldPackets, m.heldBytes, m.idled, m.holdTime, m.unidle); err != nil {
		return err
	}
	for _, c := range []string{"retransmit", "port-full", "total-full", "not-idled", "malformed", "bridge", "reinject-error", "release-queue"} {
		m.dropped.WithLabelValues(c)
	}
	return nil
}

func (m *metrics) setHeld(packets, bytes int) {
	m.heldPackets.Set(float64(packets))
	m.heldBytes.Set(float64(bytes))
}
