package ovsdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Options configure a Client. The zero value gives sensible defaults.
type Options struct {
	// Logger receives connection events. Nil logs nothing.
	Logger logrus.FieldLogger
	// DialTimeout bounds one connection attempt. Zero means 5 s.
	DialTimeout time.Duration
	// EchoInterval is how often the client sends an "echo" keepalive. Zero
	// means 5 s; a negative value disables keepalives.
	EchoInterval time.Duration
	// EchoTimeout is how long the client waits for an echo reply before it
	// declares the server dead and reconnects. Zero means 10 s.
	EchoTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between reconnection
	// attempts, which doubles from MinBackoff up to MaxBackoff (with
	// jitter). Zero means 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// WriteTimeout bounds one write to the socket. Zero means 10 s.
	WriteTimeout time.Duration
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Logger = l
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.EchoInterval == 0 {
		o.EchoInterval = 5 * time.Second
	}
	if o.EchoTimeout == 0 {
		o.EchoTimeout = 10 * time.Second
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Second
	}
}

// Client is a connection to an OVSDB server that reconnects by itself. It is
// safe for concurrent use. Calls made while the client is reconnecting wait
// for the connection (or for their context to end). A call in flight when the
// connection is lost fails with an error wrapping ErrDisconnected.
type Client struct {
	endpoint string
	network  string
	address  string
	opts     Options
	log      logrus.FieldLogger

	mu        sync.Mutex
	conn      *rpcConn      // nil while disconnected
	connReady chan struct{} // closed once conn is set
	closed    bool
	closeCh   chan struct{}
	runDone   chan struct{}
	ifaces    *InterfaceCache

	// monMu serialises starting monitors with re-establishing them after a
	// reconnect, so that each monitor is started once on each connection.
	monMu    sync.Mutex
	monitors map[string]*Monitor // by monitor id, guarded by mu
	monSeq   uint64
	locks    map[string]*Lock // asked for, by name, guarded by mu
}

// ParseEndpoint splits an OVSDB endpoint "unix:/path" or "tcp:host:port"
// into a network and an address for net.Dial.
func ParseEndpoint(endpoint string) (network, address string, err error) {
	kind, rest, ok := strings.Cut(endpoint, ":")
	if !ok || rest == "" {
		return "", "", fmt.Errorf("ovsdb: endpoint %q: want unix:PATH or tcp:HOST:PORT", endpoint)
	}
	switch kind {
	case "unix":
		return "unix", rest, nil
	case "tcp":
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return "", "", fmt.Errorf("ovsdb: endpoint %q: %v", endpoint, err)
		}
		return "tcp", rest, nil
	default:
		return "", "", fmt.Errorf("ovsdb: endpoint %q: unsupported method %q (want unix or tcp)", endpoint, kind)
	}
}

// Dial connects to the server at endpoint ("unix:/run/openvswitch/db.sock",
// "tcp:127.0.0.1:6640"). The first connection must succeed; later losses are
// repaired in the background until Close.
func Dial(ctx context.Context, endpoint string, opts Options) (*Client, error) {
	network, address, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	opts.setDefaults()
	c := &Client{
		endpoint: endpoint, network: network, address: address, opts: opts,
		log:       opts.Logger.WithField("endpoint", endpoint),
		connReady: make(chan struct{}),
		closeCh:   make(chan struct{}),
		runDone:   make(chan struct{}),
		monitors:  make(map[string]*Monitor),
		locks:     make(map[string]*Lock),
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	close(c.connReady)
	go c.run(conn)
	return c, nil
}

// Endpoint returns the endpoint the client connects to.
func (c *Client) Endpoint() string { return c.endpoint }

// connect makes one connection and starts its keepalive.
func (c *Client) connect(ctx context.Context) (*rpcConn, error) {
	d := net.Dialer{Timeout: c.opts.DialTimeout}
	nc, err := d.DialContext(ctx, c.network, c.address)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: connect %s: %w: %v", c.endpoint, ErrDisconnected, err)
	}
	conn := newRPCConn(nc, c.endpoint, c.log, c.opts.WriteTimeout, c.onNotify)
	if c.opts.EchoInterval > 0 {
		go c.keepalive(conn)
	}
	return conn, nil
}

// keepalive sends an echo every EchoInterval and drops the connection when
// one is not answered within EchoTimeout.
func (c *Client) keepalive(conn *rpcConn) {
	t := time.NewTicker(c.opts.EchoInterval)
	defer t.Stop()
	for {
		select {
		case <-conn.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.EchoTimeout)
		_, err := conn.call(ctx, "echo", []byte(`["nodeflow keepalive"]`), nil)
		cancel()
		if err != nil && conn.closeErr() == nil {
			c.log.WithError(err).Warn("ovsdb: server did not answer echo, reconnecting")
			conn.close(fmt.Errorf("%s: %w: no echo reply within %s", c.endpoint, ErrDisconnected, c.opts.EchoTimeout))
		}
	}
}

// run waits for the connection to fail and reconnects, with back-off, until
// the client is closed.
func (c *Client) run(conn *rpcConn) {
	defer close(c.runDone)
	for {
		select {
		case <-conn.done:
		case <-c.closeCh:
			conn.close(ErrClosed)
			<-conn.readerDone
			return
		}
		// Let the old reader finish, so that no update from the old
		// connection is queued after a snapshot from the new one.
		<-conn.readerDone
		c.mu.Lock()
		c.conn = nil
		c.connReady = make(chan struct{})
		c.mu.Unlock()
		c.log.WithError(conn.closeErr()).Info("ovsdb: connection lost, reconnecting")

		backoff := c.opts.MinBackoff
		for attempt := 1; ; attempt++ {
			next, err := c.reconnect()
			if err == nil {
				conn = next
				c.log.WithField("attempt", attempt).Info("ovsdb: reconnected")
				break
			}
			c.log.WithError(err).WithField("attempt", attempt).Debug("ovsdb: reconnect failed")
			// Full jitter in [backoff/2, backoff).
			d := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
			select {
			case <-c.closeCh:
				return
			case <-time.After(d):
			}
			backoff *= 2
			if backoff > c.opts.MaxBackoff {
				backoff = c.opts.MaxBackoff
			}
		}
	}
}

// reconnect connects, restarts every monitor (each hands its handler a fresh
// snapshot), asks again for every lock, then makes the connection available
// to callers.
func (c *Client) reconnect() (*rpcConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.DialTimeout+c.opts.EchoTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.closeCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.monMu.Lock()
	defer c.monMu.Unlock()
	c.mu.Lock()
	mons := slices.Collect(maps.Values(c.monitors))
	c.mu.Unlock()
	for _, m := range mons {
		if err := m.start(ctx, conn); err != nil {
			conn.close(err)
			return nil, fmt.Errorf("restart monitor %s: %w", m.id, err)
		}
	}
	if err := c.relock(ctx, conn); err != nil {
		conn.close(err)
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.close(ErrClosed)
		return nil, ErrClosed
	}
	c.conn = conn
	close(c.connReady)
	return conn, nil
}

// Close closes the connection and stops reconnecting and every monitor;
// the channels of Interface cache subscriptions are closed, and the locks
// the client asked for are given back (Lock.Lost closes).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closeCh)
	mons := c.monitors
	c.monitors = map[string]*Monitor{}
	locks := c.locks
	c.locks = map[string]*Lock{}
	ic := c.ifaces
	c.mu.Unlock()
	<-c.runDone
	for _, m := range mons {
		m.stop()
	}
	for _, l := range locks {
		l.lose(fmt.Errorf("ovsdb: lock %q: %w", l.name, ErrClosed))
	}
	if ic != nil {
		ic.closeSubscriptions()
	}
	return nil
}

// onCurrent runs add with mu held when conn is still the client's
// connection, and reports whether it was. Callers hold monMu, so that what
// add registers is then started either on conn by the caller or on the
// next connection by reconnect, never on both.
func (c *Client) onCurrent(conn *rpcConn, add func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != conn {
		return false
	}
	add()
	return true
}

// getConn returns the current connection, waiting while the client reconnects.
func (c *Client) getConn(ctx context.Context) (*rpcConn, error) {
	for {
		c.mu.Lock()
		conn, ready, closed := c.conn, c.connReady, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if conn != nil && conn.closeErr() == nil {
			return conn, nil
		}
		if conn != nil {
			// Dead but not yet noticed by run: wait for the replacement.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: waiting for reconnection: %w", ErrDisconnected, ctx.Err())
			case <-c.closeCh:
				return nil, ErrClosed
			case <-conn.readerDone:
				// run replaces c.conn right after this; poll it again.
				select {
				case <-time.After(time.Millisecond):
				case <-ctx.Done():
				}
			}
			continue
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for reconnection: %w", ErrDisconnected, ctx.Err())
		case <-c.closeCh:
			return nil, ErrClosed
		}
	}
}

// rawCall sends one request on the current connection.
func (c *Client) rawCall(ctx context.Context, method string, params []byte) (json.RawMessage, error) {
	conn, err := c.getConn(ctx)
	if err != nil {
		return nil, err
	}
	return conn.call(ctx, method, params, nil)
}

// ListDBs returns the names of the server's databases.
func (c *Client) ListDBs(ctx context.Context) ([]string, error) {
	res, err := c.rawCall(ctx, "list_dbs", []byte("[]"))
	if err != nil {
		return nil, wrap(err, "list_dbs")
	}
	var dbs []string
	if err := json.Unmarshal(res, &dbs); err != nil {
		return nil, fmt.Errorf("ovsdb: list_dbs: %w: result: %v", ErrMalformed, err)
	}
	return dbs, nil
}

// Echo sends an echo request and waits for the reply.
func (c *Client) Echo(ctx context.Context) error {
	res, err := c.rawCall(ctx, "echo", []byte(`["nodeflow"]`))
	if err != nil {
		return wrap(err, "echo")
	}
	var got []string
	if err := json.Unmarshal(res, &got); err != nil || len(got) != 1 || got[0] != "nodeflow" {
		return fmt.Errorf("ovsdb: echo: %w: reply %s does not echo the request", ErrMalformed, truncate(res))
	}
	return nil
}

// GetSchema returns the schema of database db.
func (c *Client) GetSchema(ctx context.Context, db string) (*Schema, error) {
	params := appendJSONString([]byte("["), db)
	params = append(params, ']')
	res, err := c.rawCall(ctx, "get_schema", params)
	if err != nil {
		return nil, wrap(err, "get_schema "+db)
	}
	s, err := ParseSchema(res)
	if err != nil {
		return nil, wrap(err, "get_schema "+db)
	}
	return s, nil
}

// Transact runs ops as one transaction on database db. A failed operation
// gives an error wrapping *OpError. When ctx ends before the reply, the
// server is asked to cancel the transaction (it may still have committed).
func (c *Client) Transact(ctx context.Context, db string, ops ...Operation) ([]OpResult, error) {
	return c.transact(ctx, db, db, ops)
}

// transact runs a transaction whose errors read "ovsdb: transact <label>: ...".
func (c *Client) transact(ctx context.Context, db, label string, ops []Operation) ([]OpResult, error) {
	params := appendJSONString([]byte("["), db)
	for i, op := range ops {
		params = append(params, ',')
		var err error
		if params, err = op.appendJSON(params); err != nil {
			return nil, fmt.Errorf("ovsdb: transact %s: op %d (%s): %w", label, i, op, err)
		}
	}
	params = append(params, ']')
	res, err := c.rawCall(ctx, "transact", params)
	if err != nil {
		if isDisconnect(err) {
			return nil, wrap(err, "transact "+label+" (outcome unknown)")
		}
		return nil, wrap(err, "transact "+label)
	}
	results, err := parseTransactResult(res, ops)
	if err != nil {
		return nil, wrap(err, "transact "+label)
	}
	return results, nil
}

// truncate shortens raw JSON for error messages.
func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// onNotify handles the server's notifications (reader goroutine).
func (c *Client) onNotify(method string, params json.RawMessage) error {
	switch method {
	case "update":
		var p []json.RawMessage
		if err := json.Unmarshal(params, &p); err != nil || len(p) != 2 {
			return fmt.Errorf("%w: params: want [monitor-id, table-updates]", ErrMalformed)
		}
		var id string
		if err := json.Unmarshal(p[0], &id); err != nil {
			return fmt.Errorf("%w: monitor id %s is not a string", ErrMalformed, truncate(p[0]))
		}
		c.mu.Lock()
		m := c.monitors[id]
		c.mu.Unlock()
		if m == nil {
			return nil // a monitor that was just cancelled
		}
		tu, err := decodeTableUpdates(p[1])
		if err != nil {
			return fmt.Errorf("monitor %s: %w", id, err)
		}
		m.enqueue(MonitorUpdate{Tables: tu})
		return nil
	case "locked", "stolen":
		return c.onLockNotify(method, params)
	default:
		return nil
	}
}

// isDisconnect reports whether err comes from a lost connection.
func isDisconnect(err error) bool { return errors.Is(err, ErrDisconnected) }
