package dnsmsg

import (
	"errors"
	"slices"
	"testing"

	"github.com/miekg/dns"
)

// seedFrames are the fuzz seeds: the frames the table tests use.
func seedFrames(t testing.TB) [][]byte {
	chain := pack(t, reply(t, "www.example.com.", dns.TypeA,
		"www.example.com. 300 IN CNAME edge.cdn.net.",
		"edge.cdn.net. 40 IN A 192.0.2.7",
		"edge.cdn.net. 40 IN A 192.0.2.8"))
	aaaa := pack(t, reply(t, "a.io.", dns.TypeAAAA, "a.io. 60 IN AAAA 2001:db8::1"))
	loop := pack(t, reply(t, "a.io.", dns.TypeA, "a.io. 60 IN CNAME b.io.", "b.io. 60 IN CNAME a.io."))
	return [][]byte{
		handFrame,
		frame(t, chain, frameOpts{}),
		frame(t, chain, frameOpts{vlan: true, ipv6: true}),
		frame(t, aaaa, frameOpts{ipv6: true, hopOpts: true}),
		frame(t, loop, frameOpts{}),
		set(handFrame, 14+6, 0x20),
		{},
	}
}

// FuzzParseFrame checks that no frame makes the decoders panic, that
// DecodeFrame agrees with gopacket whenever both read a datagram, that
// Classify agrees with ParseFrame, and that a reply decodes the same
// after miekg/dns packs it again.
func FuzzParseFrame(f *testing.F) {
	for _, s := range seedFrames(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		class := Classify(frame)
		d, err := DecodeFrame(frame)
		if err != nil {
			if err.Error() == "" || err.Error()[:8] != "dnsmsg: " {
				t.Fatalf("error without the package prefix: %q", err)
			}
			if class == Hold {
				t.Fatalf("Classify holds a frame DecodeFrame refuses: %v", err)
			}
			return
		}
		if g, ok := gopacketUDP(frame); ok && (g.Src != d.Src || g.Dst != d.Dst || !slices.Equal(g.Payload, d.Payload)) {
			t.Fatalf("gopacket reads %v -> %v (%d bytes), DecodeFrame %v -> %v (%d bytes)",
				g.Src, g.Dst, len(g.Payload), d.Src, d.Dst, len(d.Payload))
		}
		if r := checkReply(t, d.Payload); r != nil && len(r.Records) > 0 && class != Hold {
			t.Fatalf("ParseFrame found %d records, Classify says %v", len(r.Records), class)
		}
	})
}

// FuzzParseReply fuzzes the DNS part alone, from DNS message seeds.
func FuzzParseReply(f *testing.F) {
	for _, s := range seedFrames(f) {
		if d, err := DecodeFrame(s); err == nil {
			f.Add(d.Payload)
		}
	}
	f.Fuzz(func(t *testing.T, msg []byte) { checkReply(t, msg) })
}

// checkReply parses msg and, if that works, checks that the reply reads
// the same after miekg/dns packs the message again. It returns the reply,
// nil if msg is refused.
func checkReply(t *testing.T, msg []byte) *Reply {
	r, err := ParseReply(msg)
	if err != nil {
		if err.Error()[:8] != "dnsmsg: " {
			t.Fatalf("error without the package prefix: %q", err)
		}
		return nil
	}
	var m dns.Msg
	if err := m.Unpack(msg); err != nil {
		t.Fatalf("ParseReply took a message Unpack refuses: %v", err)
	}
	packed, err := m.Pack()
	if err != nil {
		return r // miekg/dns reads some messages it will not write
	}
	r2, err := ParseReply(packed)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			return r // e.g. a record that packs differently than it read
		}
		t.Fatalf("repacked reply: %v (first read %+v)", err, r)
	}
	if r.Name != r2.Name || !slices.Equal(r.Names, r2.Names) || !slices.Equal(r.Records, r2.Records) || r.RCode != r2.RCode {
		t.Fatalf("reply %+v, after a round trip %+v", r, r2)
	}
	return r
}
