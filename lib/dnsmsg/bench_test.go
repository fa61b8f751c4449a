package dnsmsg

import (
	"testing"

	"github.com/miekg/dns"
)

func benchFrame(b *testing.B) []byte {
	return frame(b, pack(b, reply(b, "www.example.com.", dns.TypeA,
		"www.example.com. 300 IN CNAME edge.cdn.net.",
		"edge.cdn.net. 40 IN A 192.0.2.7",
		"edge.cdn.net. 40 IN A 192.0.2.8")), frameOpts{})
}

// BenchmarkClassify is the check made on every punted DNS reply.
func BenchmarkClassify(b *testing.B) {
	f := benchFrame(b)
	b.ReportAllocs()
	for b.Loop() {
		if Classify(f) != Hold {
			b.Fatal("not held")
		}
	}
}

// BenchmarkParseFrame is the full parse of a held reply: a CNAME and two
// A records.
func BenchmarkParseFrame(b *testing.B) {
	f := benchFrame(b)
	b.ReportAllocs()
	for b.Loop() {
		r, err := ParseFrame(f)
		if err != nil || len(r.Records) != 2 {
			b.Fatal(err)
		}
	}
}
