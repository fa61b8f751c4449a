package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"nodeflow/internal/testutil/dnstest"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/topology"
)

// The testbed's DNS server runs on the first external host (kind host),
// on port 53 of all its addresses, UDP and TCP, inside the supervisor.
// Every node agent uses it as its resolver (a resolv.conf of the
// testbed's, through NODEFLOW_RESOLV_CONF), and tests ask it from inside
// pods. Its answers are set while it runs through a control socket in
// the state directory (DNSClient; State.DNSSocket): A and AAAA records
// with their TTL, CNAMEs, NXDOMAIN, SERVFAIL, silence and truncation.
// It starts empty: every name is NXDOMAIN.

// DNSSocketName is the control socket's name in the state directory.
const DNSSocketName = "dns.sock"

// resolvConfName is the agents' resolver configuration in the state
// directory.
const resolvConfName = "resolv.conf"

// startDNS gives the topology's first external host, if it has one, the
// external networks (external.go) and the DNS server.
func (s *supervisor) startDNS() error {
	for _, m := range s.top.Members() {
		if m.Kind != topology.KindHost {
			continue
		}
		nets, err := addExternalNetworks(context.Background(), s.top, m)
		if err != nil {
			return err
		}
		s.state.ExternalNetworks = nets
		d, err := startDNS(s.opts.Dir, s.top, m)
		if err != nil {
			return err
		}
		s.dns = d
		s.state.DNSSocket = filepath.Join(s.opts.Dir, DNSSocketName)
		for _, a := range m.Addresses() {
			s.state.DNSServers = append(s.state.DNSServers, a.Addr().String())
		}
		return s.state.write()
	}
	return nil
}

// agentDNSEnv is the agents' resolver configuration, when there is a DNS
// server.
func (s *supervisor) agentDNSEnv() []string {
	if s.dns == nil {
		return nil
	}
	return []string{"NODEFLOW_RESOLV_CONF=" + filepath.Join(s.opts.Dir, resolvConfName)}
}

// dnsService is the running server and its control socket.
type dnsService struct {
	srv  *dnstest.Server
	http *http.Server
}

// startDNS starts the DNS server in member m's network namespace and its
// control socket in dir, and writes dir/resolv.conf naming m's addresses.
func startDNS(dir string, top *topology.Topology, m *topology.Node) (*dnsService, error) {
	name := m.Name
	netns := memberNetns(top.Name, name)
	var (
		pc net.PacketConn
		ln net.Listener
	)
	err := nsutil.Do(netns, func() error {
		var err error
		if pc, err = net.ListenPacket("udp", "[::]:53"); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", "[::]:53")
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		return nil, fmt.Errorf("testbed: dns on %s: %w", name, err)
	}
	srv, err := dnstest.Serve(pc, ln)
	if err != nil {
		return nil, fmt.Errorf("testbed: dns on %s: %w", name, err)
	}
	sock := filepath.Join(dir, DNSSocketName)
	_ = os.Remove(sock)
	ul, err := net.Listen("unix", sock)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("testbed: dns control socket: %w", err)
	}
	d := &dnsService{srv: srv, http: &http.Server{Handler: dnsHandler(srv), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = d.http.Serve(ul) }() // ends with close
	var conf strings.Builder
	conf.WriteString("# the testbed's DNS server on " + name + "\n")
	for _, a := range m.Addresses() {
		fmt.Fprintf(&conf, "nameserver %s\n", a.Addr())
	}
	if err := os.WriteFile(filepath.Join(dir, resolvConfName), []byte(conf.String()), 0o644); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *dnsService) close() {
	_ = d.http.Close()
	d.srv.Close()
}

// dnsRequest is the body of a control request.
type dnsRequest struct {
	TTL    uint32   `json:"ttl"`
	Addrs  []string `json:"addrs,omitempty"`
	Target string   `json:"target,omitempty"`
	Mode   string   `json:"mode,omitempty"`
}

var dnsModes = map[string]dnstest.Mode{
	"answer": dnstest.Answer, "servfail": dnstest.ServFail, "refuse": dnstest.Refuse,
	"silent": dnstest.Silent, "truncate": dnstest.Truncate,
}

// dnsHandler serves the control requests:
//
//	PUT    /records/NAME  {"ttl": 30, "addrs": ["192.0.2.1", "2001:db8::1"]}
//	PUT    /cname/NAME    {"ttl": 30, "target": "other.example"}
//	DELETE /records/NAME  (NXDOMAIN)
//	PUT    /mode/NAME     {"mode": "answer|servfail|refuse|silent|truncate"}
//	GET    /queries/NAME?type=A&proto=udp  (the count, as text)
func dnsHandler(srv *dnstest.Server) http.Handler {
	mux := http.NewServeMux()
	body := func(w http.ResponseWriter, r *http.Request) (dnsRequest, bool) {
		var req dnsRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
			return req, false
		}
		return req, true
	}
	mux.HandleFunc("PUT /records/{name}", func(w http.ResponseWriter, r *http.Request) {
		req, ok := body(w, r)
		if !ok {
			return
		}
		var addrs []netip.Addr
		for _, s := range req.Addrs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			addrs = append(addrs, a)
		}
		srv.Set(r.PathValue("name"), req.TTL, addrs...)
	})
	mux.HandleFunc("PUT /cname/{name}", func(w http.ResponseWriter, r *http.Request) {
		if req, ok := body(w, r); ok {
			srv.SetCNAME(r.PathValue("name"), req.Target, req.TTL)
		}
	})
	mux.HandleFunc("DELETE /records/{name}", func(_ http.ResponseWriter, r *http.Request) {
		srv.Delete(r.PathValue("name"))
	})
	mux.HandleFunc("PUT /mode/{name}", func(w http.ResponseWriter, r *http.Request) {
		req, ok := body(w, r)
		if !ok {
			return
		}
		m, ok := dnsModes[req.Mode]
		if !ok {
			http.Error(w, "unknown mode "+strconv.Quote(req.Mode), http.StatusBadRequest)
			return
		}
		srv.SetMode(r.PathValue("name"), m)
	})
	mux.HandleFunc("GET /queries/{name}", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		fmt.Fprint(w, srv.Queries(r.PathValue("name"), q.Get("type"), q.Get("proto")))
	})
	return mux
}

// DNSClient sets the answers of a running testbed's DNS server.
type DNSClient struct {
	c *http.Client
}

// NewDNSClient returns a client of the DNS server of the testbed whose
// state is st.
func NewDNSClient(st *State) (*DNSClient, error) {
	if st.DNSSocket == "" {
		return nil, errors.New("testbed: no DNS server (the topology has no host)")
	}
	sock := st.DNSSocket
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &DNSClient{c: &http.Client{Transport: tr, Timeout: 10 * time.Second}}, nil
}

func (c *DNSClient) do(method, path string, req any) (string, error) {
	var body io.Reader
	if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return "", err
		}
		body = bytes.NewReader(b)
	}
	r, err := http.NewRequest(method, "http://dns"+path, body)
	if err != nil {
		return "", err
	}
	resp, err := c.c.Do(r)
	if err != nil {
		return "", fmt.Errorf("testbed: dns %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("testbed: dns %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("testbed: dns %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Set replaces name's A and AAAA records with addrs, all with ttl
// seconds; no addresses leaves the name without records (NODATA).
func (c *DNSClient) Set(name string, ttl uint32, addrs ...netip.Addr) error {
	req := dnsRequest{TTL: ttl}
	for _, a := range addrs {
		req.Addrs = append(req.Addrs, a.String())
	}
	_, err := c.do(http.MethodPut, "/records/"+url.PathEscape(name), req)
	return err
}

// SetCNAME makes name an alias of target.
func (c *DNSClient) SetCNAME(name, target string, ttl uint32) error {
	_, err := c.do(http.MethodPut, "/cname/"+url.PathEscape(name), dnsRequest{TTL: ttl, Target: target})
	return err
}

// Delete makes name NXDOMAIN.
func (c *DNSClient) Delete(name string) error {
	_, err := c.do(http.MethodDelete, "/records/"+url.PathEscape(name), nil)
	return err
}

// SetMode sets how queries for name are answered: "answer", "servfail",
// "refuse", "silent" or "truncate" (over UDP).
func (c *DNSClient) SetMode(name, mode string) error {
	_, err := c.do(http.MethodPut, "/mode/"+url.PathEscape(name), dnsRequest{Mode: mode})
	return err
}

// Queries returns how many queries of qtype ("A", "AAAA") for name came
// over proto ("udp", "tcp").
func (c *DNSClient) Queries(name, qtype, proto string) (int, error) {
	out, err := c.do(http.MethodGet, "/queries/"+url.PathEscape(name)+"?type="+url.QueryEscape(qtype)+"&proto="+url.QueryEscape(proto), nil)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}
