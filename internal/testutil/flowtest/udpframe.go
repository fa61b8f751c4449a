package flowtest

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// UDPFrame returns an Ethernet frame, 02:00:00:00:00:01 to
// 02:00:00:00:00:02, of a UDP datagram from src:sport to dst:dport (IPv4
// or IPv6 by the addresses) carrying payload.
func UDPFrame(t testing.TB, src, dst string, sport, dport uint16, payload []byte) []byte {
	t.Helper()
	s, d := net.ParseIP(src), net.ParseIP(dst)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	var l3 gopacket.SerializableLayer
	if s.To4() != nil {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: s, DstIP: d}
		_ = udp.SetNetworkLayerForChecksum(ip)
		l3 = ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: s, DstIP: d}
		_ = udp.SetNetworkLayerForChecksum(ip)
		l3 = ip
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, l3, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
