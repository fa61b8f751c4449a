package dnsmsg

import (
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/miekg/dns"
)

var (
	podMAC  = net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x05}
	gwMAC   = net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x01}
	dns4    = netip.MustParseAddr("10.96.0.10")
	pod4    = netip.MustParseAddr("10.128.0.5")
	dns6    = netip.MustParseAddr("fd00:10:96::a")
	pod6    = netip.MustParseAddr("fd00:10:128::5")
	srcPort = uint16(53)
	dstPort = uint16(40000)
)

// reply builds a DNS response to one question with the given answer
// records, in presentation form ("www.example.com. 60 IN A 192.0.2.1").
func reply(t testing.TB, qname string, qtype uint16, answers ...string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.Id = 0x1234
	m.Response = true
	m.RecursionAvailable = true
	for _, a := range answers {
		rr, err := dns.NewRR(a)
		if err != nil {
			t.Fatalf("record %q: %v", a, err)
		}
		m.Answer = append(m.Answer, rr)
	}
	return m
}

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("pack: %v", err)
	}
	return b
}

// frameOpts changes how frame builds its packet.
type frameOpts struct {
	vlan    bool
	ipv6    bool
	hopOpts bool // an IPv6 hop-by-hop options header before UDP
	srcPort uint16
}

// frame wraps a DNS payload in UDP, IP and Ethernet, with gopacket.
func frame(t testing.TB, payload []byte, o frameOpts) []byte {
	t.Helper()
	if o.srcPort == 0 {
		o.srcPort = srcPort
	}
	eth := &layers.Ethernet{SrcMAC: gwMAC, DstMAC: podMAC, EthernetType: layers.EthernetTypeIPv4}
	var ls []gopacket.SerializableLayer
	ls = append(ls, eth)
	if o.vlan {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4})
	}
	udp := &layers.UDP{SrcPort: layers.UDPPort(o.srcPort), DstPort: layers.UDPPort(dstPort)}
	var netLayer gopacket.NetworkLayer
	if o.ipv6 {
		if o.vlan {
			ls[1].(*layers.Dot1Q).Type = layers.EthernetTypeIPv6
		} else {
			eth.EthernetType = layers.EthernetTypeIPv6
		}
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: dns6.AsSlice(), DstIP: pod6.AsSlice()}
		ls = append(ls, ip)
		if o.hopOpts {
			ip.NextHeader = layers.IPProtocolIPv6HopByHop
			// PadN: type 1, length 4, four zero bytes: 8 bytes in all.
			hbh := &layers.IPv6HopByHop{}
			hbh.NextHeader = layers.IPProtocolUDP
			hbh.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: make([]byte, 4)}}
			ls = append(ls, hbh)
		}
		netLayer = ip
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: dns4.AsSlice(), DstIP: pod4.AsSlice()}
		ls = append(ls, ip)
		netLayer = ip
	}
	if err := udp.SetNetworkLayerForChecksum(netLayer); err != nil {
		t.Fatal(err)
	}
	ls = append(ls, udp, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// gopacketUDP decodes a frame with gopacket, as an independent oracle:
// the UDP layer's ports and payload, and the IP addresses.
func gopacketUDP(frame []byte) (d Datagram, ok bool) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true, Lazy: false})
	// Metadata().Truncated is not used: gopacket sets it wrongly for an
	// IPv6 packet with a hop-by-hop header. The UDP length tells.
	if p.ErrorLayer() != nil {
		return d, false
	}
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if udp == nil || int(udp.Length) != len(udp.Payload)+8 {
		return d, false
	}
	var src, dst netip.Addr
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
	case *layers.IPv6:
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
	default:
		return d, false
	}
	return Datagram{
		Src:     netip.AddrPortFrom(src, uint16(udp.SrcPort)),
		Dst:     netip.AddrPortFrom(dst, uint16(udp.DstPort)),
		Payload: udp.Payload,
	}, true
}

// IP protocol numbers the tests put in headers.
const (
	protoUDP      = 17
	protoFragment = 44
	protoDestOpts = 60
)
