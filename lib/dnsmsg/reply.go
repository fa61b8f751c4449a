package dnsmsg

import (
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// MaxChain is the most CNAME records FromMsg follows from the question
// name. Resolvers stop well before (BIND at 16 by default).
const MaxChain = 16

// Record is an address that answers the question.
type Record struct {
	Addr netip.Addr
	// TTL in seconds: the A or AAAA record's own, lowered to the
	// smallest TTL of the CNAMEs that lead to it from the question.
	TTL uint32
}

// Reply is what the egress firewall needs from a DNS reply.
type Reply struct {
	ID uint16
	// Name is the question name in canonical form: lower case, without
	// the trailing dot.
	Name string
	// QType is the question's type (dns.TypeA, dns.TypeAAAA...).
	QType uint16
	// RCode is the response code; only NOERROR replies have Records.
	RCode int
	// Truncated is the TC bit: the client will ask again over TCP.
	Truncated bool
	// Names are the question name and then every alias of the CNAME
	// chain, in order, canonical. The Records belong to each of them.
	Names []string
	// Records are the A and AAAA records owned by the chain's last name.
	Records []Record
	// NegativeTTL is, when HasNegativeTTL, how long in seconds the
	// absence of records may be cached (RFC 2308: the smaller of the SOA
	// record's TTL and its MINIMUM field, from the authority section).
	NegativeTTL    uint32
	HasNegativeTTL bool
}

// MinTTL returns the smallest TTL of the Records, and false if there are
// none.
func (r *Reply) MinTTL() (uint32, bool) {
	if len(r.Records) == 0 {
		return 0, false
	}
	ttl := uint32(math.MaxUint32)
	for _, rec := range r.Records {
		ttl = min(ttl, rec.TTL)
	}
	return ttl, true
}

// Addrs returns the Records' addresses, in answer order.
func (r *Reply) Addrs() []netip.Addr {
	out := make([]netip.Addr, len(r.Records))
	for i, rec := range r.Records {
		out[i] = rec.Addr
	}
	return out
}

// ParseFrame decodes the DNS reply in an Ethernet frame: DecodeFrame,
// then ParseReply.
func ParseFrame(frame []byte) (*Reply, error) {
	d, err := DecodeFrame(frame)
	if err != nil {
		return nil, err
	}
	return ParseReply(d.Payload)
}

// ParseReply decodes a DNS message (a UDP payload) and returns its
// Reply; see FromMsg.
func ParseReply(msg []byte) (*Reply, error) {
	h, err := ParseHeader(msg)
	if err != nil {
		return nil, err
	}
	var m dns.Msg
	if err := m.Unpack(msg); err != nil {
		return nil, fmt.Errorf("dnsmsg: id %d: %w: %v", h.ID, ErrMalformed, err)
	}
	// miekg/dns stops quietly where a message ends early; the header's
	// counts say whether anything was left out.
	if len(m.Question) != int(h.QDCount) || len(m.Answer) != int(h.ANCount) || len(m.Ns) != int(h.NSCount) || len(m.Extra) != int(h.ARCount) {
		return nil, fmt.Errorf("dnsmsg: id %d: %w: header counts %d/%d/%d/%d records, message holds %d/%d/%d/%d",
			h.ID, ErrMalformed, h.QDCount, h.ANCount, h.NSCount, h.ARCount, len(m.Question), len(m.Answer), len(m.Ns), len(m.Extra))
	}
	return FromMsg(&m)
}

// FromMsg reads a decoded DNS response. It must be a response to a
// standard query with exactly one question of class IN. A response with
// an error code (NXDOMAIN...) is not an error: it gives a Reply without
// Records. For NOERROR, FromMsg follows the CNAME chain from the question
// name through the answer section and returns the A and AAAA records of
// its last name (see the package documentation). IPv4-mapped IPv6
// addresses are returned as IPv4, since that is how they are sent.
func FromMsg(m *dns.Msg) (*Reply, error) {
	switch {
	case !m.Response:
		return nil, fmt.Errorf("dnsmsg: id %d: %w", m.Id, ErrNotResponse)
	case m.Opcode != dns.OpcodeQuery:
		return nil, fmt.Errorf("dnsmsg: id %d: opcode %d: %w", m.Id, m.Opcode, ErrNotQuery)
	case len(m.Question) != 1:
		return nil, fmt.Errorf("dnsmsg: id %d: %d questions: %w", m.Id, len(m.Question), ErrQuestionCount)
	}
	q := m.Question[0]
	if q.Qclass != dns.ClassINET {
		return nil, fmt.Errorf("dnsmsg: id %d: question %q class %d, want IN: %w", m.Id, q.Name, q.Qclass, ErrInvalid)
	}
	r := &Reply{
		ID:        m.Id,
		Name:      Canonical(q.Name),
		QType:     q.Qtype,
		RCode:     m.Rcode,
		Truncated: m.Truncated,
	}
	r.Names = []string{r.Name}
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok && soa.Hdr.Class == dns.ClassINET {
			r.NegativeTTL, r.HasNegativeTTL = min(soa.Hdr.Ttl, soa.Minttl), true
			break
		}
	}
	if m.Rcode != dns.RcodeSuccess {
		return r, nil
	}

	// Follow the chain: cur is the owner whose records answer.
	cur := q.Name
	chainTTL := uint32(math.MaxUint32)
	for hops := 0; ; hops++ {
		cname := findCNAME(m.Answer, cur)
		if cname == nil {
			break
		}
		target := Canonical(cname.Target)
		if hops == MaxChain {
			return nil, fmt.Errorf("dnsmsg: id %d: question %q: more than %d cnames: %w", m.Id, r.Name, MaxChain, ErrCNAMELoop)
		}
		for _, n := range r.Names {
			if n == target {
				return nil, fmt.Errorf("dnsmsg: id %d: question %q: cname %q -> %q comes back: %w", m.Id, r.Name, Canonical(cur), target, ErrCNAMELoop)
			}
		}
		chainTTL = min(chainTTL, cname.Hdr.Ttl)
		r.Names = append(r.Names, target)
		cur = cname.Target
	}
	for _, rr := range m.Answer {
		h := rr.Header()
		if h.Class != dns.ClassINET || !strings.EqualFold(h.Name, cur) {
			continue
		}
		var addr netip.Addr
		switch rr := rr.(type) {
		case *dns.A:
			a, ok := netip.AddrFromSlice(rr.A.To4())
			if !ok {
				continue
			}
			addr = a
		case *dns.AAAA:
			a, ok := netip.AddrFromSlice(rr.AAAA.To16())
			if !ok {
				continue
			}
			addr = a.Unmap()
		default:
			continue
		}
		r.Records = append(r.Records, Record{Addr: addr, TTL: min(h.Ttl, chainTTL)})
	}
	return r, nil
}

// findCNAME returns the first CNAME of class IN owned by name.
func findCNAME(answer []dns.RR, name string) *dns.CNAME {
	for _, rr := range answer {
		if c, ok := rr.(*dns.CNAME); ok && c.Hdr.Class == dns.ClassINET && strings.EqualFold(c.Hdr.Name, name) {
			return c
		}
	}
	return nil
}

// Canonical returns a name in the form this package and the egress
// firewall compare: lower case, without the trailing dot.
func Canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}
