package sample

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// segment is one TCP segment in an Ethernet frame, optionally carried in
// VXLAN between two nodes.
type segment struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.AddrPort
	syn, ack       bool
	// tunnel is set for a VXLAN-encapsulated segment.
	tunnel *underlay
}

// underlay is the outer part of a VXLAN frame.
type underlay struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.Addr
	vni            uint32
}

func (s segment) String() string {
	flags := ""
	if s.syn {
		flags += "S"
	}
	if s.ack {
		flags += "A"
	}
	out := fmt.Sprintf("%s > %s [%s] %s > %s", s.srcMAC, s.dstMAC, flags, s.src, s.dst)
	if s.tunnel != nil {
		out = fmt.Sprintf("vxlan vni %#x %s > %s (%s)", s.tunnel.vni, s.tunnel.src, s.tunnel.dst, out)
	}
	return out
}

// reply is the segment the receiver of s answers with: addresses, ports
// and MACs swapped, SYN+ACK, in the same tunnel turned around.
func (s segment) reply() segment {
	r := segment{srcMAC: s.dstMAC, dstMAC: s.srcMAC, src: s.dst, dst: s.src, syn: true, ack: true}
	if u := s.tunnel; u != nil {
		r.tunnel = &underlay{srcMAC: u.dstMAC, dstMAC: u.srcMAC, src: u.dst, dst: u.src, vni: u.vni}
	}
	return r
}

// frame serializes s with correct lengths and checksums (the userspace
// conntrack checks them).
func (s segment) frame(t *testing.T) []byte {
	t.Helper()
	ls := ipLayers(s.srcMAC, s.dstMAC, s.src.Addr(), s.dst.Addr(), layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: layers.TCPPort(s.src.Port()), DstPort: layers.TCPPort(s.dst.Port()),
		Seq: 1000, SYN: s.syn, ACK: s.ack, Window: 65535}
	if s.ack {
		tcp.Ack = 1001
	}
	if err := tcp.SetNetworkLayerForChecksum(ls[1].(gopacket.NetworkLayer)); err != nil {
		t.Fatal(err)
	}
	ls = append(ls, tcp)
	if u := s.tunnel; u != nil {
		outer := ipLayers(u.srcMAC, u.dstMAC, u.src, u.dst, layers.IPProtocolUDP)
		udp := &layers.UDP{SrcPort: 49152, DstPort: 4789}
		if err := udp.SetNetworkLayerForChecksum(outer[1].(gopacket.NetworkLayer)); err != nil {
			t.Fatal(err)
		}
		ls = append(append(outer, udp, &layers.VXLAN{ValidIDFlag: true, VNI: u.vni}), ls...)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func ipLayers(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, proto layers.IPProtocol) []gopacket.SerializableLayer {
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
	if src.Is6() {
		eth.EthernetType = layers.EthernetTypeIPv6
		return []gopacket.SerializableLayer{eth, &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}}
	}
	return []gopacket.SerializableLayer{eth, &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}}
}

// parseSegment decodes a frame into a segment; ok is false for anything
// but TCP over IPv4 or IPv6, bare or in VXLAN.
func parseSegment(frame []byte) (segment, bool) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil {
		return segment{}, false
	}
	if vx, _ := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN); vx != nil {
		src, dst, ok := ipAddrs(p)
		if !ok {
			return segment{}, false
		}
		inner, ok := parseSegment(vx.Payload)
		if !ok {
			return segment{}, false
		}
		inner.tunnel = &underlay{srcMAC: eth.SrcMAC, dstMAC: eth.DstMAC, src: src, dst: dst, vni: vx.VNI}
		return inner, true
	}
	tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	src, dst, ok := ipAddrs(p)
	if tcp == nil || !ok {
		return segment{}, false
	}
	return segment{srcMAC: eth.SrcMAC, dstMAC: eth.DstMAC,
		src: netip.AddrPortFrom(src, uint16(tcp.SrcPort)), dst: netip.AddrPortFrom(dst, uint16(tcp.DstPort)),
		syn: tcp.SYN, ack: tcp.ACK}, true
}

// ipAddrs returns the first (outermost) IP header's addresses.
func ipAddrs(p gopacket.Packet) (src, dst netip.Addr, ok bool) {
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		src, _ = netip.AddrFromSlice(ip.SrcIP.To4())
		dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
		return src, dst, true
	case *layers.IPv6:
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
		return src, dst, true
	}
	return src, dst, false
}
