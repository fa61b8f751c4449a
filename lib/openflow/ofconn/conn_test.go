package ofconn

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
)

// fakeSwitch is a scripted OpenFlow switch on a unix socket, for behaviour
// that a real ovs-vswitchd will not show on demand (dead peers, floods,
// corrupt streams).
type fakeSwitch struct {
	t     *testing.T
	addr  string
	ln    net.Listener
	conns chan *fakeConn
}

type fakeConn struct {
	t  *testing.T
	nc net.Conn
	v  openflow.Version
}

func newFakeSwitch(t *testing.T) *fakeSwitch {
	path := filepath.Join(t.TempDir(), "fake.mgmt")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSwitch{t: t, addr: "unix:" + path, ln: ln, conns: make(chan *fakeConn, 8)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns <- &fakeConn{t: t, nc: nc, v: openflow.Version15}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return f
}

// accept waits for the next connection.
func (f *fakeSwitch) accept() *fakeConn {
	f.t.Helper()
	select {
	case c := <-f.conns:
		f.t.Cleanup(func() { c.nc.Close() })
		return c
	case <-time.After(10 * time.Second):
		f.t.Fatal("no connection")
		return nil
	}
}

// read reads one message.
func (c *fakeConn) read() (openflow.Header, openflow.Message, []byte) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, err := readMessage(c.nc, nil)
	if err != nil {
		c.t.Fatalf("fake switch read: %v", err)
	}
	h, m, err := openflow.Unmarshal(msg)
	if err != nil {
		c.t.Fatalf("fake switch decode %x: %v", msg, err)
	}
	return h, m, msg
}

func (c *fakeConn) send(xid uint32, m openflow.Message) {
	c.t.Helper()
	b, err := openflow.Marshal(c.v, xid, m)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(b)
}

func (c *fakeConn) sendRaw(b []byte) {
	if _, err := c.nc.Write(b); err != nil {
		c.t.Errorf("fake switch write: %v", err)
	}
}

// handshake plays the switch's part of HELLO and session setup.
func (c *fakeConn) handshake() {
	c.t.Helper()
	if _, m, _ := c.read(); m == nil {
		c.t.Fatal("no hello")
	}
	c.send(1, &openflow.Hello{})
	h, m, _ := c.read()
	if _, ok := m.(*openflow.FeaturesRequest); !ok {
		c.t.Fatalf("want features request, got %T", m)
	}
	c.send(h.Xid, &openflow.FeaturesReply{DatapathID: 0x42, NTables: 254})
	for {
		h, m, _ := c.read()
		if _, ok := m.(*openflow.BarrierRequest); ok {
			c.send(h.Xid, &openflow.BarrierReply{})
			return
		}
	}
}

// serveBarriers answers barrier and echo requests until the connection ends.
func (c *fakeConn) serveBarriers() {
	go func() {
		for {
			msg, err := readMessage(c.nc, nil)
			if err != nil {
				return
			}
			xid := binary.BigEndian.Uint32(msg[4:8])
			switch openflow.MsgType(msg[1]) {
			case openflow.TypeBarrierRequest:
				b, _ := openflow.Marshal(c.v, xid, &openflow.BarrierReply{})
				c.nc.Write(b)
			case openflow.TypeEchoRequest:
				msg[1] = byte(openflow.TypeEchoReply)
				c.nc.Write(msg)
			}
		}
	}()
}

// dialFake dials the fake switch, playing the handshake, and returns both ends.
func dialFake(t *testing.T, f *fakeSwitch, opts Options) (*Conn, *fakeConn) {
	t.Helper()
	if opts.EchoInterval == 0 {
		opts.EchoInterval = -1
	}
	var fc *fakeConn
	done := make(chan struct{})
	go func() {
		defer close(done)
		fc = f.accept()
		fc.handshake()
	}()
	c := testDial(t, f.addr, opts)
	<-done
	return c, fc
}

func TestFakeEchoTimeoutReconnects(t *testing.T) {
	f := newFakeSwitch(t)
	events := make(chan ConnectEvent, 4)
	c, _ := dialFake(t, f, Options{EchoInterval: 50 * time.Millisecond, EchoTimeout: 150 * time.Millisecond,
		OnConnect: func(_ context.Context, _ *Conn, ev ConnectEvent) { events <- ev }})
	<-events
	// The switch never answers: a barrier fails once the echo times out.
	err := c.Barrier(testCtx(t))
	if !errors.Is(err, ErrEchoTimeout) || !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Barrier on a dead switch: %v, want ErrEchoTimeout and ErrDisconnected", err)
	}
	fc := f.accept()
	fc.handshake()
	fc.serveBarriers()
	select {
	case ev := <-events:
		if ev.Session != 2 || ev.Restarted {
			t.Errorf("reconnect event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect")
	}
	if err := c.Barrier(testCtx(t)); err != nil {
		t.Errorf("Barrier after reconnect: %v", err)
	}
}

func TestFakeRestartDetectedByDatapathID(t *testing.T) {
	f := newFakeSwitch(t)
	events := make(chan ConnectEvent, 4)
	_, fc := dialFake(t, f, Options{OnConnect: func(_ context.Context, _ *Conn, ev ConnectEvent) { events <- ev }})
	<-events
	fc.nc.Close()
	fc = f.accept()
	fc.read()
	fc.send(1, &openflow.Hello{})
	h, _, _ := fc.read()
	fc.send(h.Xid, &openflow.FeaturesReply{DatapathID: 0x43, NTables: 254})
	for {
		h, m, _ := fc.read()
		if _, ok := m.(*openflow.BarrierRequest); ok {
			fc.send(h.Xid, &openflow.BarrierReply{})
			break
		}
	}
	select {
	case ev := <-events:
		if !ev.Restarted || ev.Reason != "datapath id changed from 0000000000000042 to 0000000000000043" {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect")
	}
}

func TestFakeAnswersEchoRequests(t *testing.T) {
	f := newFakeSwitch(t)
	_, fc := dialFake(t, f, Options{})
	fc.send(77, &openflow.EchoRequest{Data: []byte("are you there")})
	h, m, _ := fc.read()
	if r, ok := m.(*openflow.EchoReply); !ok || h.Xid != 77 || string(r.Data) != "are you there" {
		t.Errorf("got %+v %#v", h, m)
	}
}

func TestFakeFloodDropsButRepliesFlow(t *testing.T) {
	f := newFakeSwitch(t)
	release := make(chan struct{})
	var handled sync.WaitGroup
	handled.Add(1)
	first := true
	c, fc := dialFake(t, f, Options{QueueLen: 4, Handlers: Handlers{PacketIn: func(m AsyncMessage) {
		if first {
			first = false
			handled.Done()
			<-release
		}
	}}})
	pin, err := openflow.Marshal(openflow.Version15, 0, &openflow.PacketIn{Format: openflow.PacketInFormatStandard, BufferID: openflow.NoBuffer, Data: []byte{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	fc.sendRaw(pin)
	handled.Wait() // the handler is now stuck on the first packet-in
	var flood []byte
	for i := 0; i < 1000; i++ {
		flood = append(flood, pin...)
	}
	go fc.sendRaw(flood)
	// Replies still get through while the handler is stuck.
	done := make(chan error, 1)
	go func() { done <- c.Barrier(testCtx(t)) }()
	h, m, _ := fc.read()
	if _, ok := m.(*openflow.BarrierRequest); !ok {
		t.Fatalf("got %T", m)
	}
	waittest.Poll(t, "flood read", 10*time.Second, func() error {
		if st := c.Stats().Async[KindPacketIn]; st.Received < 1001 {
			return errors.New("not all packet-ins read yet")
		}
		return nil
	})
	fc.send(h.Xid, &openflow.BarrierReply{})
	if err := <-done; err != nil {
		t.Fatalf("Barrier during a flood: %v", err)
	}
	st := c.Stats().Async[KindPacketIn]
	if st.Received != 1001 || st.Dropped != 1001-1-4 {
		t.Errorf("stats %+v, want 1001 received and 996 dropped (1 in the handler, 4 queued)", st)
	}
	close(release)
	waittest.Poll(t, "queue drained", 10*time.Second, func() error {
		if st := c.Stats().Async[KindPacketIn]; st.Delivered != 5 {
			return errors.New("not delivered yet")
		}
		return nil
	})
}

func TestFakeHandlerPanicIsContained(t *testing.T) {
	f := newFakeSwitch(t)
	got := make(chan string, 2)
	_, fc := dialFake(t, f, Options{Handlers: Handlers{Other: func(m AsyncMessage) {
		if r, ok := m.Message.(*openflow.RoleReply); ok && r.GenerationID == 1 {
			panic("handler bug")
		}
		got <- "ok"
	}}})
	fc.send(0, &openflow.RoleReply{GenerationID: 1})
	fc.send(0, &openflow.RoleReply{GenerationID: 2})
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("second message not delivered after a handler panic")
	}
}

func TestFakeMultipartReassembly(t *testing.T) {
	f := newFakeSwitch(t)
	c, fc := dialFake(t, f, Options{})
	go func() {
		h, _, _ := fc.read()
		for i, flags := range []openflow.MultipartFlags{openflow.MultipartMore, openflow.MultipartMore, 0} {
			fc.send(h.Xid, &openflow.MultipartReply{Type: openflow.MultipartDesc, Flags: flags, Body: []byte{byte(i)}})
		}
		// The request is followed by a barrier that proves the stream is in step.
		h, m, _ := fc.read()
		if _, ok := m.(*openflow.BarrierRequest); !ok {
			t.Errorf("want a barrier after the multipart request, got %T", m)
		}
		fc.send(h.Xid, &openflow.BarrierReply{})
	}()
	parts, err := c.MultipartRaw(testCtx(t), &openflow.MultipartRequest{Type: openflow.MultipartDesc})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	for i, p := range parts {
		if p[len(p)-1] != byte(i) {
			t.Errorf("part %d out of order: %x", i, p)
		}
	}
}

func TestFakeErrorReply(t *testing.T) {
	f := newFakeSwitch(t)
	c, fc := dialFake(t, f, Options{})
	go func() {
		h, _, raw := fc.read()
		fc.send(h.Xid, &openflow.OFError{Type: openflow.ErrTypeBadRequest, Code: 1, Data: raw})
	}()
	_, err := c.Request(testCtx(t), &openflow.RoleRequest{Role: openflow.RolePrimary})
	var oe *openflow.OFError
	if !errors.As(err, &oe) || oe.Name() != "OFPBRC_BAD_TYPE" {
		t.Fatalf("err = %v", err)
	}
	if err.Error() != "ofconn: request RoleRequest: OFPBRC_BAD_TYPE (type 1 code 1)" {
		t.Errorf("error text %q", err)
	}
}

func TestFakeContextCancelAndLateReply(t *testing.T) {
	f := newFakeSwitch(t)
	others := make(chan AsyncMessage, 1)
	c, fc := dialFake(t, f, Options{Handlers: Handlers{Other: func(m AsyncMessage) { others <- m }}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Barrier(ctx) }()
	h, _, _ := fc.read()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// The late reply is absorbed, not handed to the Other handler; the
	// next request works.
	fc.send(h.Xid, &openflow.BarrierReply{})
	go func() {
		h, _, _ := fc.read()
		fc.send(h.Xid, &openflow.EchoReply{Data: []byte("x")})
	}()
	if err := c.Echo(testCtx(t), []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-others:
		t.Errorf("late reply delivered as async: %+v", m.Header)
	default:
	}
}

func TestFakeOutOfStepStream(t *testing.T) {
	f := newFakeSwitch(t)
	events := make(chan ConnectEvent, 4)
	_, fc := dialFake(t, f, Options{OnConnect: func(_ context.Context, _ *Conn, ev ConnectEvent) { events <- ev }})
	<-events
	// Bucket counters where a header should be: version 0.
	fc.sendRaw([]byte{0x00, 0x20, 0x00, 0x10, 0, 0, 3, 0x88, 0, 0x19, 0, 0x10, 0, 1, 0, 4})
	fc2 := f.accept()
	fc2.handshake()
	select {
	case ev := <-events:
		if ev.Session != 2 {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect after a corrupt stream")
	}
}

func TestFakeHelloFailed(t *testing.T) {
	f := newFakeSwitch(t)
	go func() {
		fc := f.accept()
		fc.read()
		fc.send(1, &openflow.OFError{Type: openflow.ErrTypeHelloFailed, Data: []byte("We support versions 0x01 to 0x01.")})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, f.addr, Options{Logger: quietLogger(), ReconnectMin: time.Second})
	var oe *openflow.OFError
	if !errors.As(err, &oe) || oe.Name() != "OFPHFC_INCOMPATIBLE" {
		t.Fatalf("err = %v", err)
	}
}

func TestFakeBundleIsPipelined(t *testing.T) {
	f := newFakeSwitch(t)
	c, fc := dialFake(t, f, Options{})
	msgs := []openflow.Message{testFlow(1, 1, 1).AddMod(), testFlow(1, 1, 2).AddMod(), testFlow(1, 1, 3).AddMod()}
	done := make(chan error, 1)
	go func() { done <- c.Bundle(testCtx(t), msgs) }()
	// The switch answers nothing until it has read the open, every add and
	// the barrier: a client that waited for a reply per message would hang.
	var openXid, barrierXid uint32
	adds := 0
	for barrierXid == 0 {
		h, m, _ := fc.read()
		switch m := m.(type) {
		case *openflow.BundleControl:
			if m.Type != openflow.BundleOpenRequest || m.Flags != openflow.BundleAtomic|openflow.BundleOrdered {
				t.Fatalf("got %+v", m)
			}
			openXid = h.Xid
		case *openflow.BundleAdd:
			if m.Xid != h.Xid {
				t.Errorf("inner xid %d, outer %d", m.Xid, h.Xid)
			}
			adds++
		case *openflow.BarrierRequest:
			barrierXid = h.Xid
		default:
			t.Fatalf("unexpected %T", m)
		}
	}
	if adds != 3 || openXid == 0 {
		t.Fatalf("%d adds, open xid %d", adds, openXid)
	}
	fc.send(openXid, &openflow.BundleControl{BundleID: 1, Type: openflow.BundleOpenReply})
	fc.send(barrierXid, &openflow.BarrierReply{})
	h, m, _ := fc.read()
	if bc, ok := m.(*openflow.BundleControl); !ok || bc.Type != openflow.BundleCommitRequest {
		t.Fatalf("want commit, got %#v", m)
	}
	fc.send(h.Xid, &openflow.BundleControl{BundleID: 1, Type: openflow.BundleCommitReply})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFakeBundleOfOneIsOneRoundTrip: a bundle of one message is the
// message and a barrier, with no bundle around them.
func TestFakeBundleOfOneIsOneRoundTrip(t *testing.T) {
	f := newFakeSwitch(t)
	c, fc := dialFake(t, f, Options{})
	done := make(chan error, 1)
	go func() { done <- c.Bundle(testCtx(t), []openflow.Message{testFlow(1, 1, 1).AddMod()}) }()
	h, m, _ := fc.read()
	if fm, ok := m.(*openflow.FlowMod); !ok || fm.Command != openflow.FlowAdd {
		t.Fatalf("first message %T %+v, want the flow add itself", m, m)
	}
	h, m, _ = fc.read()
	if _, ok := m.(*openflow.BarrierRequest); !ok {
		t.Fatalf("second message %T, want a barrier", m)
	}
	fc.send(h.Xid, &openflow.BarrierReply{})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestClose(t *testing.T) {
	f := newFakeSwitch(t)
	c, _ := dialFake(t, f, Options{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Barrier after Close: %v", err)
	}
}

func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		in, network, address string
		ok                   bool
	}{
		{"unix:/run/openvswitch/br0.mgmt", "unix", "/run/openvswitch/br0.mgmt", true},
		{"/run/openvswitch/br0.mgmt", "unix", "/run/openvswitch/br0.mgmt", true},
		{"tcp:127.0.0.1:6653", "tcp", "127.0.0.1:6653", true},
		{"tcp:[::1]:6653", "tcp", "[::1]:6653", true},
		{"tcp:127.0.0.1", "", "", false},
		{"ssl:1.2.3.4:6653", "", "", false},
		{"unix:", "", "", false},
	} {
		n, a, err := parseAddr(tc.in)
		if (err == nil) != tc.ok || n != tc.network || a != tc.address {
			t.Errorf("parseAddr(%q) = %q %q %v", tc.in, n, a, err)
		}
	}
}

func TestFakeTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no tcp loopback:", err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		fc := &fakeConn{t: t, nc: nc, v: openflow.Version13}
		fc.handshake()
		fc.serveBarriers()
	}()
	c := testDial(t, "tcp:"+ln.Addr().String(), Options{EchoInterval: -1, Versions: []openflow.Version{openflow.Version13}})
	if c.Version() != openflow.Version13 {
		t.Errorf("version %s", c.Version())
	}
	if err := c.Barrier(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestSplitGroupMod(t *testing.T) {
	mk := func(n int) *openflow.GroupMod {
		gm := &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeSelect, GroupID: 9, SelectionMethod: "hash",
			SelectionFields: []openflow.Field{fieldAllOnes(openflow.TCPDst(0))}}
		for i := 0; i < n; i++ {
			gm.Buckets = append(gm.Buckets, openflow.Bucket{ID: uint32(i), Weight: 1, Actions: []openflow.Action{openflow.OutputPort(uint32(i%100 + 1))}})
		}
		return gm
	}
	t.Run("fits: unchanged", func(t *testing.T) {
		gm := mk(10)
		msgs, err := SplitGroupMod(openflow.Version15, gm)
		if err != nil || len(msgs) != 1 || msgs[0] != gm {
			t.Fatalf("%v %v", msgs, err)
		}
	})
	t.Run("5000 buckets", func(t *testing.T) {
		gm := mk(5000)
		msgs, err := SplitGroupMod(openflow.Version15, gm)
		if err != nil {
			t.Fatal(err)
		}
		var all []openflow.Bucket
		for i, m := range msgs {
			g := m.(*openflow.GroupMod)
			b, err := openflow.Marshal(openflow.Version15, 1, &openflow.BundleAdd{BundleID: 1, Xid: 1, Message: g})
			if err != nil {
				t.Fatalf("part %d does not fit a bundle add: %v", i, err)
			}
			if i == 0 {
				if g.Command != openflow.GroupAdd || g.SelectionMethod != "hash" {
					t.Errorf("first part %s", g.Command)
				}
			} else if g.Command != openflow.GroupInsertBucket || g.CommandBucketID != openflow.BucketLast || g.SelectionMethod != "" || g.Type != openflow.GroupTypeSelect {
				t.Errorf("part %d: %s bucket %d method %q", i, g.Command, g.CommandBucketID, g.SelectionMethod)
			}
			if i < len(msgs)-1 && len(b) < openflow.MaxMessageLen-64 {
				t.Errorf("part %d is %d bytes: not packed", i, len(b))
			}
			all = append(all, g.Buckets...)
		}
		if len(all) != 5000 || all[0].ID != 0 || all[4999].ID != 4999 {
			t.Errorf("%d buckets after splitting", len(all))
		}
		if gm.Command != openflow.GroupAdd || len(gm.Buckets) != 5000 {
			t.Error("input modified")
		}
	})
	t.Run("OF1.3 cannot split", func(t *testing.T) {
		gm := mk(5000)
		gm.SelectionMethod, gm.SelectionFields = "", nil
		if _, err := SplitGroupMod(openflow.Version13, gm); !errors.Is(err, ErrGroupTooLarge) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("duplicate bucket ids", func(t *testing.T) {
		gm := mk(5000)
		gm.Buckets[10].ID = 3
		if _, err := SplitGroupMod(openflow.Version15, gm); err == nil {
			t.Error("no error")
		}
	})
	t.Run("delete is never split", func(t *testing.T) {
		gm := mk(5000)
		gm.Command = openflow.GroupDelete
		if _, err := SplitGroupMod(openflow.Version15, gm); !errors.Is(err, ErrGroupTooLarge) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestClassify(t *testing.T) {
	mk := func(v openflow.Version, m openflow.Message) []byte {
		b, err := openflow.Marshal(v, 0, m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	exp := func(vendor, sub uint32) []byte {
		return mk(openflow.Version13, &openflow.RawMessage{Header: openflow.Header{Type: openflow.TypeExperimenter}, Experimenter: vendor, ExpType: sub})
	}
	mpExp := func(vendor, sub uint32) []byte {
		body := binary.BigEndian.AppendUint32(nil, vendor)
		body = binary.BigEndian.AppendUint32(body, sub)
		return mk(openflow.Version13, &openflow.MultipartReply{Type: openflow.MultipartExperimenter, Body: body})
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want Kind
	}{
		{"packet-in", mk(openflow.Version13, &openflow.RawMessage{Header: openflow.Header{Type: openflow.TypePacketIn}}), KindPacketIn},
		{"nxt packet-in2", exp(openflow.ExperimenterNicira, 30), KindPacketIn},
		{"nxt packet-in", exp(openflow.ExperimenterNicira, 17), KindPacketIn},
		{"flow removed", mk(openflow.Version15, &openflow.RawMessage{Header: openflow.Header{Type: openflow.TypeFlowRemoved}}), KindFlowRemoved},
		{"port status", mk(openflow.Version15, &openflow.RawMessage{Header: openflow.Header{Type: openflow.TypePortStatus}}), KindPortStatus},
		{"error", mk(openflow.Version15, &openflow.OFError{Type: 1}), KindError},
		{"OF1.5 flow monitor", mk(openflow.Version15, &openflow.MultipartReply{Type: openflow.MultipartFlowMonitor}), KindFlowMonitor},
		{"ONF flow monitor", mpExp(openflow.ExperimenterONF, 1870), KindFlowMonitor},
		{"NX flow monitor", mpExp(openflow.ExperimenterNicira, 2), KindFlowMonitor},
		{"ONF monitor paused", exp(openflow.ExperimenterONF, 1871), KindFlowMonitor},
		{"flow stats reply", mk(openflow.Version15, &openflow.MultipartReply{Type: openflow.MultipartFlow}), KindOther},
		{"role status", mk(openflow.Version15, &openflow.RawMessage{Header: openflow.Header{Type: openflow.TypeRoleStatus}}), KindOther},
		{"short experimenter", []byte{4, 4, 0, 8, 0, 0, 0, 0}, KindOther},
	} {
		if got := classify(tc.msg); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestErrorTexts(t *testing.T) {
	fm := &openflow.RawMessage{Header: openflow.Header{Type: openflow.TypeFlowMod}}
	e1 := &MessageError{Index: 2, Total: 12, Message: fm, Err: openflow.NewError(openflow.Version15, "OFPBAC_BAD_OUT_GROUP", nil)}
	e2 := &MessageError{Index: 5, Total: 12, Message: fm, Err: openflow.NewError(openflow.Version15, "OFPFMFC_BAD_TABLE_ID", nil)}
	err := error(&OpError{Op: "bundle 7 commit", Err: &BatchError{Errors: []*MessageError{e1, e2}}})
	want := "ofconn: bundle 7 commit: 2 of 12 messages failed, first: message 3 of 12 (openflow.RawMessage): OFPBAC_BAD_OUT_GROUP (type 2 code 9)"
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
	if !errors.Is(err, openflow.NewError(openflow.Version13, "OFPFMFC_BAD_TABLE_ID", nil)) {
		t.Error("errors.Is does not find the second failure")
	}
	var me *MessageError
	if !errors.As(err, &me) || me != e1 {
		t.Error("errors.As does not find the first failure")
	}
	if !bytes.Contains([]byte((&OpError{Op: "x", Err: e1}).Error()), []byte("message 3 of 12")) {
		t.Error("single failure text")
	}
}

// TestFakeLargeBundleStreams sends a bundle of many chunks to a switch that
// reads slowly, so that encoding runs ahead of writing.
func TestFakeLargeBundleStreams(t *testing.T) {
	f := newFakeSwitch(t)
	c, fc := dialFake(t, f, Options{})
	const n = 20000
	msgs := make([]openflow.Message, n)
	for i := range msgs {
		msgs[i] = testFlow(1, 1, uint16(i)).AddMod()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Bundle(ctx, msgs) }()
	var openXid uint32
	adds := 0
	for {
		h, m, _ := fc.read()
		if _, ok := m.(*openflow.BarrierRequest); ok {
			fc.send(openXid, &openflow.BundleControl{Type: openflow.BundleOpenReply})
			fc.send(h.Xid, &openflow.BarrierReply{})
			break
		}
		switch m.(type) {
		case *openflow.BundleControl:
			openXid = h.Xid
		case *openflow.BundleAdd:
			adds++
		}
	}
	h, _, _ := fc.read()
	fc.send(h.Xid, &openflow.BundleControl{Type: openflow.BundleCommitReply})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if adds != n {
		t.Errorf("switch read %d adds, want %d", adds, n)
	}
}
