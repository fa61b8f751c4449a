package packet

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var (
	macA = net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x05}
	macB = net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x01}
	v4a  = netip.MustParseAddr("10.128.0.5")
	v4b  = netip.MustParseAddr("192.0.2.7")
	v6a  = netip.MustParseAddr("fd00:10:128::5")
	v6b  = netip.MustParseAddr("2001:db8::7")
)

// build is what a test frame carries.
type build struct {
	ipv6    bool
	vlan    int // tags, 0 to 3
	proto   layers.IPProtocol
	hopOpts bool // an IPv6 hop-by-hop options header first
	payload []byte
}

// frame builds a frame with gopacket, the independent implementation.
func frame(t testing.TB, b build) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB}
	ls := []gopacket.SerializableLayer{eth}
	inner := layers.EthernetTypeIPv4
	if b.ipv6 {
		inner = layers.EthernetTypeIPv6
	}
	eth.EthernetType = inner
	for i := range b.vlan {
		tag := &layers.Dot1Q{VLANIdentifier: uint16(7 + i), Type: inner}
		if i == 0 {
			eth.EthernetType = layers.EthernetTypeDot1Q
		}
		if i > 0 {
			ls[len(ls)-1].(*layers.Dot1Q).Type = layers.EthernetTypeDot1Q
		}
		ls = append(ls, tag)
	}
	var nl gopacket.NetworkLayer
	if b.ipv6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: v6a.AsSlice(), DstIP: v6b.AsSlice(), NextHeader: b.proto}
		ls = append(ls, ip)
		if b.hopOpts {
			ip.NextHeader = layers.IPProtocolIPv6HopByHop
			hop := &layers.IPv6HopByHop{}
			hop.NextHeader = b.proto
			hop.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}
			ls = append(ls, hop)
		}
		nl = ip
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, SrcIP: v4a.AsSlice(), DstIP: v4b.AsSlice(), Protocol: b.proto}
		ls = append(ls, ip)
		nl = ip
	}
	switch b.proto {
	case layers.IPProtocolTCP:
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 443, SYN: true, Window: 1000}
		if err := tcp.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, tcp)
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: 40000, DstPort: 53}
		if err := udp.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, udp)
	case layers.IPProtocolSCTP:
		ls = append(ls, &layers.SCTP{SrcPort: 40000, DstPort: 3868, VerificationTag: 1})
	case layers.IPProtocolICMPv4:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 1})
	}
	ls = append(ls, gopacket.Payload(b.payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return slices.Clone(buf.Bytes())
}

// set returns a copy of b with b[i] = v for each pair.
func set(b []byte, kv ...int) []byte {
	b = slices.Clone(b)
	for i := 0; i+1 < len(kv); i += 2 {
		b[kv[i]] = byte(kv[i+1])
	}
	return b
}

func TestDecode(t *testing.T) {
	payload := []byte("hello, switch")
	for _, tc := range []struct {
		name           string
		b              build
		src, dst       netip.Addr
		proto          uint8
		sport, dport   uint16
		ports          bool
		transportBytes int // header and payload
	}{
		{"ipv4 tcp", build{proto: layers.IPProtocolTCP, payload: payload}, v4a, v4b, ProtoTCP, 40000, 443, true, 20 + len(payload)},
		{"ipv4 udp in a vlan", build{proto: layers.IPProtocolUDP, vlan: 1, payload: payload}, v4a, v4b, ProtoUDP, 40000, 53, true, 8 + len(payload)},
		{"ipv4 sctp in two vlans", build{proto: layers.IPProtocolSCTP, vlan: 2, payload: payload}, v4a, v4b, ProtoSCTP, 40000, 3868, true, 12 + len(payload)},
		{"ipv4 icmp", build{proto: layers.IPProtocolICMPv4}, v4a, v4b, 1, 0, 0, false, 8},
		{"ipv6 tcp", build{ipv6: true, proto: layers.IPProtocolTCP, payload: payload}, v6a, v6b, ProtoTCP, 40000, 443, true, 20 + len(payload)},
		{"ipv6 udp after hop-by-hop options", build{ipv6: true, hopOpts: true, proto: layers.IPProtocolUDP, payload: payload}, v6a, v6b, ProtoUDP, 40000, 53, true, 8 + len(payload)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := frame(t, tc.b)
			ip, err := Decode(f)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if ip.Src != tc.src || ip.Dst != tc.dst || ip.Proto != tc.proto || len(ip.Transport) != tc.transportBytes {
				t.Fatalf("got %v -> %v proto %d, %d transport bytes; want %v -> %v proto %d, %d",
					ip.Src, ip.Dst, ip.Proto, len(ip.Transport), tc.src, tc.dst, tc.proto, tc.transportBytes)
			}
			sport, dport, ok := ip.Ports()
			if ok != tc.ports || sport != tc.sport || dport != tc.dport {
				t.Fatalf("Ports() = %d, %d, %v; want %d, %d, %v", sport, dport, ok, tc.sport, tc.dport, tc.ports)
			}
			// Ethernet padding after the IP packet is not transport.
			if p, err := Decode(append(slices.Clone(f), make([]byte, 20)...)); err != nil || len(p.Transport) != tc.transportBytes {
				t.Fatalf("padded frame: %v, %d transport bytes", err, len(p.Transport))
			}
			// Every prefix shorter than the IP packet fails as cut short,
			// never panics (gopacket pads a short frame to 60 bytes).
			end := cap(f) - cap(ip.Transport) + len(ip.Transport)
			for n := range end {
				if _, err := Decode(f[:n]); !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("frame cut to %d of %d bytes: %v, want unexpected EOF", n, len(f), err)
				}
			}
			if a := testing.AllocsPerRun(100, func() { _, _ = Decode(f) }); a != 0 {
				t.Errorf("Decode allocates %v times a frame, want 0", a)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	const ip = 14 // the IP header's offset
	v4 := frame(t, build{proto: layers.IPProtocolTCP})
	v6 := frame(t, build{ipv6: true, proto: layers.IPProtocolUDP})
	// fragment6 inserts an IPv6 fragment header with the given offset and
	// flags word before UDP.
	fragment6 := func(offFlags uint16) []byte {
		f := slices.Clone(v6[:ip+40])
		f[ip+6] = protoFragment
		plen := int(f[ip+4])<<8 | int(f[ip+5]) + 8
		f[ip+4], f[ip+5] = byte(plen>>8), byte(plen)
		f = append(f, ProtoUDP, 0, byte(offFlags>>8), byte(offFlags), 0, 0, 0, 1)
		return append(f, v6[ip+40:]...)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"arp", set(v4, 12, 0x08, 13, 0x06), ErrNotIP},
		{"three vlan tags", frame(t, build{proto: layers.IPProtocolTCP, vlan: 3}), ErrInvalid},
		{"ipv4 more fragments", set(v4, ip+6, 0x20), ErrFragment},
		{"ipv4 fragment offset", set(v4, ip+7, 0x10), ErrFragment},
		{"ipv4 version 6", set(v4, ip, 0x65), ErrInvalid},
		{"ipv4 header length 4 words", set(v4, ip, 0x44), ErrInvalid},
		{"ipv4 total length shorter than its header", set(v4, ip+2, 0, ip+3, 16), ErrInvalid},
		{"ipv4 total length past the frame", set(v4, ip+3, 0x43), io.ErrUnexpectedEOF},
		{"ipv6 payload length 0", set(v6, ip+4, 0, ip+5, 0), ErrInvalid},
		{"ipv6 version 4", set(v6, ip, 0x40), ErrInvalid},
		{"ipv6 fragment, more follow", fragment6(0x0001), ErrFragment},
		{"ipv6 fragment at offset 8", fragment6(0x0008), ErrFragment},
		{"ipv6 extension header past the packet", set(v6, ip+6, protoDestOpts, ip+40+1, 200), io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Decode(tc.frame)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode: %v, want %v", err, tc.want)
			}
			if errors.Is(err, ErrFragment) && (!p.Src.IsValid() || !p.Dst.IsValid() || p.Proto == 0 || p.Transport != nil) {
				t.Fatalf("a fragment gives %+v, want its addresses and protocol, no transport", p)
			}
		})
	}
	t.Run("ipv6 atomic fragment is whole", func(t *testing.T) {
		p, err := Decode(fragment6(0))
		if err != nil || p.Proto != ProtoUDP || len(p.Transport) != 8 {
			t.Fatalf("%v, %+v", err, p)
		}
	})
	t.Run("error names the field", func(t *testing.T) {
		_, err := Decode(set(v4, ip, 0x44))
		if err == nil || err.Error() != "ipv4 header length 16 bytes, less than 20: invalid value" {
			t.Fatalf("error %q", err)
		}
	})
}

func TestProtoName(t *testing.T) {
	for proto, want := range map[uint8]string{ProtoTCP: "TCP", ProtoUDP: "UDP", ProtoSCTP: "SCTP", 1: "ICMP", 58: "IPv6-ICMP", 47: "47"} {
		if got := ProtoName(proto); got != want {
			t.Errorf("ProtoName(%d) = %q, want %q", proto, got, want)
		}
	}
}

// TestARPRequest: gopacket reads the frame as the ARP request it is.
func TestARPRequest(t *testing.T) {
	b, err := ARPRequest(macA, macB, v4a, v4b)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != ARPRequestLen {
		t.Fatalf("%d bytes, want %d", len(b), ARPRequestLen)
	}
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	arp, _ := pkt.Layer(layers.LayerTypeARP).(*layers.ARP)
	if eth == nil || arp == nil {
		t.Fatalf("gopacket reads %v", pkt)
	}
	if eth.SrcMAC.String() != macA.String() || eth.DstMAC.String() != macB.String() || eth.EthernetType != layers.EthernetTypeARP ||
		arp.AddrType != layers.LinkTypeEthernet || arp.Protocol != layers.EthernetTypeIPv4 || arp.Operation != layers.ARPRequest ||
		net.HardwareAddr(arp.SourceHwAddress).String() != macA.String() || net.IP(arp.SourceProtAddress).String() != v4a.String() ||
		net.HardwareAddr(arp.DstHwAddress).String() != "00:00:00:00:00:00" || net.IP(arp.DstProtAddress).String() != v4b.String() {
		t.Fatalf("gopacket reads %v", pkt)
	}
	for _, bad := range [][2]netip.Addr{{v6a, v4b}, {v4a, v6b}} {
		if _, err := ARPRequest(macA, macB, bad[0], bad[1]); err == nil {
			t.Errorf("ARPRequest(%v, %v): no error", bad[0], bad[1])
		}
	}
	if _, err := ARPRequest(macA[:4], macB, v4a, v4b); err == nil {
		t.Error("ARPRequest with a 4-byte MAC: no error")
	}
}

// FuzzDecode checks that no frame makes Decode panic, that its errors say
// which sentinel they are, and that it agrees with gopacket on the
// addresses, the protocol and the ports whenever both read the packet.
func FuzzDecode(f *testing.F) {
	for _, b := range []build{
		{proto: layers.IPProtocolTCP, payload: []byte("x")},
		{proto: layers.IPProtocolUDP, vlan: 2},
		{ipv6: true, hopOpts: true, proto: layers.IPProtocolSCTP},
		{ipv6: true, proto: layers.IPProtocolTCP},
		{proto: layers.IPProtocolICMPv4},
	} {
		f.Add(frame(f, b))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrNotIP) && !errors.Is(err, ErrFragment) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q wraps no sentinel", err)
			}
			return
		}
		pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: false, NoCopy: true})
		if pkt.ErrorLayer() != nil {
			return
		}
		var src, dst netip.Addr
		switch ip := pkt.NetworkLayer().(type) {
		case *layers.IPv4:
			src, _ = netip.AddrFromSlice(ip.SrcIP.To4())
			dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
		case *layers.IPv6:
			src, _ = netip.AddrFromSlice(ip.SrcIP)
			dst, _ = netip.AddrFromSlice(ip.DstIP)
		default:
			return
		}
		if !src.IsValid() || !dst.IsValid() {
			return // gopacket gave up on the header (IPv4 options it refuses)
		}
		if src != p.Src || dst != p.Dst {
			t.Fatalf("gopacket reads %v -> %v, Decode %v -> %v", src, dst, p.Src, p.Dst)
		}
		switch p.Proto {
		case ProtoTCP, ProtoUDP, ProtoSCTP:
		default:
			return // gopacket goes on into tunnels (IP in IP), Decode does not
		}
		var gs, gd uint16
		switch l4 := pkt.TransportLayer().(type) {
		case *layers.TCP:
			gs, gd = uint16(l4.SrcPort), uint16(l4.DstPort)
		case *layers.UDP:
			gs, gd = uint16(l4.SrcPort), uint16(l4.DstPort)
		case *layers.SCTP:
			gs, gd = uint16(l4.SrcPort), uint16(l4.DstPort)
		default:
			return
		}
		s, d, ok := p.Ports()
		if !ok {
			return // fewer than 4 bytes in the IP payload: gopacket reads on past its end
		}
		if s != gs || d != gd {
			t.Fatalf("gopacket reads ports %d -> %d, Decode %d -> %d, protocol %d", gs, gd, s, d, p.Proto)
		}
	})
}
