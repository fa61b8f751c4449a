package nodefeature

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"nodeflow/agent/feature"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/lib/packet"
)

// TunnelWarmInterval is how often the userspace datapath's tunnel
// neighbours are asked again for their MACs.
//
// ovs-vswitchd's userspace tunnels do not use the kernel's neighbour table:
// they take the MAC of a VXLAN packet's next hop from a cache of their
// own, which learns it only from ARP replies that cross the bridge, and
// forgets an entry 15 minutes after a flow translation last used it. A
// packet that finds no entry is dropped while ovs-vswitchd sends an ARP
// request. So the first packet to every other node after ovs-vswitchd
// starts would be lost, and again after any quiet quarter of an hour. The
// agent keeps the cache filled instead: it sends each neighbour of the
// gateway bridge, and each other node on the node's subnets, an ARP
// request from the node's address through the uplink, once the gateway
// bridge has its flows after a connection and every TunnelWarmInterval
// after, and ovs-vswitchd learns the MAC from the reply. The kernel
// datapath resolves tunnel next hops with the kernel's table and needs
// none of this.
const TunnelWarmInterval = 5 * time.Minute

// tunnelWarmer sends those ARP requests from a goroutine of its own, so
// that the switch's round trips never hold up the feature's loop.
type tunnelWarmer struct {
	h    feature.Host
	log  logrus.FieldLogger
	sent prometheus.Counter
	kick chan struct{}

	mu          sync.Mutex
	hops        []plan.NextHop // the latest next hops, from syncHops
	tunnels     []netip.Addr   // the other nodes' tunnel addresses
	reconnected bool           // the gateway bridge is ready after a connection
	everReady   bool           // it has been once: nothing is sent before

	// Owned by run: when each neighbour was last asked, and the last MAC
	// the host's neighbour table gave it (which ovs-vswitchd's restart
	// empties along with breth0's tap device).
	warmed map[netip.Addr]time.Time
	macs   map[netip.Addr]net.HardwareAddr
}

func newTunnelWarmer(h feature.Host, log logrus.FieldLogger) *tunnelWarmer {
	return &tunnelWarmer{
		h: h, log: log, kick: make(chan struct{}, 1), warmed: map[netip.Addr]time.Time{}, macs: map[netip.Addr]net.HardwareAddr{},
		sent: feature.NewCounter("nodeflow_tunnel_neighbour_probes_total", "ARP requests the agent sent to the gateway bridge's neighbours so that the userspace datapath's tunnels know their MACs."),
	}
}

// offer hands over the current next hops and the other nodes' tunnel
// addresses.
func (w *tunnelWarmer) offer(hops []plan.NextHop, tunnels []netip.Addr) {
	w.mu.Lock()
	w.hops, w.tunnels = hops, tunnels
	w.mu.Unlock()
	poke(w.kick)
}

// ready notes that bridge b holds the agent's flows after a connection:
// on the gateway bridge, ovs-vswitchd may have restarted with an empty
// cache, and the replies now find the flows that take them.
func (w *tunnelWarmer) ready(b plan.Bridge) {
	if b != plan.Gateway {
		return
	}
	w.mu.Lock()
	w.reconnected, w.everReady = true, true
	w.mu.Unlock()
	poke(w.kick)
}

// run sends the requests that are due whenever it is kicked, and checks
// again every minute.
func (w *tunnelWarmer) run(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-t.C:
		}
		w.warm(ctx, time.Now())
	}
}

// warm sends an ARP request to every IPv4 neighbour of the gateway bridge
// and every other node on the node's subnets that was not asked within
// TunnelWarmInterval, and to all of them once the gateway bridge has its
// flows back after a connection. A neighbour is asked at its MAC (the
// host's neighbour table's, or the last one it gave), by broadcast when
// none is known.
func (w *tunnelWarmer) warm(ctx context.Context, now time.Time) {
	w.mu.Lock()
	hops, tunnels, again, ever := w.hops, w.tunnels, w.reconnected, w.everReady
	w.reconnected = false
	w.mu.Unlock()
	if !ever {
		return
	}
	if again {
		clear(w.warmed)
	}
	nd := w.h.Node()
	targets := map[netip.Addr]bool{}
	for _, hop := range hops {
		if ip := hop.Prefix.Addr(); hop.Prefix.IsSingleIP() && ip.Is4() && len(hop.MAC) == 6 {
			targets[ip] = true
			w.macs[ip] = hop.MAC
		}
	}
	for _, ip := range tunnels {
		if _, onLink, ok := sourceFor(nd.IPs, ip); ok && onLink {
			targets[ip] = true
		}
	}
	for ip := range w.macs {
		if !targets[ip] {
			delete(w.macs, ip)
		}
	}
	for ip := range w.warmed {
		if !targets[ip] {
			delete(w.warmed, ip)
		}
	}
	var msgs []openflow.Message
	var ips []netip.Addr
	for _, ip := range slices.SortedFunc(maps.Keys(targets), netip.Addr.Compare) {
		if last, ok := w.warmed[ip]; ok && now.Sub(last) < TunnelWarmInterval {
			continue
		}
		src, _, ok := sourceFor(nd.IPs, ip)
		if !ok {
			continue
		}
		mac := w.macs[ip]
		if mac == nil {
			mac = broadcastMAC
		}
		data, err := packet.ARPRequest(nd.HostMAC, mac, src, ip)
		if err != nil {
			w.log.WithError(err).WithField("neighbour", ip).Debug("tunnel neighbour probe not built")
			continue
		}
		msgs = append(msgs, &openflow.PacketOut{InPort: openflow.PortLocal,
			Actions: []openflow.Action{openflow.OutputPort(nd.Ports.Uplink)}, Data: data})
		ips = append(ips, ip)
	}
	if len(msgs) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.h.Send(sctx, plan.Gateway, msgs...); err != nil {
		// Tried again at the next kick or tick.
		w.log.WithError(err).Debug("tunnel neighbour probes not sent")
		return
	}
	w.sent.Add(float64(len(msgs)))
	w.log.WithFields(logrus.Fields{"neighbours": ips, "reconnected": again}).Debug("tunnel neighbours asked for their MACs")
	for _, ip := range ips {
		w.warmed[ip] = now
	}
}

// sourceFor returns the node's IPv4 address for asking dst: the one whose
// subnet holds dst (onLink), or else its first; false when dst is not
// IPv4 or the node has no IPv4 address.
func sourceFor(ips []netip.Prefix, dst netip.Addr) (src netip.Addr, onLink, ok bool) {
	if !dst.Is4() {
		return netip.Addr{}, false, false
	}
	for _, p := range ips {
		if !p.Addr().Is4() {
			continue
		}
		if p.Contains(dst) {
			return p.Addr(), true, true
		}
		if !src.IsValid() {
			src = p.Addr()
		}
	}
	return src, false, src.IsValid()
}

// broadcastMAC is the Ethernet broadcast address.
var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
