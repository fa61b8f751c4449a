package networkpolicyfeature

import (
	"errors"
	"net/netip"

	"github.com/sirupsen/logrus"

	"nodeflow/agent/feature"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/packet"
)

// LogAnnotation on a namespace turns on the log of the packets its pods'
// policies deny: "deny" logs a metered sample of them (punt.Rates: 10
// packets a second per source port, 20 per namespace, 100 for the node),
// one line each, with the pod, the direction and the packet's addresses
// and ports. Any other value, or
// none, logs nothing. The denied packets are counted either way.
const LogAnnotation = "nodeflow.io/network-policy-log"

// logsDenied reports whether a namespace's annotations ask for the log.
func logsDenied(annotations map[string]string) bool { return annotations[LogAnnotation] == "deny" }

// PacketIns implements feature.PacketInHandler: the denied packets'
// samples.
func (f *Feature) PacketIns() []feature.PacketInCategory {
	return []feature.PacketInCategory{{Category: plan.PacketInPolicyDenied, Queue: 256}}
}

// Denied is one denied packet, as the log tells it.
type Denied struct {
	Direction      networkpolicyflows.Direction
	Namespace, Pod string
	Protocol       string
	Src, Dst       netip.AddrPort
}

// HandlePacketIn implements feature.PacketInHandler: it logs the sample.
func (f *Feature) HandlePacketIn(p feature.PacketIn) {
	d, ok := f.denied(p)
	if !ok {
		return
	}
	f.log.WithFields(logrus.Fields{
		"verdict": "deny", "direction": d.Direction.String(), "namespace": d.Namespace, "pod": d.Pod,
		"protocol": d.Protocol, "src": d.Src.String(), "dst": d.Dst.String(),
	}).Info("NetworkPolicy denied a packet")
}

// denied decodes a sample: the pod from the drop flow's cookie, the rest
// from the packet.
func (f *Feature) denied(p feature.PacketIn) (Denied, bool) {
	m := p.Msg
	d := Denied{Direction: networkpolicyflows.Ingress}
	if plan.TableID(m.Table) == plan.PodEgressPolicy {
		d.Direction = networkpolicyflows.Egress
	}
	f.idxMu.RLock()
	ns, name, ok := f.idx.PodOfOwnerHash(plan.Cookie(m.Cookie).OwnerHash())
	f.idxMu.RUnlock()
	if !ok {
		return d, false
	}
	d.Namespace, d.Pod = ns, name
	ip, err := packet.Decode(m.Data)
	if err != nil && !errors.Is(err, packet.ErrFragment) {
		return d, false
	}
	// A fragment's transport header is in its first fragment alone: its
	// sample is logged with the addresses and no ports.
	d.Protocol = packet.ProtoName(ip.Proto)
	sport, dport, _ := ip.Ports()
	d.Src, d.Dst = netip.AddrPortFrom(ip.Src, sport), netip.AddrPortFrom(ip.Dst, dport)
	return d, true
}
