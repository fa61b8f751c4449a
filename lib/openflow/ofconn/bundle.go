package ofconn

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"nodeflow/lib/openflow"
)

// ErrBundleDone is returned by a Bundle used after Commit or Discard.
var ErrBundleDone = errors.New("bundle already committed or discarded")

// Bundle is an open bundle: messages added to it take effect together at
// Commit, or not at all. A bundle lives on one connection; if that
// connection is lost the switch drops the bundle and Commit fails with
// ErrDisconnected. Methods are safe for concurrent use but serialised.
type Bundle struct {
	c     *Conn
	s     *session
	id    uint32
	flags openflow.BundleFlags

	mu      sync.Mutex
	open    *call
	batches []*batch // one per Add
	offsets []int    // index of each batch's first message
	msgs    []openflow.Message
	done    bool
	spoiled error // an Add that could not encode every message
}

// ID returns the bundle id.
func (b *Bundle) ID() uint32 { return b.id }

// OpenBundle opens a bundle with flags (usually BundleAtomic|BundleOrdered).
// It does not wait for the switch's answer; Commit checks it.
func (c *Conn) OpenBundle(ctx context.Context, flags openflow.BundleFlags) (*Bundle, error) {
	id := c.bundleID.Add(1)
	op := fmt.Sprintf("bundle %d open", id)
	s, err := c.currentSession()
	if err != nil {
		return nil, c.opErr(op, err)
	}
	b := &Bundle{c: c, s: s, id: id, flags: flags}
	xid := c.allocXids(1)
	msg, err := openflow.Marshal(s.version, xid, &openflow.BundleControl{BundleID: id, Type: openflow.BundleOpenRequest, Flags: flags})
	if err != nil {
		return nil, c.opErr(op, err)
	}
	if b.open, err = s.register(xid); err != nil {
		return nil, c.opErr(op, err)
	}
	if err := s.write(ctx, msg); err != nil {
		return nil, c.opErr(op, err)
	}
	return b, nil
}

// Add appends msgs to the bundle. It writes them without waiting for the
// switch, encoding the next chunk of messages while the previous one is
// being written; errors the switch reports (it checks each message as it is
// added) come back from Commit. If a message cannot be encoded, Add returns
// an error naming it and the bundle is spoiled: Commit discards it.
// The bundle keeps msgs, to name a message the switch refuses, until
// Commit or Discard: the caller must not change them before.
func (b *Bundle) Add(ctx context.Context, msgs ...openflow.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	op := fmt.Sprintf("bundle %d add", b.id)
	if b.done {
		return b.c.opErr(op, ErrBundleDone)
	}
	if b.spoiled != nil {
		return b.c.opErr(op, b.spoiled)
	}
	if len(msgs) == 0 {
		return nil
	}
	n := uint32(len(msgs))
	first := b.c.allocXids(n)
	bt := &batch{first: first, n: n}
	if _, err := b.s.registerBatch(bt, 0); err != nil {
		return b.c.opErr(op, err)
	}
	base := len(b.msgs)
	b.batches = append(b.batches, bt)
	b.offsets = append(b.offsets, base)
	if b.msgs == nil {
		// The first Add keeps the caller's slice, capped so that a later
		// Add copies it: a bundle of every flow need not hold two lists.
		b.msgs = msgs[:len(msgs):len(msgs)]
	} else {
		b.msgs = append(b.msgs, msgs...)
	}

	// A writer goroutine sends full chunks and hands the buffers back.
	chunks := make(chan []byte, 1)
	free := make(chan []byte, 2)
	werr := make(chan error, 1)
	go func() {
		var err error
		for c := range chunks {
			if err == nil {
				err = b.s.write(ctx, c)
			}
			select {
			case free <- c[:0]:
			default:
			}
		}
		werr <- err
	}()
	var encErr error
	buf := newChunk(len(msgs))
	add := openflow.BundleAdd{BundleID: b.id, Flags: b.flags}
	for i, m := range msgs {
		add.Xid, add.Message = first+uint32(i), m
		var err error
		if buf, err = openflow.AppendMessage(buf, b.s.version, add.Xid, &add); err != nil {
			encErr = &MessageError{Index: base + i, Total: base + len(msgs), Message: m, Err: err}
			break
		}
		if len(buf) >= chunkSize {
			chunks <- buf
			select {
			case buf = <-free:
			default:
				buf = newChunk(len(msgs) - i - 1)
			}
		}
	}
	if encErr == nil && len(buf) > 0 {
		chunks <- buf
	}
	close(chunks)
	if err := <-werr; err != nil {
		return b.c.opErr(op, err)
	}
	if encErr != nil {
		b.spoiled = encErr
		return b.c.opErr(op, encErr)
	}
	return nil
}

// Len returns the number of messages added so far.
func (b *Bundle) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

// control sends a bundle control request of type t and waits for its reply.
func (b *Bundle) control(ctx context.Context, t openflow.BundleCtrlType) error {
	_, err := b.s.request(ctx, &openflow.BundleControl{BundleID: b.id, Type: t, Flags: b.flags})
	return err
}

// collect returns the errors the switch reported for added messages, as a
// *BatchError, and forgets the batches when release is set.
func (b *Bundle) collect(release bool) error {
	var errs []*MessageError
	for i, bt := range b.batches {
		var es []batchErr
		if release {
			es = b.s.takeBatchErrors(bt)
		} else {
			es = b.s.batchErrors(bt)
		}
		for _, e := range es {
			j := b.offsets[i] + e.index
			errs = append(errs, &MessageError{Index: j, Total: len(b.msgs), Message: b.msgs[j], Err: e.err})
		}
	}
	if release {
		b.batches, b.offsets = nil, nil
	}
	if len(errs) == 0 {
		return nil
	}
	return &BatchError{Errors: errs}
}

// Commit applies the bundle. First a barrier makes sure every add was
// checked; if the switch rejected any, the bundle is discarded and the
// error names each rejected message. Otherwise the bundle is committed; if
// a message fails to apply then (OVS reports it under the failing add's
// xid, then fails the commit), nothing is applied and the error names that
// message.
func (b *Bundle) Commit(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	op := fmt.Sprintf("bundle %d commit", b.id)
	if b.done {
		return b.c.opErr(op, ErrBundleDone)
	}
	b.done = true
	if b.spoiled != nil {
		derr := b.control(ctx, openflow.BundleDiscardRequest)
		b.collect(true)
		return b.c.opErr(op, errors.Join(b.spoiled, derr))
	}
	// Send the barrier before waiting for anything: open, adds and barrier
	// travel back to back.
	barrier, err := b.s.send(ctx, &openflow.BarrierRequest{})
	if err != nil {
		b.collect(true)
		return b.c.opErr(op, err)
	}
	if _, err := b.s.wait(ctx, b.open); err != nil {
		b.collect(true)
		return b.c.opErr(fmt.Sprintf("bundle %d open", b.id), err)
	}
	if _, err := b.s.wait(ctx, barrier); err != nil {
		b.collect(true)
		return b.c.opErr(op, err)
	}
	if err := b.collect(false); err != nil {
		derr := b.control(ctx, openflow.BundleDiscardRequest)
		b.collect(true)
		if derr != nil {
			err = errors.Join(err, fmt.Errorf("discard: %w", derr))
		}
		return b.c.opErr(fmt.Sprintf("bundle %d add", b.id), err)
	}
	cerr := b.control(ctx, openflow.BundleCommitRequest)
	merr := b.collect(true)
	switch {
	case merr != nil:
		return b.c.opErr(op, merr)
	case cerr != nil:
		return b.c.opErr(op, cerr)
	}
	return nil
}

// Discard drops the bundle without applying it.
func (b *Bundle) Discard(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	op := fmt.Sprintf("bundle %d discard", b.id)
	if b.done {
		return b.c.opErr(op, ErrBundleDone)
	}
	b.done = true
	defer b.collect(true)
	if _, err := b.s.wait(ctx, b.open); err != nil {
		return b.c.opErr(op, err)
	}
	return b.c.opErr(op, b.control(ctx, openflow.BundleDiscardRequest))
}

// Bundle applies msgs atomically and in order: it opens a bundle
// (BundleAtomic|BundleOrdered), adds every message without waiting, and
// commits. See Bundle.Commit for how failures are reported; on failure
// nothing is applied. A single message goes without a bundle, followed by
// a barrier (Apply): the switch applies one flow, group or meter mod whole
// or not at all, and the bundle's second round trip would only add
// latency.
func (c *Conn) Bundle(ctx context.Context, msgs []openflow.Message) error {
	if len(msgs) == 1 {
		return c.Apply(ctx, msgs[0])
	}
	b, err := c.OpenBundle(ctx, openflow.BundleAtomic|openflow.BundleOrdered)
	if err != nil {
		return err
	}
	if err := b.Add(ctx, msgs...); err != nil {
		if derr := b.Discard(ctx); derr != nil && !errors.Is(err, ErrDisconnected) {
			return errors.Join(err, derr)
		}
		return err
	}
	return b.Commit(ctx)
}
