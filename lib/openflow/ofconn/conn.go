package ofconn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/lib/openflow"
)

// Options configure a Conn. The zero value works: OF1.5 preferred, OF1.3
// accepted, controller id 0, packet-ins on.
type Options struct {
	// Versions lists the OpenFlow versions to offer, in any order. The
	// highest one the switch also speaks is used. Default: OF1.5 and OF1.3.
	Versions []openflow.Version

	// ControllerID is announced with NXT_SET_CONTROLLER_ID. Packet-ins from
	// controller(id=N) actions reach only connections that announced N;
	// output:CONTROLLER and table-miss packet-ins use id 0.
	ControllerID uint16
	// MissSendLen is sent with SET_CONFIG. OVS delivers no asynchronous
	// messages at all to a service connection (such as <bridge>.mgmt) whose
	// miss_send_len is 0. Default: 0xffff (whole packets).
	MissSendLen uint16
	// Async overrides the asynchronous message configuration. Default:
	// packet-ins for no-match and action reasons (OF1.5 also action-set,
	// group and packet-out), all port-status reasons, all flow-removed
	// reasons, for the equal/primary role; port-status also for secondary.
	Async *openflow.AsyncConfig

	// EchoInterval is how often to send an echo request. Default 5 s;
	// negative disables keepalive.
	EchoInterval time.Duration
	// EchoTimeout is how long an echo request may stay unanswered before the
	// switch is declared dead and the connection is reset. Default 10 s.
	EchoTimeout time.Duration
	// DialTimeout bounds one connection attempt, handshake and session
	// setup included. Default 10 s.
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the back-off between connection
	// attempts, which doubles from the minimum. Defaults 1 s and 8 s.
	ReconnectMin, ReconnectMax time.Duration

	// DetectEmptyTables makes every (re)connect count the installed flows
	// (table statistics) and report a switch whose tables came back empty as
	// restarted. Use it with fail_mode=secure bridges: a standalone bridge
	// without a controller has a NORMAL flow of its own.
	DetectEmptyTables bool

	// OnConnect is called after each successful connection and session
	// setup, before Dial returns for the first one. Calls are serialised.
	// ctx ends when that connection is lost or the Conn is closed. The
	// callback may use c (for instance to replay flows); it delays the
	// handling of a later disconnect until it returns.
	OnConnect func(ctx context.Context, c *Conn, ev ConnectEvent)

	// Handlers receive asynchronous messages, each kind in its own
	// goroutine through a bounded queue. A nil handler ignores that kind.
	Handlers Handlers
	// QueueLen is the capacity of each handler's queue; messages arriving
	// when it is full are dropped and counted. Default 1024.
	QueueLen int

	// Logger receives connection events. Default: logrus's standard logger.
	Logger logrus.FieldLogger
}

func (o Options) withDefaults() Options {
	if len(o.Versions) == 0 {
		o.Versions = []openflow.Version{openflow.Version15, openflow.Version13}
	}
	if o.MissSendLen == 0 {
		o.MissSendLen = openflow.MissSendLenNoBuffer
	}
	if o.EchoInterval == 0 {
		o.EchoInterval = 5 * time.Second
	}
	if o.EchoTimeout == 0 {
		o.EchoTimeout = 10 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.ReconnectMin == 0 {
		o.ReconnectMin = time.Second
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = 8 * time.Second
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	if o.QueueLen <= 0 {
		o.QueueLen = 1024
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	return o
}

// DefaultAsyncConfig returns the asynchronous message configuration Conn
// sends when Options.Async is nil, for version v.
func DefaultAsyncConfig(v openflow.Version) openflow.AsyncConfig {
	c := openflow.AsyncConfig{
		PacketIn:    openflow.AsyncMasks{Primary: 1<<openflow.PacketInReasonNoMatch | 1<<openflow.PacketInReasonAction},
		PortStatus:  openflow.AsyncMasks{Primary: 0x7, Secondary: 0x7},
		FlowRemoved: openflow.AsyncMasks{Primary: 0xf},
	}
	if v >= openflow.Version14 {
		c.PacketIn.Primary |= 1<<openflow.PacketInReasonActionSet | 1<<openflow.PacketInReasonGroup | 1<<openflow.PacketInReasonPacketOut
		c.FlowRemoved.Primary = 0x3f
	}
	return c
}

// ConnectEvent describes one successful (re)connection.
type ConnectEvent struct {
	// Session counts connections, from 1.
	Session uint64
	// Version is the negotiated OpenFlow version.
	Version openflow.Version
	// Features is the switch's FEATURES_REPLY.
	Features openflow.FeaturesReply
	// FlowCount is the number of installed flows, or -1 when
	// Options.DetectEmptyTables is off.
	FlowCount int64
	// Restarted reports a reconnection to a switch that lost its state:
	// its datapath id or features changed, or (with DetectEmptyTables) its
	// tables are empty. The caller should replay flows, groups and meters.
	Restarted bool
	// Reason explains Restarted.
	Reason string
}

// Conn is an OpenFlow connection to one switch that reconnects by itself.
// It is safe for concurrent use.
//
// Every operation takes a context. A context that ends while the operation
// waits for the switch just abandons the wait; one that ends in the middle
// of writing a message resets the connection, since half a message cannot
// be taken back.
type Conn struct {
	addr             string
	network, address string
	opts             Options
	log              logrus.FieldLogger

	xid      atomic.Uint32
	bundleID atomic.Uint32

	mu       sync.Mutex
	cur      *session // nil while disconnected
	closed   bool
	lastErr  error                   // why the last session ended
	sessions uint64                  // connections that completed the HELLO exchange
	connects uint64                  // sessions set up and handed to OnConnect
	features *openflow.FeaturesReply // of the last session

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	redial chan struct{} // cuts a back-off wait short (Redial)

	queues [numKinds]*asyncQueue
}

// parseAddr splits "unix:PATH" or "tcp:HOST:PORT"; a bare path is a unix
// socket.
func parseAddr(addr string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(addr, "unix:"):
		network, address = "unix", strings.TrimPrefix(addr, "unix:")
	case strings.HasPrefix(addr, "tcp:"):
		network, address = "tcp", strings.TrimPrefix(addr, "tcp:")
		if _, _, err := net.SplitHostPort(address); err != nil {
			return "", "", fmt.Errorf("address %q: %w", addr, err)
		}
	case strings.HasPrefix(addr, "/"):
		network, address = "unix", addr
	default:
		return "", "", fmt.Errorf("address %q: want unix:PATH or tcp:HOST:PORT", addr)
	}
	if address == "" {
		return "", "", fmt.Errorf("address %q: empty", addr)
	}
	return network, address, nil
}

// Dial connects to the switch at addr ("unix:<rundir>/<bridge>.mgmt" or
// "tcp:host:port"), negotiates the version, sets up the session so that
// asynchronous messages reach this connection, and calls Options.OnConnect.
//
// Dial keeps trying, with back-off, until it succeeds or ctx ends; the error
// then wraps the last failure. Afterwards the Conn reconnects by itself
// whenever the connection is lost, until Close.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	network, address, err := parseAddr(addr)
	if err != nil {
		return nil, &OpError{Op: "dial", Addr: addr, Err: err}
	}
	opts = opts.withDefaults()
	c := &Conn{
		addr:    addr,
		network: network,
		address: address,
		opts:    opts,
		log:     opts.Logger.WithField("switch", addr),
		redial:  make(chan struct{}, 1),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.startQueues()

	s, ev, err := c.connectWithBackoff(ctx)
	if err != nil {
		c.Close()
		return nil, &OpError{Op: "dial", Addr: addr, Err: err}
	}
	first := make(chan struct{})
	c.wg.Add(1)
	go c.supervise(s, ev, first)
	select {
	case <-first:
	case <-ctx.Done():
		// OnConnect is still running; the Conn stays usable.
	}
	return c, nil
}

// Close shuts the connection down and stops reconnecting. Pending
// operations fail with ErrClosed. Close waits for running handlers and
// OnConnect to return; queued asynchronous messages are dropped.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s := c.cur
	c.cur = nil
	c.mu.Unlock()
	c.cancel()
	if s != nil {
		s.fail(ErrClosed)
	}
	c.wg.Wait()
	return nil
}

// Redial makes a Conn that is waiting between connection attempts try
// again at once, with its back-off started afresh. Call it when the switch
// is known to be back, for instance right after the bridge was recreated,
// so that reconnection does not wait out the back-off. It does not disturb
// a live connection; a request made while connected shortens only the first
// wait of the next reconnection.
func (c *Conn) Redial() {
	select {
	case c.redial <- struct{}{}:
	default:
	}
}

// Version returns the version negotiated by the current connection, or 0
// while disconnected.
func (c *Conn) Version() openflow.Version {
	if s := c.session(); s != nil {
		return s.version
	}
	return 0
}

// Features returns the FEATURES_REPLY of the current (or last) connection.
func (c *Conn) Features() (openflow.FeaturesReply, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.features == nil {
		return openflow.FeaturesReply{}, false
	}
	return *c.features, true
}

// Connected reports whether a session is up.
func (c *Conn) Connected() bool { return c.session() != nil }

func (c *Conn) session() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// currentSession returns the live session or an error saying why there is
// none.
func (c *Conn) currentSession() (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.cur == nil {
		if c.lastErr != nil {
			return nil, fmt.Errorf("%w: %w", ErrDisconnected, c.lastErr)
		}
		return nil, ErrDisconnected
	}
	return c.cur, nil
}

// allocXids reserves n consecutive transaction ids, none of them 0 (the xid
// of OVS's asynchronous messages), and returns the first.
func (c *Conn) allocXids(n uint32) uint32 {
	for {
		end := c.xid.Add(n)
		first := end - n + 1
		if first != 0 && first <= end {
			return first
		}
	}
}

// connectWithBackoff retries connect until it succeeds or ctx ends.
func (c *Conn) connectWithBackoff(ctx context.Context) (*session, ConnectEvent, error) {
	backoff := c.opts.ReconnectMin
	var lastErr error
	for attempt := 1; ; attempt++ {
		s, ev, err := c.connect(ctx)
		if err == nil {
			return s, ev, nil
		}
		// An attempt cut short by ctx says less than the one before it.
		if ctx.Err() == nil || lastErr == nil {
			lastErr = err
		}
		c.log.WithFields(logrus.Fields{"attempt": attempt, "retry_in": backoff}).WithError(err).Debug("openflow connect failed")
		select {
		case <-ctx.Done():
			return nil, ConnectEvent{}, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), lastErr)
		case <-c.ctx.Done():
			return nil, ConnectEvent{}, ErrClosed
		case <-c.redial:
			backoff = c.opts.ReconnectMin
			continue
		case <-time.After(backoff):
		}
		backoff *= 2
		if backoff > c.opts.ReconnectMax {
			backoff = c.opts.ReconnectMax
		}
	}
}

// supervise owns the connection: it reports each session, waits for it to
// end and reconnects, until Close.
func (c *Conn) supervise(s *session, ev ConnectEvent, first chan struct{}) {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			s.fail(ErrClosed)
			if first != nil {
				close(first)
			}
			return
		}
		c.cur = s
		c.connects++
		c.mu.Unlock()
		c.log.WithFields(logrus.Fields{"session": ev.Session, "version": ev.Version,
			"dpid": fmt.Sprintf("%016x", ev.Features.DatapathID), "restarted": ev.Restarted, "reason": ev.Reason}).Info("openflow connected")
		if c.opts.OnConnect != nil {
			c.opts.OnConnect(s.ctx, c, ev)
		}
		if first != nil {
			close(first)
			first = nil
		}
		select {
		case <-s.done:
		case <-c.ctx.Done():
			s.fail(ErrClosed)
			<-s.done
		}
		c.mu.Lock()
		if c.cur == s {
			c.cur = nil
		}
		c.lastErr = s.err
		c.mu.Unlock()
		if errors.Is(s.err, ErrClosed) {
			return
		}
		c.log.WithField("session", ev.Session).WithError(s.err).Warn("openflow connection lost, reconnecting")
		var err error
		s, ev, err = c.connectWithBackoff(c.ctx)
		if err != nil {
			return
		}
	}
}

// connect makes one connection attempt: dial, HELLO, session setup.
func (c *Conn) connect(ctx context.Context) (*session, ConnectEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, c.network, c.address)
	if err != nil {
		return nil, ConnectEvent{}, err
	}
	v, err := c.hello(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, ConnectEvent{}, fmt.Errorf("hello: %w", err)
	}
	c.mu.Lock()
	c.sessions++
	id := c.sessions
	c.mu.Unlock()
	s := newSession(c, id, nc, v)
	c.wg.Add(1)
	go s.readLoop()

	ev, err := c.setup(ctx, s)
	if err != nil {
		s.fail(fmt.Errorf("session setup: %w", err))
		<-s.readDone
		return nil, ConnectEvent{}, fmt.Errorf("session setup: %w", err)
	}
	if c.opts.EchoInterval > 0 {
		c.wg.Add(1)
		go s.keepalive()
	}
	return s, ev, nil
}

// hello exchanges HELLO messages and returns the negotiated version.
func (c *Conn) hello(ctx context.Context, nc net.Conn) (openflow.Version, error) {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
		defer nc.SetDeadline(time.Time{})
	}
	top := c.opts.Versions[0]
	for _, v := range c.opts.Versions {
		if v > top {
			top = v
		}
	}
	b, err := openflow.Marshal(top, c.allocXids(1), openflow.NewHello(c.opts.Versions...))
	if err != nil {
		return 0, err
	}
	if _, err := nc.Write(b); err != nil {
		return 0, err
	}
	// Unbuffered: bytes after the HELLO belong to the session's reader.
	msg, err := readMessage(nc, nil)
	if err != nil {
		return 0, err
	}
	h, m, err := openflow.Unmarshal(msg)
	if err != nil {
		return 0, err
	}
	switch m := m.(type) {
	case *openflow.Hello:
		v, ok := openflow.NegotiateVersion(c.opts.Versions, h.Version, m)
		if !ok {
			text := fmt.Sprintf("We support %v; you support %s.", c.opts.Versions, peerVersions(h.Version, m))
			if b, err := openflow.Marshal(min(h.Version, top), h.Xid, &openflow.OFError{Type: openflow.ErrTypeHelloFailed, Data: []byte(text)}); err == nil {
				nc.Write(b)
			}
			return 0, fmt.Errorf("%w: %s", ErrVersion, text)
		}
		return v, nil
	case *openflow.OFError:
		return 0, m
	default:
		return 0, fmt.Errorf("switch sent %T before HELLO", m)
	}
}

func peerVersions(hv openflow.Version, h *openflow.Hello) string {
	var vs []string
	for v := openflow.Version10; v <= max(hv, openflow.Version15); v++ {
		if h.Supports(hv, v) {
			vs = append(vs, v.String())
		}
	}
	if len(vs) == 0 {
		return "none"
	}
	return strings.Join(vs, ", ")
}

// setup configures a fresh session so asynchronous messages reach it, reads
// the features and decides whether the switch restarted.
func (c *Conn) setup(ctx context.Context, s *session) (ConnectEvent, error) {
	reply, err := s.request(ctx, &openflow.FeaturesRequest{})
	if err != nil {
		return ConnectEvent{}, fmt.Errorf("features: %w", err)
	}
	feat, ok := reply.(*openflow.FeaturesReply)
	if !ok {
		return ConnectEvent{}, fmt.Errorf("features: switch answered %T", reply)
	}
	s.features = *feat
	async := DefaultAsyncConfig(s.version)
	if c.opts.Async != nil {
		async = *c.opts.Async
	}
	msgs := []openflow.Message{
		&openflow.SetConfig{Flags: openflow.ConfigFragNormal, MissSendLen: c.opts.MissSendLen},
		&openflow.NXSetControllerID{ID: c.opts.ControllerID},
		&openflow.NXSetPacketInFormat{Format: openflow.PacketInFormatNXT2},
		&openflow.SetAsync{Config: async},
	}
	if err := s.apply(ctx, msgs); err != nil {
		return ConnectEvent{}, err
	}
	ev := ConnectEvent{Session: s.id, Version: s.version, Features: *feat, FlowCount: -1}
	if c.opts.DetectEmptyTables {
		n, err := s.flowCount(ctx)
		if err != nil {
			return ConnectEvent{}, fmt.Errorf("count flows: %w", err)
		}
		ev.FlowCount = n
	}
	c.mu.Lock()
	prev := c.features
	c.features = feat
	c.mu.Unlock()
	switch {
	case prev == nil:
	case prev.DatapathID != feat.DatapathID:
		ev.Restarted, ev.Reason = true, fmt.Sprintf("datapath id changed from %016x to %016x", prev.DatapathID, feat.DatapathID)
	case *prev != *feat:
		ev.Restarted, ev.Reason = true, fmt.Sprintf("features changed from %+v to %+v", *prev, *feat)
	case ev.FlowCount == 0:
		ev.Restarted, ev.Reason = true, "flow tables are empty"
	}
	return ev, nil
}

// readMessage reads one whole message. buf, if large enough, is reused.
func readMessage(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [openflow.HeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[2:4]))
	if n < openflow.HeaderLen {
		return nil, fmt.Errorf("message header %x: length %d: %w", hdr, n, openflow.ErrMalformed)
	}
	if cap(buf) >= n {
		buf = buf[:n]
	} else {
		buf = make([]byte, n)
	}
	copy(buf, hdr[:])
	if _, err := io.ReadFull(r, buf[openflow.HeaderLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}
