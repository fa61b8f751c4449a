package ofconn

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/lib/openflow"
)

// call is a request waiting for its reply: one message, or the parts of a
// multipart reply, or an ERROR.
type call struct {
	done  chan struct{} // closed when complete
	parts [][]byte      // reply messages, whole (set before done closes)
	err   error         // *openflow.OFError, or why the session ended
}

// batch is a range of consecutive xids of messages that get no reply on
// success (flow mods, bundle adds); errors for them are collected.
type batch struct {
	first uint32
	n     uint32
	errs  []batchErr
}

type batchErr struct {
	index int // within the batch
	err   error
}

func (b *batch) contains(xid uint32) bool { return xid-b.first < b.n }

// session is one connection to the switch. It never reconnects; Conn
// replaces it.
type session struct {
	c        *Conn
	id       uint64
	nc       net.Conn
	version  openflow.Version
	features openflow.FeaturesReply
	log      logrus.FieldLogger

	mu      sync.Mutex
	calls   map[uint32]*call
	batches []*batch
	derr    error // non-nil once failed: the error operations get

	wmu sync.Mutex // serialises writes; messages are never interleaved

	ctx      context.Context // ends when the session fails
	cancel   context.CancelFunc
	done     chan struct{} // closed when the session fails
	readDone chan struct{} // closed when the read loop exits
	err      error         // why the session failed (set before done closes)
	failOnce sync.Once
	lastRecv atomic.Int64 // unix nanoseconds of the last message received
}

func newSession(c *Conn, id uint64, nc net.Conn, v openflow.Version) *session {
	s := &session{
		c:        c,
		id:       id,
		nc:       nc,
		version:  v,
		log:      c.log.WithField("session", id),
		calls:    map[uint32]*call{},
		done:     make(chan struct{}),
		readDone: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	s.lastRecv.Store(time.Now().UnixNano())
	return s
}

// fail ends the session: the socket is closed and every waiting operation
// gets ErrDisconnected (or ErrClosed) wrapping err.
func (s *session) fail(err error) {
	s.failOnce.Do(func() {
		derr := err
		if !errors.Is(err, ErrClosed) {
			derr = fmt.Errorf("%w: %w", ErrDisconnected, err)
		}
		s.mu.Lock()
		s.err = err
		s.derr = derr
		calls := s.calls
		s.calls = nil
		s.batches = nil
		s.mu.Unlock()
		s.cancel()
		s.nc.Close()
		for _, cl := range calls {
			cl.err = derr
			close(cl.done)
		}
		close(s.done)
	})
}

// register adds a call for xid.
func (s *session) register(xid uint32) (*call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.derr != nil {
		return nil, s.derr
	}
	cl := &call{done: make(chan struct{})}
	s.calls[xid] = cl
	return cl, nil
}

// registerBatch adds a batch and, if barrierXid is non-zero, a call for the
// barrier that follows it.
func (s *session) registerBatch(b *batch, barrierXid uint32) (*call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.derr != nil {
		return nil, s.derr
	}
	s.batches = append(s.batches, b)
	if barrierXid == 0 {
		return nil, nil
	}
	cl := &call{done: make(chan struct{})}
	s.calls[barrierXid] = cl
	return cl, nil
}

// takeBatchErrors removes b and returns its errors in message order.
func (s *session) takeBatchErrors(b *batch) []batchErr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.batches {
		if x == b {
			s.batches = append(s.batches[:i:i], s.batches[i+1:]...)
			break
		}
	}
	errs := b.errs
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].index < errs[j].index })
	return errs
}

// batchErrors returns b's errors so far without removing b.
func (s *session) batchErrors(b *batch) []batchErr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]batchErr(nil), b.errs...)
}

// wait waits for cl or ctx.
func (s *session) wait(ctx context.Context, cl *call) ([][]byte, error) {
	select {
	case <-cl.done:
		return cl.parts, cl.err
	case <-ctx.Done():
		// The call stays registered: a late reply completes it silently.
		return nil, ctx.Err()
	}
}

// write sends whole messages. A failed write, or one interrupted by ctx
// after some bytes went out, leaves the stream in an unknown state, so it
// ends the session (Conn reconnects).
func (s *session) write(ctx context.Context, chunks ...[]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	derr := s.derr
	s.mu.Unlock()
	if derr != nil {
		return derr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.nc.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	var err error
	written := 0
	for _, b := range chunks {
		var n int
		n, err = s.nc.Write(b)
		written += n
		if err != nil {
			break
		}
	}
	if !stop() {
		<-fired
		s.nc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		if ctx.Err() != nil {
			if written == 0 {
				// Nothing went out: the stream is intact.
				return ctx.Err()
			}
			err = fmt.Errorf("write interrupted after %d bytes: %w", written, ctx.Err())
		}
		s.fail(fmt.Errorf("write: %w", err))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.derr
	}
	return nil
}

// readLoop reads and dispatches messages until the connection fails. It
// never blocks on anything but the socket: replies complete calls,
// asynchronous messages go to bounded queues, echo replies are written by
// another goroutine.
func (s *session) readLoop() {
	defer s.c.wg.Done()
	defer close(s.readDone)
	r := bufio.NewReaderSize(s.nc, 256<<10)
	for {
		msg, err := readMessage(r, nil)
		if err != nil {
			s.fail(fmt.Errorf("read: %w", err))
			return
		}
		if err := s.checkFraming(msg); err != nil {
			s.fail(err)
			return
		}
		s.lastRecv.Store(time.Now().UnixNano())
		s.dispatch(msg)
	}
}

// checkFraming rejects a message whose version is not the negotiated one.
// OVS sends every message in the negotiated version, so another version
// means the stream is out of step: OVS 3.1 writes a multipart reply entry
// larger than 64 KiB (a group with thousands of buckets) whole, with its
// 16-bit length fields wrapped, and the bytes after the stated length would
// be read as messages. The session is dropped and reconnected instead.
func (s *session) checkFraming(msg []byte) error {
	v, t := openflow.Version(msg[0]), openflow.MsgType(msg[1])
	if v == s.version {
		return nil
	}
	switch t {
	case openflow.TypeHello, openflow.TypeError, openflow.TypeEchoRequest, openflow.TypeEchoReply:
		if v != 0 {
			return nil
		}
	}
	return fmt.Errorf("read: message of version 0x%02x (type %d, length %d) on an %s connection: stream out of step: %w",
		uint8(v), t, len(msg), s.version, openflow.ErrMalformed)
}

// mpReplyMore reports whether msg is a multipart reply with more parts to
// come (OFPMPF_REPLY_MORE at body offset 2).
func mpReplyMore(msg []byte) bool {
	return openflow.MsgType(msg[1]) == openflow.TypeMultipartReply && len(msg) >= 12 &&
		binary.BigEndian.Uint16(msg[10:12])&1 != 0
}

func (s *session) dispatch(msg []byte) {
	t := openflow.MsgType(msg[1])
	xid := binary.BigEndian.Uint32(msg[4:8])
	if t == openflow.TypeEchoRequest {
		reply := append([]byte(nil), msg...)
		reply[1] = byte(openflow.TypeEchoReply)
		go s.write(s.ctx, reply)
		return
	}
	if xid != 0 {
		s.mu.Lock()
		if cl, ok := s.calls[xid]; ok {
			complete := true
			if t == openflow.TypeError {
				cl.err = decodeError(msg)
			} else {
				cl.parts = append(cl.parts, msg)
				complete = !mpReplyMore(msg)
			}
			if complete {
				delete(s.calls, xid)
				close(cl.done)
			}
			s.mu.Unlock()
			return
		}
		for _, b := range s.batches {
			if b.contains(xid) {
				if t == openflow.TypeError {
					b.errs = append(b.errs, batchErr{index: int(xid - b.first), err: decodeError(msg)})
				}
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
	}
	s.c.dispatchAsync(s, msg)
}

// decodeError decodes an ERROR message into an *openflow.OFError.
func decodeError(msg []byte) error {
	_, m, err := openflow.Unmarshal(msg)
	if err != nil {
		return fmt.Errorf("undecodable error message %x: %w", msg, err)
	}
	if e, ok := m.(*openflow.OFError); ok {
		return e
	}
	return fmt.Errorf("error message decoded as %T", m)
}

// send sends m and returns the call its reply will complete.
func (s *session) send(ctx context.Context, m openflow.Message) (*call, error) {
	xid := s.c.allocXids(1)
	b, err := openflow.Marshal(s.version, xid, m)
	if err != nil {
		return nil, err
	}
	cl, err := s.register(xid)
	if err != nil {
		return nil, err
	}
	if err := s.write(ctx, b); err != nil {
		return nil, err
	}
	return cl, nil
}

// roundTrip sends m and waits for its reply messages.
func (s *session) roundTrip(ctx context.Context, m openflow.Message) ([][]byte, error) {
	cl, err := s.send(ctx, m)
	if err != nil {
		return nil, err
	}
	return s.wait(ctx, cl)
}

// multipart sends a multipart request followed by a barrier and returns the
// reply parts once the barrier reply has arrived too. OVS 3.1 sends a reply
// entry over 64 KiB with wrapped length fields; the reply then looks
// complete but the stream is out of step, which checkFraming notices before
// the barrier reply can arrive. Waiting for the barrier turns that into an
// error instead of a silently truncated reply.
func (s *session) multipart(ctx context.Context, req openflow.Message) ([][]byte, error) {
	xid := s.c.allocXids(2)
	enc := encoder{v: s.version, left: 2}
	if err := enc.add(xid, req); err != nil {
		return nil, err
	}
	if err := enc.add(xid+1, &openflow.BarrierRequest{}); err != nil {
		return nil, err
	}
	cl, err := s.register(xid)
	if err != nil {
		return nil, err
	}
	barrier, err := s.register(xid + 1)
	if err != nil {
		return nil, err
	}
	if err := s.write(ctx, enc.finish()...); err != nil {
		return nil, err
	}
	parts, err := s.wait(ctx, cl)
	if err != nil {
		return nil, err
	}
	if _, err := s.wait(ctx, barrier); err != nil {
		return nil, err
	}
	return parts, nil
}

// request sends m and decodes its single reply.
func (s *session) request(ctx context.Context, m openflow.Message) (openflow.Message, error) {
	parts, err := s.roundTrip(ctx, m)
	if err != nil {
		return nil, err
	}
	_, reply, err := openflow.Unmarshal(parts[0])
	if err != nil {
		return nil, fmt.Errorf("decode reply: %w", err)
	}
	return reply, nil
}

// chunkSize is how many encoded bytes are written at once; writes of other
// goroutines can slip in between chunks.
const chunkSize = 256 << 10

// newChunk returns an empty buffer to encode n messages into: room for a
// whole chunk when they fill one, a little when they are few. The buffer
// grows if the guess is short. A pass that changes one flow sends a few
// hundred bytes: allocating and clearing a whole chunk for it (320 KiB)
// made most of the garbage of an endpoint change (docs/benchmarks.md).
func newChunk(n int) []byte {
	const guess = 256 // bytes a message, enough for most flow mods
	return make([]byte, 0, min(chunkSize+openflow.MaxMessageLen, max(n, 1)*guess))
}

// encoder encodes messages into chunks of about chunkSize bytes.
type encoder struct {
	v      openflow.Version
	left   int // messages still to add, to size the next chunk
	chunks [][]byte
	cur    []byte
}

func (e *encoder) add(xid uint32, m openflow.Message) error {
	if e.cur == nil {
		e.cur = newChunk(e.left)
	}
	e.left--
	var err error
	e.cur, err = openflow.AppendMessage(e.cur, e.v, xid, m)
	if err != nil {
		return err
	}
	if len(e.cur) >= chunkSize {
		e.chunks = append(e.chunks, e.cur)
		e.cur = nil
	}
	return nil
}

func (e *encoder) finish() [][]byte {
	if len(e.cur) > 0 {
		e.chunks = append(e.chunks, e.cur)
		e.cur = nil
	}
	return e.chunks
}

// apply sends msgs followed by a barrier, without waiting in between, and
// returns the switch's errors for them as a *BatchError.
func (s *session) apply(ctx context.Context, msgs []openflow.Message) error {
	n := uint32(len(msgs))
	first := s.c.allocXids(n + 1)
	enc := encoder{v: s.version, left: len(msgs) + 1}
	for i, m := range msgs {
		if err := enc.add(first+uint32(i), m); err != nil {
			return &BatchError{Errors: []*MessageError{{Index: i, Total: len(msgs), Message: m, Err: err}}}
		}
	}
	if err := enc.add(first+n, &openflow.BarrierRequest{}); err != nil {
		return err
	}
	b := &batch{first: first, n: n}
	barrier, err := s.registerBatch(b, first+n)
	if err != nil {
		return err
	}
	defer s.takeBatchErrors(b)
	if err := s.write(ctx, enc.finish()...); err != nil {
		return err
	}
	if _, err := s.wait(ctx, barrier); err != nil {
		return err
	}
	return batchError(s.takeBatchErrors(b), 0, msgs)
}

// batchError builds a *BatchError for errs (indexes relative to offset)
// among msgs, or returns nil.
func batchError(errs []batchErr, offset int, msgs []openflow.Message) error {
	if len(errs) == 0 {
		return nil
	}
	be := &BatchError{}
	for _, e := range errs {
		i := offset + e.index
		var m openflow.Message
		if i >= 0 && i < len(msgs) {
			m = msgs[i]
		}
		be.Errors = append(be.Errors, &MessageError{Index: i, Total: len(msgs), Message: m, Err: e.err})
	}
	return be
}

// keepalive sends echo requests and ends the session when one goes
// unanswered for EchoTimeout.
func (s *session) keepalive() {
	defer s.c.wg.Done()
	t := time.NewTicker(s.c.opts.EchoInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.c.opts.EchoTimeout)
		_, err := s.roundTrip(ctx, &openflow.EchoRequest{})
		cancel()
		switch {
		case err == nil:
		case s.ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			s.fail(fmt.Errorf("%w: no reply within %s", ErrEchoTimeout, s.c.opts.EchoTimeout))
			return
		default:
			s.log.WithError(err).Warn("openflow echo failed")
			return
		}
	}
}

// Table statistics multipart request (OF1.3-OF1.5), as bytes:
//
//	2 bytes: multipart type 3 (OFPMP_TABLE)
//	2 bytes: flags 0
//	4 bytes: pad
var tableStatsRequest = &openflow.RawMessage{
	Header: openflow.Header{Type: openflow.TypeMultipartRequest},
	Body:   []byte{0, 3, 0, 0, 0, 0, 0, 0},
}

// flowCount sums active_count over all tables. Reply entries (24 bytes):
//
//	1 byte:  table_id
//	3 bytes: pad
//	4 bytes: active_count
//	8 bytes: lookup_count
//	8 bytes: matched_count
func (s *session) flowCount(ctx context.Context) (int64, error) {
	parts, err := s.roundTrip(ctx, tableStatsRequest)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range parts {
		if openflow.MsgType(p[1]) != openflow.TypeMultipartReply || len(p) < 16 {
			return 0, fmt.Errorf("table stats: unexpected reply %x", p[:min(len(p), 16)])
		}
		body := p[16:]
		if len(body)%24 != 0 {
			return 0, fmt.Errorf("table stats: body of %d bytes is not a multiple of 24: %w", len(body), openflow.ErrMalformed)
		}
		for ; len(body) >= 24; body = body[24:] {
			n += int64(binary.BigEndian.Uint32(body[4:8]))
		}
	}
	return n, nil
}
