package ofconn

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/lib/openflow"
)

// Kind classifies asynchronous messages (those that answer no request of
// this Conn; OVS sends them with xid 0).
type Kind int

// Kinds of asynchronous messages.
const (
	// KindPacketIn: OFPT_PACKET_IN, NXT_PACKET_IN, NXT_PACKET_IN2.
	KindPacketIn Kind = iota
	// KindFlowRemoved: OFPT_FLOW_REMOVED, NXT_FLOW_REMOVED.
	KindFlowRemoved
	// KindPortStatus: OFPT_PORT_STATUS.
	KindPortStatus
	// KindFlowMonitor: flow monitor updates (OF1.4+ OFPMP_FLOW_MONITOR
	// replies, the ONF and Nicira forms) and their paused/resumed notices.
	KindFlowMonitor
	// KindError: ERROR messages that match no pending request.
	KindError
	// KindOther: everything else (role status, table status, late replies).
	KindOther
	numKinds
)

// String returns the kind's name, e.g. "packet-in".
func (k Kind) String() string {
	switch k {
	case KindPacketIn:
		return "packet-in"
	case KindFlowRemoved:
		return "flow-removed"
	case KindPortStatus:
		return "port-status"
	case KindFlowMonitor:
		return "flow-monitor"
	case KindError:
		return "error"
	case KindOther:
		return "other"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// AsyncMessage is an asynchronous message handed to a Handler.
type AsyncMessage struct {
	Kind Kind
	// Session is the connection it arrived on (ConnectEvent.Session).
	Session uint64
	Header  openflow.Header
	// Message is the decoded message; a *openflow.RawMessage when it could
	// not be decoded (then Err says why).
	Message openflow.Message
	// Raw is the whole message as received. The handler owns it.
	Raw []byte
	// Err is the decoding error, if any.
	Err error
}

// Handler handles asynchronous messages of one kind. Each kind's handler
// runs in its own goroutine, one message at a time.
type Handler func(AsyncMessage)

// Handlers has one optional handler per kind.
type Handlers struct {
	PacketIn    Handler
	FlowRemoved Handler
	PortStatus  Handler
	FlowMonitor Handler
	Error       Handler
	Other       Handler
}

func (h Handlers) get(k Kind) Handler {
	switch k {
	case KindPacketIn:
		return h.PacketIn
	case KindFlowRemoved:
		return h.FlowRemoved
	case KindPortStatus:
		return h.PortStatus
	case KindFlowMonitor:
		return h.FlowMonitor
	case KindError:
		return h.Error
	}
	return h.Other
}

type asyncItem struct {
	session uint64
	raw     []byte
}

type asyncQueue struct {
	kind      Kind
	ch        chan asyncItem // nil without a handler
	fn        Handler
	received  atomic.Uint64
	delivered atomic.Uint64
	dropped   atomic.Uint64
	lastLog   atomic.Int64 // unix nanoseconds of the last drop log
}

func (c *Conn) startQueues() {
	for k := Kind(0); k < numKinds; k++ {
		q := &asyncQueue{kind: k, fn: c.opts.Handlers.get(k)}
		c.queues[k] = q
		if q.fn == nil {
			continue
		}
		q.ch = make(chan asyncItem, c.opts.QueueLen)
		c.wg.Add(1)
		go c.runQueue(q)
	}
}

func (c *Conn) runQueue(q *asyncQueue) {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case it := <-q.ch:
			c.deliver(q, it)
		}
	}
}

// deliver decodes and hands one message to the handler, surviving a
// panicking handler.
func (c *Conn) deliver(q *asyncQueue, it asyncItem) {
	am := AsyncMessage{Kind: q.kind, Session: it.session, Raw: it.raw}
	h, m, err := openflow.Unmarshal(it.raw)
	am.Header = h
	if err != nil {
		am.Err = err
		am.Message = &openflow.RawMessage{Header: h, Body: it.raw[openflow.HeaderLen:]}
	} else {
		am.Message = m
	}
	defer func() {
		if r := recover(); r != nil {
			c.log.WithFields(logrus.Fields{"kind": q.kind, "panic": r}).Error("openflow handler panicked")
		}
	}()
	q.fn(am)
	q.delivered.Add(1)
}

// classify returns the kind of an asynchronous message.
func classify(msg []byte) Kind {
	u32 := func(off int) uint32 {
		if len(msg) < off+4 {
			return 0
		}
		return binary.BigEndian.Uint32(msg[off:])
	}
	switch openflow.MsgType(msg[1]) {
	case openflow.TypePacketIn:
		return KindPacketIn
	case openflow.TypeFlowRemoved:
		return KindFlowRemoved
	case openflow.TypePortStatus:
		return KindPortStatus
	case openflow.TypeError:
		return KindError
	case openflow.TypeExperimenter:
		exp, sub := u32(8), u32(12)
		switch {
		case exp == openflow.ExperimenterNicira && (sub == 17 || sub == 30): // NXT_PACKET_IN, NXT_PACKET_IN2
			return KindPacketIn
		case exp == openflow.ExperimenterNicira && sub == 14: // NXT_FLOW_REMOVED
			return KindFlowRemoved
		case exp == openflow.ExperimenterNicira && (sub == 22 || sub == 23), // flow monitor paused/resumed
			exp == openflow.ExperimenterONF && (sub == 1871 || sub == 1872):
			return KindFlowMonitor
		}
	case openflow.TypeMultipartReply:
		if len(msg) < 10 {
			return KindOther
		}
		switch mp := binary.BigEndian.Uint16(msg[8:10]); {
		case mp == 16: // OFPMP_FLOW_MONITOR
			return KindFlowMonitor
		case mp == 0xffff:
			exp, sub := u32(16), u32(20)
			if (exp == openflow.ExperimenterONF && sub == 1870) || (exp == openflow.ExperimenterNicira && sub == 2) {
				return KindFlowMonitor
			}
		}
	}
	return KindOther
}

// dispatchAsync queues an asynchronous message for its handler without
// blocking; a full queue drops it.
func (c *Conn) dispatchAsync(s *session, msg []byte) {
	q := c.queues[classify(msg)]
	q.received.Add(1)
	if q.ch == nil {
		return
	}
	select {
	case q.ch <- asyncItem{session: s.id, raw: msg}:
	default:
		n := q.dropped.Add(1)
		now := time.Now().UnixNano()
		last := q.lastLog.Load()
		if now-last > int64(10*time.Second) && q.lastLog.CompareAndSwap(last, now) {
			c.log.WithFields(logrus.Fields{"kind": q.kind, "dropped_total": n, "queue_len": cap(q.ch)}).Warn("openflow handler queue full, dropping messages")
		}
	}
}

// KindStats counts the asynchronous messages of one kind.
type KindStats struct {
	// Received counts messages of this kind that arrived.
	Received uint64
	// Delivered counts messages the handler returned from.
	Delivered uint64
	// Dropped counts messages dropped because the handler's queue was full.
	Dropped uint64
}

// Stats are counters of a Conn.
type Stats struct {
	// Connects counts connections that were set up (each one reported to
	// OnConnect).
	Connects uint64
	// Async has the counters of each kind of asynchronous message.
	Async map[Kind]KindStats
}

// Stats returns the current counters.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	st := Stats{Connects: c.connects, Async: map[Kind]KindStats{}}
	c.mu.Unlock()
	for k, q := range c.queues {
		st.Async[Kind(k)] = KindStats{Received: q.received.Load(), Delivered: q.delivered.Load(), Dropped: q.dropped.Load()}
	}
	return st
}
