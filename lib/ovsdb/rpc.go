package ovsdb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// JSON-RPC 1.0 as RFC 7047 section 4 uses it, one JSON object after another
// on a stream socket, with no other framing:
//
//	request       {"method": <string>, "params": [...], "id": <non-null>}
//	response      {"result": <value>, "error": null | <error>, "id": <same id>}
//	notification  {"method": <string>, "params": [...], "id": null}
//
// Both sides send requests: the server sends "echo" (which must be answered)
// and the notifications "update" (monitors), "locked" and "stolen".

// ErrDisconnected is wrapped by the errors of calls that failed because the
// connection to the server was lost or could not be made. For a transact
// the outcome is then unknown: it may or may not have been committed.
var ErrDisconnected = errors.New("connection lost")

// ErrClosed is returned by calls on a Client after Close.
var ErrClosed = errors.New("ovsdb: client closed")

// RPCError is an error response to a JSON-RPC request.
type RPCError struct {
	// Method of the failed request.
	Method string
	// Err is the error string ("unknown database", "canceled", ...).
	Err string
	// Details is the server's explanation, if any.
	Details string
}

// Error formats the error as "<method>: <error>: <details>".
func (e *RPCError) Error() string {
	s := e.Method + ": " + e.Err
	if e.Details != "" {
		s += ": " + e.Details
	}
	return s
}

// rpcMessage is any JSON-RPC message as read from the wire.
type rpcMessage struct {
	Method *string          `json:"method"`
	Params json.RawMessage  `json:"params"`
	Result json.RawMessage  `json:"result"`
	Error  json.RawMessage  `json:"error"`
	ID     *json.RawMessage `json:"id"`
}

func isNull(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }

// call is one outstanding request.
type call struct {
	method string
	done   chan struct{}
	result json.RawMessage
	err    error
	// onReply, when set, runs in the reader goroutine before done is closed,
	// before any later message is read (monitors use it to queue the initial
	// snapshot ahead of the updates that follow it).
	onReply func(result json.RawMessage)
}

// rpcConn is one JSON-RPC connection.
type rpcConn struct {
	nc           net.Conn
	addr         string
	log          logrus.FieldLogger
	writeTimeout time.Duration
	// onNotify handles notifications in the reader goroutine. It returns an
	// error when the notification is malformed; the connection is then
	// dropped, since the caller's view of the database can no longer be trusted.
	onNotify func(method string, params json.RawMessage) error

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error // why the connection closed
	done    chan struct{}

	readerDone chan struct{}
}

func newRPCConn(nc net.Conn, addr string, log logrus.FieldLogger, writeTimeout time.Duration,
	onNotify func(string, json.RawMessage) error) *rpcConn {
	c := &rpcConn{
		nc: nc, addr: addr, log: log, writeTimeout: writeTimeout, onNotify: onNotify,
		pending: make(map[uint64]*call), done: make(chan struct{}), readerDone: make(chan struct{}),
	}
	go c.readLoop()
	return c
}

// close shuts the connection down with err as the reason; every pending call
// fails with it. Only the first reason is kept.
func (c *rpcConn) close(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	close(c.done)
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, cl := range pending {
		cl.err = err
		close(cl.done)
	}
}

// closeErr returns why the connection closed, or nil while it is open.
func (c *rpcConn) closeErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// write sends one encoded message.
func (c *rpcConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.writeTimeout > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	}
	if _, err := c.nc.Write(b); err != nil {
		err = fmt.Errorf("%s: %w: write: %v", c.addr, ErrDisconnected, err)
		c.close(err)
		return err
	}
	return nil
}

// start sends a request and returns its call, to be awaited with wait.
// params must encode as a JSON array.
func (c *rpcConn) start(method string, params []byte, onReply func(json.RawMessage)) (*call, uint64, error) {
	cl := &call{method: method, done: make(chan struct{}), onReply: onReply}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, 0, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cl
	c.mu.Unlock()

	b := make([]byte, 0, len(params)+64)
	b = append(b, `{"method":`...)
	b = appendJSONString(b, method)
	b = append(b, `,"params":`...)
	b = append(b, params...)
	b = append(b, `,"id":`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, '}')
	if err := c.write(b); err != nil {
		return nil, 0, err
	}
	return cl, id, nil
}

// wait waits for the reply of cl. When ctx ends first, the call is
// forgotten (its reply will be dropped) and, for a transact, the server is
// asked to cancel it.
func (c *rpcConn) wait(ctx context.Context, cl *call, id uint64) (json.RawMessage, error) {
	select {
	case <-cl.done:
		return cl.result, cl.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
	select {
	case <-cl.done: // the reply raced with ctx
		return cl.result, cl.err
	default:
	}
	if cl.method == "transact" {
		// RFC 7047 section 4.1.4: the server answers the original request
		// with the error "canceled", which the reader then drops.
		b := append([]byte(`{"method":"cancel","params":[`), strconv.AppendUint(nil, id, 10)...)
		b = append(b, `],"id":null}`...)
		_ = c.write(b)
	}
	return nil, ctx.Err()
}

// call sends a request and waits for its reply.
func (c *rpcConn) call(ctx context.Context, method string, params []byte, onReply func(json.RawMessage)) (json.RawMessage, error) {
	cl, id, err := c.start(method, params, onReply)
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, cl, id)
}

// readLoop reads messages until the connection fails.
func (c *rpcConn) readLoop() {
	defer close(c.readerDone)
	dec := json.NewDecoder(bufio.NewReaderSize(c.nc, 64<<10))
	for {
		var m rpcMessage
		if err := dec.Decode(&m); err != nil {
			if c.closeErr() != nil {
				return // closed on purpose, or by the writer
			}
			var syn *json.SyntaxError
			var typ *json.UnmarshalTypeError
			switch {
			case errors.As(err, &syn), errors.As(err, &typ):
				c.close(fmt.Errorf("%s: %w (%w: invalid JSON-RPC message: %v)", c.addr, ErrDisconnected, ErrMalformed, err))
			default:
				c.close(fmt.Errorf("%s: %w: read: %v", c.addr, ErrDisconnected, err))
			}
			return
		}
		if err := c.handle(&m); err != nil {
			c.close(fmt.Errorf("%s: %w (%w)", c.addr, ErrDisconnected, err))
			return
		}
	}
}

// handle dispatches one message.
func (c *rpcConn) handle(m *rpcMessage) error {
	if m.Method != nil {
		method := *m.Method
		if m.ID == nil || isNull(*m.ID) {
			if c.onNotify == nil {
				return nil
			}
			if err := c.onNotify(method, m.Params); err != nil {
				return fmt.Errorf("notification %s: %w", method, err)
			}
			return nil
		}
		// A request from the server.
		var reply []byte
		if method == "echo" {
			params := m.Params
			if isNull(params) {
				params = json.RawMessage("[]")
			}
			reply = append([]byte(`{"result":`), params...)
			reply = append(reply, `,"error":null,"id":`...)
		} else {
			reply = []byte(`{"result":null,"error":"unknown method","id":`)
		}
		reply = append(reply, *m.ID...)
		reply = append(reply, '}')
		// Reply from another goroutine: the server may be blocked writing to
		// us, and the reader must keep reading.
		go func() { _ = c.write(reply) }()
		return nil
	}
	if m.ID == nil || isNull(*m.ID) {
		return fmt.Errorf("%w: message with neither method nor id", ErrMalformed)
	}
	id, err := strconv.ParseUint(string(*m.ID), 10, 64)
	if err != nil {
		c.log.WithField("id", string(*m.ID)).Debug("ovsdb: reply with an id we never sent, dropped")
		return nil
	}
	c.mu.Lock()
	cl := c.pending[id]
	if cl != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
	if cl == nil {
		// A reply to a call whose caller gave up (such as a canceled transact).
		return nil
	}
	if !isNull(m.Error) {
		cl.err = decodeRPCError(cl.method, m.Error)
	} else {
		cl.result = m.Result
		if cl.onReply != nil {
			cl.onReply(m.Result)
		}
	}
	close(cl.done)
	return nil
}

// decodeRPCError decodes the "error" member of a response: a string, or an
// object with "error" and "details".
func decodeRPCError(method string, raw json.RawMessage) *RPCError {
	e := &RPCError{Method: method}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		e.Err = s
		return e
	}
	var obj struct {
		Error   string `json:"error"`
		Details string `json:"details"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Error != "" {
		e.Err, e.Details = obj.Error, obj.Details
		return e
	}
	e.Err = string(raw)
	return e
}
