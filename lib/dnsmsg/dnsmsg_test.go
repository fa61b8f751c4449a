package dnsmsg

import (
	"errors"
	"io"
	"net/netip"
	"slices"
	"testing"

	"github.com/miekg/dns"
)

// handFrame is an IPv4 DNS reply written byte by byte: "a.io A?" answered
// with 192.0.2.1, TTL 60.
var handFrame = []byte{
	// Ethernet: destination, source, EtherType IPv4.
	0x0a, 0x58, 0x0a, 0x80, 0x00, 0x05,
	0x0a, 0x58, 0x0a, 0x80, 0x00, 0x01,
	0x08, 0x00,
	// IPv4: version 4 and IHL 5, DSCP, total length 66, identification,
	// flags DF and offset 0, TTL 64, protocol UDP, checksum (not
	// checked), source 10.96.0.10, destination 10.128.0.5.
	0x45, 0x00, 0x00, 0x42,
	0x00, 0x00, 0x40, 0x00,
	0x40, 0x11, 0x00, 0x00,
	0x0a, 0x60, 0x00, 0x0a,
	0x0a, 0x80, 0x00, 0x05,
	// UDP: source port 53, destination port 40000, length 46, no
	// checksum.
	0x00, 0x35, 0x9c, 0x40, 0x00, 0x2e, 0x00, 0x00,
	// DNS header: ID 0x1234, flags QR RD RA, one question, one answer.
	0x12, 0x34, 0x81, 0x80, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	// Question: "a.io", type A, class IN.
	0x01, 'a', 0x02, 'i', 'o', 0x00, 0x00, 0x01, 0x00, 0x01,
	// Answer: pointer to the question name, type A, class IN, TTL 60,
	// length 4, 192.0.2.1.
	0xc0, 0x0c, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x3c, 0x00, 0x04, 0xc0, 0x00, 0x02, 0x01,
}

func TestHandFrame(t *testing.T) {
	d, err := DecodeFrame(handFrame)
	if err != nil {
		t.Fatal(err)
	}
	if d.Src != netip.AddrPortFrom(dns4, 53) || d.Dst != netip.AddrPortFrom(pod4, 40000) || len(d.Payload) != 38 {
		t.Fatalf("datagram %v -> %v, %d bytes; want %v:53 -> %v:40000, 38 bytes", d.Src, d.Dst, len(d.Payload), dns4, pod4)
	}
	if c := Classify(handFrame); c != Hold {
		t.Fatalf("Classify = %v, want hold", c)
	}
	r, err := ParseFrame(handFrame)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{{Addr: netip.MustParseAddr("192.0.2.1"), TTL: 60}}
	if r.ID != 0x1234 || r.Name != "a.io" || r.QType != dns.TypeA || !slices.Equal(r.Records, want) {
		t.Fatalf("reply %+v, want id 0x1234, a.io, A, %v", r, want)
	}
	// The same reply built by gopacket and miekg/dns decodes the same.
	built := frame(t, pack(t, reply(t, "a.io.", dns.TypeA, "a.io. 60 IN A 192.0.2.1")), frameOpts{})
	r2, err := ParseFrame(built)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Name != r.Name || !slices.Equal(r2.Records, r.Records) {
		t.Fatalf("built frame gives %+v, hand frame %+v", r2, r)
	}
}

func TestFrameLayers(t *testing.T) {
	payload := pack(t, reply(t, "www.example.com.", dns.TypeAAAA,
		"www.example.com. 300 IN AAAA 2001:db8::1",
		"www.example.com. 200 IN AAAA 2001:db8::2"))
	for _, tc := range []struct {
		name string
		o    frameOpts
		src  netip.Addr
	}{
		{"ipv4", frameOpts{}, dns4},
		{"ipv4, vlan tag", frameOpts{vlan: true}, dns4},
		{"ipv6", frameOpts{ipv6: true}, dns6},
		{"ipv6, vlan tag", frameOpts{ipv6: true, vlan: true}, dns6},
		{"ipv6, hop-by-hop options", frameOpts{ipv6: true, hopOpts: true}, dns6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := frame(t, payload, tc.o)
			d, err := DecodeFrame(f)
			if err != nil {
				t.Fatal(err)
			}
			if d.Src.Addr() != tc.src || d.Src.Port() != 53 || d.Dst.Port() != dstPort || !slices.Equal(d.Payload, payload) {
				t.Fatalf("datagram %v -> %v (%d bytes), want from %v:53, %d bytes", d.Src, d.Dst, len(d.Payload), tc.src, len(payload))
			}
			if g, ok := gopacketUDP(f); !ok || g.Src != d.Src || g.Dst != d.Dst || !slices.Equal(g.Payload, d.Payload) {
				t.Fatalf("gopacket reads %v -> %v (%d bytes, ok %v)", g.Src, g.Dst, len(g.Payload), ok)
			}
			r, err := ParseFrame(f)
			if err != nil {
				t.Fatal(err)
			}
			want := []Record{{netip.MustParseAddr("2001:db8::1"), 300}, {netip.MustParseAddr("2001:db8::2"), 200}}
			if !slices.Equal(r.Records, want) {
				t.Fatalf("records %v, want %v", r.Records, want)
			}
			if ttl, ok := r.MinTTL(); !ok || ttl != 200 {
				t.Fatalf("MinTTL %d %v, want 200", ttl, ok)
			}
			// Ethernet padding after the IP packet is not payload.
			padded := append(slices.Clone(f), make([]byte, 20)...)
			if d2, err := DecodeFrame(padded); err != nil || !slices.Equal(d2.Payload, payload) {
				t.Fatalf("padded frame: %v, %d bytes", err, len(d2.Payload))
			}
			// Every shorter prefix fails as cut short, never panics.
			for n := range len(f) {
				if _, err := DecodeFrame(f[:n]); !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("frame cut to %d of %d bytes: %v, want unexpected EOF", n, len(f), err)
				}
			}
		})
	}
}

// set returns a copy of b with b[i] = v.
func set(b []byte, kv ...int) []byte {
	b = slices.Clone(b)
	for i := 0; i+1 < len(kv); i += 2 {
		b[kv[i]] = byte(kv[i+1])
	}
	return b
}

func TestFrameErrors(t *testing.T) {
	const ip = 14 // IPv4 header offset in handFrame
	const udp = ip + 20
	v6 := frame(t, pack(t, reply(t, "a.io.", dns.TypeAAAA, "a.io. 60 IN AAAA 2001:db8::1")), frameOpts{ipv6: true})
	// fragment6 inserts an IPv6 fragment header with the given offset
	// and flags word before UDP.
	fragment6 := func(offFlags uint16) []byte {
		f := slices.Clone(v6[:ip+40])
		f[ip+6] = protoFragment
		plen := int(f[ip+4])<<8 | int(f[ip+5]) + 8
		f[ip+4], f[ip+5] = byte(plen>>8), byte(plen)
		f = append(f, protoUDP, 0, byte(offFlags>>8), byte(offFlags), 0, 0, 0, 1)
		return append(f, v6[ip+40:]...)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
		class Class
	}{
		{"arp", set(handFrame, 12, 0x08, 13, 0x06), ErrNotIP, NotDNS},
		{"three vlan tags", append(append(slices.Clone(handFrame[:12]), 0x81, 0, 0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3), handFrame[12:]...), ErrInvalid, Malformed},
		{"tcp", set(handFrame, ip+9, 6), ErrNotUDP, NotDNS},
		{"source port 5353", set(handFrame, udp, 0x14, udp+1, 0xe9), ErrNotDNSPort, NotDNS},
		{"ipv4 more fragments", set(handFrame, ip+6, 0x20), ErrFragment, Fragment},
		{"ipv4 fragment offset", set(handFrame, ip+7, 0x10), ErrFragment, Fragment},
		{"ipv4 version 6 in an ipv4 frame", set(handFrame, ip, 0x65), ErrInvalid, Malformed},
		{"ipv4 header length 4 words", set(handFrame, ip, 0x44), ErrInvalid, Malformed},
		{"ipv4 total length shorter than its header", set(handFrame, ip+2, 0, ip+3, 16), ErrInvalid, Malformed},
		{"ipv4 total length 0", set(handFrame, ip+2, 0, ip+3, 0), ErrInvalid, Malformed},
		{"ipv4 total length past the frame", set(handFrame, ip+3, 0x43), io.ErrUnexpectedEOF, Malformed},
		{"ipv4 header length past the total", set(handFrame, ip, 0x4f, ip+3, 40), ErrInvalid, Malformed},
		{"udp length 7", set(handFrame, udp+5, 7), ErrInvalid, Malformed},
		{"udp length past the packet", set(handFrame, udp+5, 0x2f), io.ErrUnexpectedEOF, Malformed},
		{"ipv6 payload length 0", set(v6, ip+4, 0, ip+5, 0), ErrInvalid, Malformed},
		{"ipv6 version 4 in an ipv6 frame", set(v6, ip, 0x40), ErrInvalid, Malformed},
		{"ipv6 tcp", set(v6, ip+6, 6), ErrNotUDP, NotDNS},
		{"ipv6 fragment, more follow", fragment6(0x0001), ErrFragment, Fragment},
		{"ipv6 fragment at offset 8", fragment6(0x0008), ErrFragment, Fragment},
		{"ipv6 extension header past the packet", set(v6, ip+6, protoDestOpts, ip+40+1, 200), io.ErrUnexpectedEOF, Malformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeFrame(tc.frame)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeFrame: %v, want %v", err, tc.want)
			}
			if c := Classify(tc.frame); c != tc.class {
				t.Fatalf("Classify = %v, want %v", c, tc.class)
			}
			if _, err := ParseFrame(tc.frame); !errors.Is(err, tc.want) {
				t.Fatalf("ParseFrame: %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("ipv6 atomic fragment is whole", func(t *testing.T) {
		r, err := ParseFrame(fragment6(0))
		if err != nil || len(r.Records) != 1 {
			t.Fatalf("%v, %+v", err, r)
		}
	})
	t.Run("error names the field", func(t *testing.T) {
		_, err := DecodeFrame(set(handFrame, ip, 0x44))
		if err == nil || err.Error() != "dnsmsg: ipv4 header length 16 bytes, less than 20: invalid value" {
			t.Fatalf("error %q", err)
		}
	})
}

func TestReplies(t *testing.T) {
	v4 := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	for _, tc := range []struct {
		name    string
		msg     *dns.Msg
		names   []string
		records []Record
	}{
		{
			name:    "capitals in the question and the records",
			msg:     reply(t, "WWW.Example.COM.", dns.TypeA, "www.EXAMPLE.com. 30 IN A 192.0.2.1"),
			names:   []string{"www.example.com"},
			records: []Record{{v4("192.0.2.1"), 30}},
		},
		{
			name: "cname chain, records at its end only",
			msg: reply(t, "www.example.com.", dns.TypeA,
				"www.example.com. 300 IN CNAME edge.cdn.net.",
				"edge.cdn.net. 40 IN CNAME e1.cdn.net.",
				"e1.cdn.net. 100 IN A 192.0.2.7",
				"e1.cdn.net. 20 IN A 192.0.2.8",
				"edge.cdn.net. 100 IN A 198.51.100.1", // beside a CNAME: not an answer
				"evil.example.org. 100 IN A 203.0.113.66"),
			names:   []string{"www.example.com", "edge.cdn.net", "e1.cdn.net"},
			records: []Record{{v4("192.0.2.7"), 40}, {v4("192.0.2.8"), 20}},
		},
		{
			name:    "cname out of order",
			msg:     reply(t, "a.io.", dns.TypeA, "b.io. 60 IN A 192.0.2.2", "a.io. 60 IN CNAME b.io."),
			names:   []string{"a.io", "b.io"},
			records: []Record{{v4("192.0.2.2"), 60}},
		},
		{
			name:    "cname without records (answer by the client's next query)",
			msg:     reply(t, "a.io.", dns.TypeA, "a.io. 60 IN CNAME b.io."),
			names:   []string{"a.io", "b.io"},
			records: nil,
		},
		{
			name:    "records for another name only",
			msg:     reply(t, "a.io.", dns.TypeA, "b.io. 60 IN A 192.0.2.2"),
			names:   []string{"a.io"},
			records: nil,
		},
		{
			name:    "ipv4-mapped aaaa becomes ipv4, other types ignored",
			msg:     reply(t, "a.io.", dns.TypeAAAA, "a.io. 60 IN AAAA ::ffff:192.0.2.9", "a.io. 60 IN TXT \"hi\""),
			names:   []string{"a.io"},
			records: []Record{{v4("192.0.2.9"), 60}},
		},
		{
			name:    "ttl 0",
			msg:     reply(t, "a.io.", dns.TypeA, "a.io. 0 IN A 192.0.2.1"),
			names:   []string{"a.io"},
			records: []Record{{v4("192.0.2.1"), 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseReply(pack(t, tc.msg))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Names, tc.names) || !slices.Equal(r.Records, tc.records) {
				t.Fatalf("names %q records %v, want %q %v", r.Names, r.Records, tc.names, tc.records)
			}
		})
	}

	t.Run("edns0 opt record in the additional section", func(t *testing.T) {
		m := reply(t, "a.io.", dns.TypeA, "a.io. 60 IN A 192.0.2.1")
		m.SetEdns0(1232, true)
		r, err := ParseReply(pack(t, m))
		if err != nil || len(r.Records) != 1 {
			t.Fatalf("%v, %+v", err, r)
		}
	})

	t.Run("nxdomain with soa", func(t *testing.T) {
		m := reply(t, "nope.example.com.", dns.TypeA)
		m.Rcode = dns.RcodeNameError
		soa, _ := dns.NewRR("example.com. 900 IN SOA ns.example.com. admin.example.com. 1 7200 900 1209600 300")
		m.Ns = append(m.Ns, soa)
		r, err := ParseReply(pack(t, m))
		if err != nil {
			t.Fatal(err)
		}
		if r.RCode != dns.RcodeNameError || len(r.Records) != 0 || !r.HasNegativeTTL || r.NegativeTTL != 300 {
			t.Fatalf("reply %+v, want NXDOMAIN, no records, negative TTL 300", r)
		}
		if _, ok := r.MinTTL(); ok {
			t.Fatal("MinTTL ok without records")
		}
	})

	chain := func(n int) *dns.Msg {
		m := reply(t, dnsName(0), dns.TypeA)
		for i := range n {
			rr, _ := dns.NewRR(dnsName(i) + " 60 IN CNAME " + dnsName(i+1))
			m.Answer = append(m.Answer, rr)
		}
		rr, _ := dns.NewRR(dnsName(n) + " 60 IN A 192.0.2.1")
		m.Answer = append(m.Answer, rr)
		return m
	}
	t.Run("longest chain", func(t *testing.T) {
		r, err := ParseReply(pack(t, chain(MaxChain)))
		if err != nil || len(r.Names) != MaxChain+1 || len(r.Records) != 1 {
			t.Fatalf("%v: %d names, %d records", err, len(r.Names), len(r.Records))
		}
	})
	for _, tc := range []struct {
		name string
		msg  *dns.Msg
		want error
	}{
		{"chain too long", chain(MaxChain + 1), ErrCNAMELoop},
		{"cname loop", reply(t, "a.io.", dns.TypeA, "a.io. 60 IN CNAME b.io.", "B.io. 60 IN CNAME a.IO."), ErrCNAMELoop},
		{"cname to itself", reply(t, "a.io.", dns.TypeA, "a.io. 60 IN CNAME a.io."), ErrCNAMELoop},
		{"a query", func() *dns.Msg { m := reply(t, "a.io.", dns.TypeA); m.Response = false; return m }(), ErrNotResponse},
		{"opcode notify", func() *dns.Msg { m := reply(t, "a.io.", dns.TypeA); m.Opcode = dns.OpcodeNotify; return m }(), ErrNotQuery},
		{"two questions", func() *dns.Msg {
			m := reply(t, "a.io.", dns.TypeA)
			m.Question = append(m.Question, m.Question[0])
			return m
		}(), ErrQuestionCount},
		{"class chaos", func() *dns.Msg { m := reply(t, "a.io.", dns.TypeA); m.Question[0].Qclass = dns.ClassCHAOS; return m }(), ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseReply(pack(t, tc.msg)); !errors.Is(err, tc.want) {
				t.Fatalf("ParseReply: %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("malformed", func(t *testing.T) {
		b := pack(t, reply(t, "a.io.", dns.TypeA, "a.io. 60 IN A 192.0.2.1"))
		for n := HeaderLen; n < len(b); n++ {
			if _, err := ParseReply(b[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("message cut to %d of %d bytes: %v, want malformed", n, len(b), err)
			}
		}
		if _, err := ParseReply(b[:5]); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("5 bytes: %v", err)
		}
	})
}

func dnsName(i int) string { return "c" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".io." }

func TestClassify(t *testing.T) {
	base := reply(t, "a.io.", dns.TypeA, "a.io. 60 IN A 192.0.2.1")
	for _, tc := range []struct {
		name  string
		edit  func(m *dns.Msg)
		class Class
	}{
		{"answer", func(*dns.Msg) {}, Hold},
		{"truncated with a record", func(m *dns.Msg) { m.Truncated = true }, Hold},
		{"query", func(m *dns.Msg) { m.Response = false }, NotResponse},
		{"update", func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate }, NotQuery},
		{"nxdomain", func(m *dns.Msg) { m.Rcode = dns.RcodeNameError; m.Answer = nil }, ErrorRCode},
		{"servfail", func(m *dns.Msg) { m.Rcode = dns.RcodeServerFailure; m.Answer = nil }, ErrorRCode},
		{"nodata", func(m *dns.Msg) { m.Answer = nil }, NoAnswer},
		{"no question", func(m *dns.Msg) { m.Question = nil }, QuestionCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base.Copy()
			tc.edit(m)
			if c := Classify(frame(t, pack(t, m), frameOpts{})); c != tc.class {
				t.Fatalf("Classify = %v, want %v", c, tc.class)
			}
		})
	}
	if c := Classify(frame(t, []byte{1, 2, 3}, frameOpts{})); c != Malformed {
		t.Fatalf("3-byte payload: %v", c)
	}
	if s := Class(200).String(); s != "class(200)" {
		t.Fatalf("unknown class %q", s)
	}
}
