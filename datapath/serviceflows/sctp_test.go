package serviceflows

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	v1 "k8s.io/api/core/v1"

	"nodeflow/model/service"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// sctpFrame builds an Ethernet frame carrying one SCTP packet (common
// header, then one chunk) with a correct CRC32c.
func sctpFrame(t *testing.T, src, dst netip.AddrPort, vtag uint32, chunk gopacket.SerializableLayer) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0, 5}, DstMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
	var ip gopacket.SerializableLayer = &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolSCTP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	if src.Addr().Is6() {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolSCTP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	}
	sctp := &layers.SCTP{SrcPort: layers.SCTPPort(src.Port()), DstPort: layers.SCTPPort(dst.Port()), VerificationTag: vtag}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, eth, ip, sctp, chunk); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sctpSeen is one SCTP packet a port sent.
type sctpSeen struct {
	src, dst netip.AddrPort
	crcOK    bool
}

// parseSCTP decodes an Ethernet/IPv4 or IPv6/SCTP frame and checks its
// CRC32c (stored little-endian, computed with the field zeroed).
func parseSCTP(frame []byte) (sctpSeen, bool) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var srcIP, dstIP net.IP
	var payload []byte
	if ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip != nil && ip.Protocol == layers.IPProtocolSCTP {
		srcIP, dstIP, payload = ip.SrcIP, ip.DstIP, ip.Payload
	} else if ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ip != nil && ip.NextHeader == layers.IPProtocolSCTP {
		srcIP, dstIP, payload = ip.SrcIP, ip.DstIP, ip.Payload
	}
	if len(payload) < 12 {
		return sctpSeen{}, false
	}
	l4 := slices.Clone(payload)
	want := binary.LittleEndian.Uint32(l4[8:12])
	copy(l4[8:12], []byte{0, 0, 0, 0})
	src, _ := netip.AddrFromSlice(srcIP)
	dst, _ := netip.AddrFromSlice(dstIP)
	return sctpSeen{
		src:   netip.AddrPortFrom(src.Unmap(), binary.BigEndian.Uint16(l4[0:2])),
		dst:   netip.AddrPortFrom(dst.Unmap(), binary.BigEndian.Uint16(l4[2:4])),
		crcOK: crc32.Checksum(l4, crc32.MakeTable(crc32.Castagnoli)) == want,
	}, true
}

// readPcap returns the SCTP packets in a tx_pcap file so far.
func readPcap(path string) ([]sctpSeen, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, err
	}
	var out []sctpSeen
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if s, ok := parseSCTP(data); ok {
			out = append(out, s)
		}
	}
}

// TestOVSSCTPPortTranslation sends real SCTP packets through an SCTP
// service whose targetPort differs from its port, on the dummy datapath
// (Open vSwitch's userspace conntrack, which NATs SCTP addresses only):
// the INIT reaches the endpoint's address and port, the INIT-ACK comes
// back from the ClusterIP and service port, the established association's
// next packets (and another association of the same client) are
// translated too, and every packet leaves with a valid CRC32c.
func TestOVSSCTPPortTranslation(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	pcap := filepath.Join(t.TempDir(), "p1.pcap")
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-port", "br0", "p1", "--", "set", "interface", "p1", "type=dummy", "ofport_request=1", "options:tx_pcap="+pcap,
		"--", "add-port", "br0", "p2", "--", "set", "interface", "p2", "type=dummy", "ofport_request=2"); err != nil {
		t.Fatal(err)
	}
	port := &service.ServicePort{
		Name: name("sctp", "assoc", v1.ProtocolSCTP), Protocol: v1.ProtocolSCTP, Port: 9999,
		ClusterIPs: []netip.Addr{a("10.96.0.15"), a("fd02::15")},
	}
	out, err := Build(testNode(), Input{Port: port, Endpoints: []service.Endpoint{
		ready("10.128.0.2", 7777, "node1"), ready("fd01::2", 7777, "node1"),
	}}, fixedIDs())
	if err != nil {
		t.Fatal(err)
	}
	installPod(t, sb, out, stubPipeline)

	vip := netip.MustParseAddrPort("10.96.0.15:9999")
	ep := netip.MustParseAddrPort("10.128.0.2:7777")
	client := netip.MustParseAddrPort("10.128.0.5:40000")
	client2 := netip.MustParseAddrPort("10.128.0.5:40001")
	vip6 := netip.MustParseAddrPort("[fd02::15]:9999")
	ep6 := netip.MustParseAddrPort("[fd01::2]:7777")
	client6 := netip.MustParseAddrPort("[fd01::5]:40000")
	init := &layers.SCTPInit{SCTPChunk: layers.SCTPChunk{Type: layers.SCTPChunkTypeInit}, InitiateTag: 0x11223344,
		AdvertisedReceiverWindowCredit: 65535, OutboundStreams: 1, InboundStreams: 1, InitialTSN: 1}
	initAck := &layers.SCTPInit{SCTPChunk: layers.SCTPChunk{Type: layers.SCTPChunkTypeInitAck}, InitiateTag: 0x55667788,
		AdvertisedReceiverWindowCredit: 65535, OutboundStreams: 1, InboundStreams: 1, InitialTSN: 1}
	data := &layers.SCTPData{SCTPChunk: layers.SCTPChunk{Type: layers.SCTPChunkTypeData, Flags: 3}, TSN: 1, PayloadProtocol: 0}

	steps := []struct {
		name     string
		frame    []byte
		src, dst netip.AddrPort // as the pod port sends it out
	}{
		{"INIT to the ClusterIP reaches the endpoint's port", sctpFrame(t, client, vip, 0, init), client, ep},
		{"INIT-ACK returns from the ClusterIP and service port", sctpFrame(t, ep, client, 0x11223344, initAck), vip, client},
		{"established DATA reaches the endpoint's port", sctpFrame(t, client, vip, 0x55667788, data), client, ep},
		{"another association of the client follows its entry", sctpFrame(t, client2, vip, 0, init), client2, ep},
		{"IPv6 INIT reaches the endpoint's port", sctpFrame(t, client6, vip6, 0, init), client6, ep6},
		{"IPv6 INIT-ACK returns from the ClusterIP and service port", sctpFrame(t, ep6, client6, 0x11223344, initAck), vip6, client6},
		{"IPv6 established DATA reaches the endpoint's port", sctpFrame(t, client6, vip6, 0x55667788, data), client6, ep6},
	}
	// netdev-dummy buffers its tx_pcap until the file is closed, which
	// pointing the option at a new file does: sent rotates the file and
	// reads every closed one.
	var closed []string
	sent := func() []sctpSeen {
		t.Helper()
		next := filepath.Join(filepath.Dir(pcap), "p1-"+strconv.Itoa(len(closed)+1)+".pcap")
		if _, err := sb.Vsctl("set", "interface", "p1", "options:tx_pcap="+next); err != nil {
			t.Fatal(err)
		}
		closed = append(closed, pcap)
		pcap = next
		var all []sctpSeen
		for _, f := range closed {
			got, err := readPcap(f)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, got...)
		}
		return all
	}
	// Every packet enters on p2 (the patch port: an output to the input
	// port would be dropped) and leaves on p1, which the stub routes the
	// pod subnet to.
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if _, err := sb.Appctl("netdev-dummy/receive", "p2", hex.EncodeToString(s.frame)); err != nil {
				t.Fatal(err)
			}
			var got []sctpSeen
			waitFor(5*time.Second, func() bool { got = sent(); return len(got) > i })
			if len(got) <= i {
				all, _ := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0")
				ct, _ := sb.Appctl("dpctl/dump-conntrack")
				t.Fatalf("p1 sent %d SCTP packets, want %d\n%s\n%s", len(got), i+1, all, ct)
			}
			g := got[i]
			if g.src != s.src || g.dst != s.dst || !g.crcOK {
				t.Errorf("p1 sent %s -> %s (CRC32c valid: %v), want %s -> %s with a valid CRC32c", g.src, g.dst, g.crcOK, s.src, s.dst)
			}
		})
	}
	if t.Failed() || testing.Verbose() {
		ct, _ := sb.Appctl("dpctl/dump-conntrack")
		t.Logf("conntrack:\n%s", ct)
	}
}
