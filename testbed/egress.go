package testbed

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"nodeflow/testbed/nsutil"
)

// The API server listens on the host's loopback, outside the testbed's
// networks; what it sends into the cluster (to a kubelet for logs, exec and
// port-forward, to a pod or a Service through its proxy subresources) goes
// through an egress proxy, as a cluster whose control plane sits on another
// network uses a konnectivity proxy: the API server's egress selector sends
// "cluster" traffic as HTTP CONNECT over a unix socket, and the testbed
// dials the destination from inside a node's network namespace, the node
// that owns the address or else the first node.

// egressSelectorConfig is the API server's egress selector configuration
// for a proxy on socket.
func egressSelectorConfig(socket string) string {
	return fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, socket)
}

// startEgressProxy serves HTTP CONNECT on the unix socket path; netnsFor
// names the network namespace to dial an address from.
func startEgressProxy(path string, netnsFor func(netip.Addr) string) (*nodeProxy, error) {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	p := &nodeProxy{l: l, conns: map[net.Conn]bool{}, open: func(c net.Conn) (io.Reader, net.Conn, error) {
		return connect(c, netnsFor)
	}}
	go p.serve()
	return p, nil
}

// connect reads a CONNECT request from c, dials its destination and
// answers 200, or answers the error.
func connect(c net.Conn, netnsFor func(netip.Addr) string) (io.Reader, net.Conn, error) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetReadDeadline(time.Time{})
	fail := func(code int, err error) (io.Reader, net.Conn, error) {
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%v\n", code, http.StatusText(code), err)
		return nil, nil, err
	}
	if req.Method != http.MethodConnect {
		return fail(http.StatusMethodNotAllowed, fmt.Errorf("egress proxy: %s, not CONNECT", req.Method))
	}
	hostport := req.Host
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fail(http.StatusBadRequest, fmt.Errorf("egress proxy: destination %q: %w", hostport, err))
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return fail(http.StatusBadRequest, fmt.Errorf("egress proxy: destination %q is not an address", hostport))
	}
	ns := netnsFor(addr.Unmap())
	up, err := nsutil.Dial(req.Context(), ns, "tcp", hostport, 10*time.Second)
	if err != nil {
		return fail(http.StatusBadGateway, fmt.Errorf("egress proxy: dial %s from %s: %w", hostport, ns, err))
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		return nil, nil, err
	}
	return br, up, nil
}
