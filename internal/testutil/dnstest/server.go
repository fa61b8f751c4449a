// Package dnstest is a DNS server for tests that the test controls: it
// answers A, AAAA and CNAME questions from a table that can change while
// it runs, and can be told to fail, to stay silent or to truncate UDP
// answers so that clients retry over TCP. It listens on UDP and TCP on
// the same port and counts the queries it gets.
package dnstest

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Mode is how the server treats queries for a name.
type Mode int

// Modes.
const (
	// Answer from the table (NXDOMAIN when the name has no entry at all).
	Answer Mode = iota
	// ServFail answers SERVFAIL.
	ServFail
	// Refuse answers REFUSED.
	Refuse
	// Silent sends no reply, so the client times out.
	Silent
	// Truncate answers over UDP with the TC bit and no records, and
	// from the table over TCP.
	Truncate
)

// Server is a running DNS server.
type Server struct {
	// Addr is the "host:port" it listens on, for UDP and TCP.
	Addr string

	udp, tcp *dns.Server

	mu      sync.Mutex
	records map[string][]dns.RR // canonical name -> records it owns
	modes   map[string]Mode
	queries map[string]int // "name type proto" -> count
	negTTL  uint32
}

// Start starts a server on a free port of host (such as "127.0.0.1" or
// "::1"). Stop it with Close.
func Start(host string) (*Server, error) {
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	// Take a UDP port, then the same TCP port; retry if that one is taken.
	for range 20 {
		pc, err = net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("dnstest: listen udp: %w", err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dnstest: listen tcp: %w", err)
	}
	return Serve(pc, ln)
}

// Serve starts a server on sockets the caller opened (port 53 of another
// network namespace, say): UDP on pc, TCP on ln. Addr is pc's address.
// Close closes both.
func Serve(pc net.PacketConn, ln net.Listener) (*Server, error) {
	s := &Server{records: map[string][]dns.RR{}, modes: map[string]Mode{}, queries: map[string]int{}, negTTL: 3600}
	s.Addr = pc.LocalAddr().String()
	s.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { s.serve(w, r, "udp") })}
	s.tcp = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { s.serve(w, r, "tcp") })}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }() // ends with Shutdown
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			s.Close()
			return nil, fmt.Errorf("dnstest: server on %s did not start", s.Addr)
		}
	}
	return s, nil
}

// Close stops the server.
func (s *Server) Close() {
	_ = s.udp.Shutdown()
	_ = s.tcp.Shutdown()
}

func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// Set replaces the A and AAAA records of name with addrs, all with ttl
// seconds. No addresses leave the name existing without records (NODATA).
func (s *Server) Set(name string, ttl uint32, addrs ...netip.Addr) {
	rrs := []dns.RR{}
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: dns.Fqdn(name), Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	for _, a := range addrs {
		if a.Is4() {
			rrs = append(rrs, &dns.A{Hdr: hdr(dns.TypeA), A: a.AsSlice()})
		} else {
			rrs = append(rrs, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: a.AsSlice()})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[canonical(name)] = rrs
}

// SetCNAME makes name an alias of target with ttl seconds.
func (s *Server) SetCNAME(name, target string, ttl uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[canonical(name)] = []dns.RR{&dns.CNAME{
		Hdr:    dns.RR_Header{Name: dns.Fqdn(name), Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: ttl},
		Target: dns.Fqdn(target),
	}}
}

// Delete removes name, so that it gets NXDOMAIN.
func (s *Server) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, canonical(name))
}

// SetNegativeTTL sets the TTL, in seconds, of the SOA record that
// answers without records (NXDOMAIN and NODATA) carry, as real servers
// do; 3600 at first.
func (s *Server) SetNegativeTTL(ttl uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.negTTL = ttl
}

// SetMode sets how queries for name are treated.
func (s *Server) SetMode(name string, m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modes[canonical(name)] = m
}

// SetTypeMode sets how queries of one type ("A", "AAAA") for name are
// treated, over what SetMode says.
func (s *Server) SetTypeMode(name, qtype string, m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modes[canonical(name)+" "+qtype] = m
}

// Queries returns how many queries of type qtype ("A", "AAAA") for name
// came over proto ("udp", "tcp").
func (s *Server) Queries(name, qtype, proto string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[canonical(name)+" "+qtype+" "+proto]
}

func (s *Server) serve(w dns.ResponseWriter, r *dns.Msg, proto string) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := canonical(q.Name)
	s.mu.Lock()
	s.queries[name+" "+dns.TypeToString[q.Qtype]+" "+proto]++
	mode, ok := s.modes[name+" "+dns.TypeToString[q.Qtype]]
	if !ok {
		mode = s.modes[name]
	}
	switch mode {
	case Silent:
		s.mu.Unlock()
		return
	case ServFail:
		m.Rcode = dns.RcodeServerFailure
	case Refuse:
		m.Rcode = dns.RcodeRefused
	case Truncate:
		if proto == "udp" {
			m.Truncated = true
			break
		}
		fallthrough
	default:
		s.answerLocked(m, name, q.Qtype)
	}
	s.mu.Unlock()
	_ = w.WriteMsg(m) // if it fails, the client times out
}

// answerLocked follows CNAMEs in the table like a recursive resolver.
// An answer without records gets an SOA record in its authority section.
func (s *Server) answerLocked(m *dns.Msg, name string, qtype uint16) {
	defer func() {
		if len(m.Answer) > 0 && m.Answer[len(m.Answer)-1].Header().Rrtype == qtype {
			return
		}
		m.Ns = append(m.Ns, &dns.SOA{
			Hdr: dns.RR_Header{Name: dns.Fqdn(name), Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: s.negTTL},
			Ns:  "ns.test.", Mbox: "admin.test.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: s.negTTL,
		})
	}()
	for range 8 {
		rrs, ok := s.records[name]
		if !ok {
			if len(m.Answer) == 0 {
				m.Rcode = dns.RcodeNameError
			}
			return
		}
		var next string
		for _, rr := range rrs {
			switch rr := rr.(type) {
			case *dns.CNAME:
				m.Answer = append(m.Answer, rr)
				next = canonical(rr.Target)
			default:
				if rr.Header().Rrtype == qtype {
					m.Answer = append(m.Answer, rr)
				}
			}
		}
		if next == "" {
			return
		}
		name = next
	}
}
