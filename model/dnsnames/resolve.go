package dnsnames

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/miekg/dns"

	"nodeflow/lib/dnsmsg"
)

// ednsSize is the UDP payload size offered (the DNS flag day 2020 value):
// large enough for most answers, small enough not to fragment.
const ednsSize = 1232

// query asks the servers in order for name's records of type qtype, and
// returns the first answer that is NOERROR or NXDOMAIN. The name is
// always fully qualified: no search domain is appended. A truncated UDP
// answer is asked again over TCP from the same server.
func (c *Cache) query(ctx context.Context, name string, qtype uint16) (*dnsmsg.Reply, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	m.SetEdns0(ednsSize, false)
	var errs []error
	for _, srv := range c.opts.Servers {
		r, err := c.exchange(ctx, m, srv)
		if err == nil {
			return r, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", srv, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dnsnames: lookup %s %s: %w", name, dns.TypeToString[qtype], errors.Join(errs...))
}

// exchange asks one server, over UDP and, if the answer is truncated,
// over TCP.
func (c *Cache) exchange(ctx context.Context, m *dns.Msg, srv string) (*dnsmsg.Reply, error) {
	resp, err := c.exchangeOver(ctx, "udp", m, srv)
	if err == nil && resp.Truncated {
		resp, err = c.exchangeOver(ctx, "tcp", m, srv)
	}
	if err != nil {
		return nil, err
	}
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("answer %s", dns.RcodeToString[resp.Rcode])
	}
	r, err := dnsmsg.FromMsg(resp)
	if err != nil {
		return nil, err
	}
	if want := dnsmsg.Canonical(m.Question[0].Name); r.Name != want || r.QType != m.Question[0].Qtype {
		return nil, fmt.Errorf("answer to %q type %d, asked %q type %d", r.Name, r.QType, want, m.Question[0].Qtype)
	}
	return r, nil
}

// exchangeOver asks one server over one transport, within Timeout. The
// connection is closed when ctx is done, so that Run's end does not wait
// for a slow server.
func (c *Cache) exchangeOver(ctx context.Context, network string, m *dns.Msg, srv string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	cl := &dns.Client{Net: network, Timeout: c.opts.Timeout, UDPSize: ednsSize}
	conn, err := cl.DialContext(ctx, srv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", network, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer func() {
		if stop() {
			_ = conn.Close()
		}
	}()
	resp, _, err := cl.ExchangeWithConnContext(ctx, m, conn)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%s: no answer within %v: %w", network, c.opts.Timeout, err)
		}
		return nil, fmt.Errorf("%s: %w", network, err)
	}
	return resp, nil
}
