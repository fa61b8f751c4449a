package ofconn

import (
	"context"
	"fmt"
	"strings"

	"nodeflow/lib/openflow"
)

// typeName names a message's Go type for operation names, e.g. "FlowMod".
func typeName(m openflow.Message) string {
	s := fmt.Sprintf("%T", m)
	return s[strings.LastIndex(s, ".")+1:]
}

func (c *Conn) opErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Addr: c.addr, Err: err}
}

// Send writes msgs without waiting for anything. Errors the switch sends
// for them go to Handlers.Error. Use Apply to learn about errors.
func (c *Conn) Send(ctx context.Context, msgs ...openflow.Message) error {
	s, err := c.currentSession()
	if err != nil {
		return c.opErr("send", err)
	}
	first := c.allocXids(uint32(len(msgs)))
	enc := encoder{v: s.version, left: len(msgs)}
	for i, m := range msgs {
		if err := enc.add(first+uint32(i), m); err != nil {
			return c.opErr("send", &MessageError{Index: i, Total: len(msgs), Message: m, Err: err})
		}
	}
	return c.opErr("send", s.write(ctx, enc.finish()...))
}

// Request sends req and returns the decoded reply. It is for requests that
// get exactly one reply message (features, get-config, role, echo, async
// config, bundle control); a request that gets no reply waits until ctx
// ends. An ERROR reply comes back as an error wrapping *openflow.OFError.
func (c *Conn) Request(ctx context.Context, req openflow.Message) (openflow.Message, error) {
	op := "request " + typeName(req)
	s, err := c.currentSession()
	if err != nil {
		return nil, c.opErr(op, err)
	}
	reply, err := s.request(ctx, req)
	return reply, c.opErr(op, err)
}

// MultipartRaw sends a multipart request and returns every reply message,
// whole and undecoded, in order: the switch sets OFPMPF_REPLY_MORE on all
// but the last. A barrier follows the request, and the reply is returned
// only after the barrier's: Open vSwitch 3.1 sends reply entries larger than
// 64 KiB (groups with thousands of buckets) with wrapped length fields,
// which would otherwise pass as a complete, silently truncated reply. Such a
// reply fails with ErrDisconnected wrapping openflow.ErrMalformed, and the
// connection is re-established.
func (c *Conn) MultipartRaw(ctx context.Context, req openflow.Message) ([][]byte, error) {
	op := "multipart " + typeName(req)
	s, err := c.currentSession()
	if err != nil {
		return nil, c.opErr(op, err)
	}
	parts, err := s.multipart(ctx, req)
	return parts, c.opErr(op, err)
}

// Multipart sends a multipart request and returns every reply message
// decoded, in order. Concatenating the parts' entries gives the whole reply.
// See MultipartRaw for the barrier that follows the request.
func (c *Conn) Multipart(ctx context.Context, req openflow.Message) ([]openflow.Message, error) {
	op := "multipart " + typeName(req)
	s, err := c.currentSession()
	if err != nil {
		return nil, c.opErr(op, err)
	}
	parts, err := s.multipart(ctx, req)
	if err != nil {
		return nil, c.opErr(op, err)
	}
	out := make([]openflow.Message, len(parts))
	for i, p := range parts {
		_, m, err := openflow.Unmarshal(p)
		if err != nil {
			return nil, c.opErr(op, fmt.Errorf("decode reply part %d of %d: %w", i+1, len(parts), err))
		}
		out[i] = m
	}
	return out, nil
}

// Barrier waits until the switch has processed every message sent before.
func (c *Conn) Barrier(ctx context.Context) error {
	s, err := c.currentSession()
	if err != nil {
		return c.opErr("barrier", err)
	}
	_, err = s.roundTrip(ctx, &openflow.BarrierRequest{})
	return c.opErr("barrier", err)
}

// Echo sends an echo request carrying data and waits for the reply.
func (c *Conn) Echo(ctx context.Context, data []byte) error {
	s, err := c.currentSession()
	if err != nil {
		return c.opErr("echo", err)
	}
	reply, err := s.request(ctx, &openflow.EchoRequest{Data: data})
	if err != nil {
		return c.opErr("echo", err)
	}
	if r, ok := reply.(*openflow.EchoReply); !ok || string(r.Data) != string(data) {
		return c.opErr("echo", fmt.Errorf("unexpected reply %#v", reply))
	}
	return nil
}

// Apply sends msgs followed by a barrier, without waiting in between, and
// waits for the barrier. The messages are not atomic: the ones the switch
// accepted stay applied. Errors come back as a *BatchError naming each
// rejected message.
func (c *Conn) Apply(ctx context.Context, msgs ...openflow.Message) error {
	s, err := c.currentSession()
	if err != nil {
		return c.opErr("apply", err)
	}
	return c.opErr("apply", s.apply(ctx, msgs))
}

// MultipartReply sends a multipart request and returns the reply with every
// part's entries joined (openflow.MergeMultipartReplies); its typed accessors
// (FlowStats, GroupDesc, MeterConfig, ...) decode them.
func (c *Conn) MultipartReply(ctx context.Context, req openflow.Message) (*openflow.MultipartReply, error) {
	op := "multipart " + typeName(req)
	msgs, err := c.Multipart(ctx, req)
	if err != nil {
		return nil, err
	}
	parts := make([]*openflow.MultipartReply, len(msgs))
	for i, m := range msgs {
		r, ok := m.(*openflow.MultipartReply)
		if !ok {
			return nil, c.opErr(op, fmt.Errorf("reply part %d is %T", i+1, m))
		}
		parts[i] = r
	}
	merged, err := openflow.MergeMultipartReplies(parts)
	return merged, c.opErr(op, err)
}
