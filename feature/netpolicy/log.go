package netpolicy

import (
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/sirupsen/logrus"

	"nodeflow/feature"
	"nodeflow/flows/plan"
	"nodeflow/flows/policy"
)

// LogAnnotation on a namespace turns on the log of the packets its pods'
// policies deny: "deny" logs a metered sample of them (policy.LogMeterRate
// packets a second for the node), one line each, with the pod, the
// direction and the packet's addresses and ports. Any other value, or
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
	Direction      policy.Direction
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
	d := Denied{Direction: policy.Ingress}
	if plan.TableID(m.Table) == plan.PodEgressPolicy {
		d.Direction = policy.Egress
	}
	f.idxMu.RLock()
	ns, name, ok := f.idx.PodOfOwnerHash(plan.Cookie(m.Cookie).OwnerHash())
	f.idxMu.RUnlock()
	if !ok {
		return d, false
	}
	d.Namespace, d.Pod = ns, name
	pkt := gopacket.NewPacket(m.Data, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	var src, dst netip.Addr
	switch ip := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		src, _ = netip.AddrFromSlice(ip.SrcIP.To4())
		dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
		d.Protocol = ip.Protocol.String()
	case *layers.IPv6:
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
		d.Protocol = ip.NextHeader.String()
	default:
		return d, false
	}
	var sport, dport uint16
	switch l4 := pkt.TransportLayer().(type) {
	case *layers.TCP:
		sport, dport, d.Protocol = uint16(l4.SrcPort), uint16(l4.DstPort), "TCP"
	case *layers.UDP:
		sport, dport, d.Protocol = uint16(l4.SrcPort), uint16(l4.DstPort), "UDP"
	case *layers.SCTP:
		sport, dport, d.Protocol = uint16(l4.SrcPort), uint16(l4.DstPort), "SCTP"
	}
	d.Src, d.Dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	return d, true
}
