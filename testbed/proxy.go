package testbed

import (
	"io"
	"net"
	"sync"

	"nodeflow/testbed/nsutil"
)

// nodeProxy makes the API server, which listens on the host's loopback,
// reachable on the loopback of a node's network namespace: processes in the
// node (the agent) use https://127.0.0.1:6443 as on a real node with a
// local API server proxy. It relays TCP; TLS passes through untouched.
type nodeProxy struct {
	l net.Listener
	// open connects an accepted connection to its upstream; it returns
	// what to read the client from (the connection, or a reader holding
	// what the handshake read ahead).
	open   func(c net.Conn) (io.Reader, net.Conn, error)
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func startNodeProxy(netns, listen, target string) (*nodeProxy, error) {
	l, err := nsutil.Listen(netns, "tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &nodeProxy{l: l, conns: map[net.Conn]bool{}, open: func(c net.Conn) (io.Reader, net.Conn, error) {
		up, err := net.Dial("tcp", target)
		return c, up, err
	}}
	go p.serve()
	return p, nil
}

func (p *nodeProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.relay(c)
	}
}

func (p *nodeProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *nodeProxy) relay(c net.Conn) {
	defer c.Close()
	from, up, err := p.open(c)
	if err != nil {
		return
	}
	defer up.Close()
	if !p.track(c, true) || !p.track(up, true) {
		return
	}
	defer p.track(c, false)
	defer p.track(up, false)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, from)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-done
}

func (p *nodeProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}
