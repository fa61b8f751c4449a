package ovsdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// A tiny JSON-RPC server on a unix socket, for what the real ovsdb-server
// cannot be made to do: send garbage, hang up mid-call, go silent, restart.

// fakeMsg is any JSON-RPC message.
type fakeMsg struct {
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
}

// fakeConn is one accepted connection.
type fakeConn struct {
	nc  net.Conn
	n   int // 1 for the first connection the server accepted
	wmu sync.Mutex
}

func (fc *fakeConn) send(s string) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	_, _ = fc.nc.Write([]byte(s))
}

func (fc *fakeConn) reply(id json.RawMessage, result string) {
	fc.send(fmt.Sprintf(`{"id":%s,"result":%s,"error":null}`, id, result))
}

// fakeServer serves one unix socket. handle is called for every message; it
// returns false when it did not handle the message, and the default
// behaviour (fakeDefault) applies.
type fakeServer struct {
	t    *testing.T
	path string

	mu      sync.Mutex
	ln      net.Listener
	conns   []*fakeConn
	nconns  int
	handle  func(fc *fakeConn, m fakeMsg) bool
	rows    map[string]string // Interface uuid -> row JSON
	msgs    chan fakeMsg      // every message received, when not nil
	stopped bool
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "nfovsdb-fake-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &fakeServer{t: t, path: filepath.Join(dir, "db.sock"), rows: map[string]string{}}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *fakeServer) endpoint() string { return "unix:" + s.path }

func (s *fakeServer) start() {
	_ = os.Remove(s.path)
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.ln = ln
	s.stopped = false
	s.mu.Unlock()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.nconns++
			fc := &fakeConn{nc: nc, n: s.nconns}
			s.conns = append(s.conns, fc)
			s.mu.Unlock()
			go s.serve(fc)
		}
	}()
}

// stop closes the listener and every connection, like a server that died.
func (s *fakeServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	_ = s.ln.Close()
	for _, fc := range s.conns {
		_ = fc.nc.Close()
	}
	s.conns = nil
}

func (s *fakeServer) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nconns
}

func (s *fakeServer) setHandler(h func(fc *fakeConn, m fakeMsg) bool) {
	s.mu.Lock()
	s.handle = h
	s.mu.Unlock()
}

func (s *fakeServer) serve(fc *fakeConn) {
	dec := json.NewDecoder(fc.nc)
	for {
		var m fakeMsg
		if err := dec.Decode(&m); err != nil {
			_ = fc.nc.Close()
			return
		}
		s.mu.Lock()
		h, msgs := s.handle, s.msgs
		s.mu.Unlock()
		if msgs != nil {
			msgs <- m
		}
		if h != nil && h(fc, m) {
			continue
		}
		s.fakeDefault(fc, m)
	}
}

// fakeDefault answers like a small ovsdb-server with one Interface table.
func (s *fakeServer) fakeDefault(fc *fakeConn, m fakeMsg) {
	if m.ID == nil || string(m.ID) == "null" {
		return // notifications, such as cancel
	}
	switch m.Method {
	case "echo":
		fc.reply(m.ID, string(m.Params))
	case "list_dbs":
		fc.reply(m.ID, `["Open_vSwitch"]`)
	case "transact":
		var params []json.RawMessage
		_ = json.Unmarshal(m.Params, &params)
		results := make([]string, 0, len(params))
		for range params[1:] {
			results = append(results, `{"rows":[]}`)
		}
		fc.reply(m.ID, "["+strings.Join(results, ",")+"]")
	case "monitor":
		fc.reply(m.ID, s.snapshot())
	case "monitor_cancel":
		fc.reply(m.ID, `{}`)
	case "":
		// A reply to a request of ours (echo).
	default:
		fc.send(fmt.Sprintf(`{"id":%s,"result":null,"error":{"error":"unknown method"}}`, m.ID))
	}
}

// snapshot renders the Interface rows as a monitor reply.
func (s *fakeServer) snapshot() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.rows))
	for id := range s.rows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf(`"%s":{"new":%s}`, id, s.rows[id]))
	}
	return `{"Interface":{` + strings.Join(parts, ",") + `}}`
}

// broadcast sends a notification on every open connection.
func (s *fakeServer) broadcast(msg string) {
	s.mu.Lock()
	conns := append([]*fakeConn(nil), s.conns...)
	s.mu.Unlock()
	for _, fc := range conns {
		fc.send(msg)
	}
}

// fastOptions reconnect quickly and keep echo out of the way unless asked.
func fastOptions() Options {
	return Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, EchoInterval: -1}
}

func dialFake(t *testing.T, s *fakeServer, opts Options) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), s.endpoint(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestDialErrors(t *testing.T) {
	ctx := testCtx(t)
	for _, ep := range []string{"", "db.sock", "ssl:1.2.3.4:6640", "tcp:nohostport", "unix:"} {
		if _, err := Dial(ctx, ep, Options{}); err == nil || !strings.Contains(err.Error(), "ovsdb: endpoint") {
			t.Errorf("Dial(%q): %v", ep, err)
		}
	}
	_, err := Dial(ctx, "unix:/nonexistent/db.sock", Options{})
	if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "ovsdb: connect unix:/nonexistent/db.sock") {
		t.Errorf("Dial to a missing socket: %v", err)
	}
}

func TestTCPEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		dec := json.NewDecoder(nc)
		var m fakeMsg
		if dec.Decode(&m) == nil {
			fmt.Fprintf(nc, `{"id":%s,"result":["Open_vSwitch","_Server"],"error":null}`, m.ID)
		}
		_ = dec.Decode(&m) // until the client hangs up
	}()
	c, err := Dial(testCtx(t), "tcp:"+ln.Addr().String(), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dbs, err := c.ListDBs(testCtx(t))
	if err != nil || len(dbs) != 2 {
		t.Fatalf("list_dbs over tcp: %v, %v", dbs, err)
	}
}

func TestMalformedJSONFromServer(t *testing.T) {
	s := newFakeServer(t)
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		if m.Method == "list_dbs" && fc.n == 1 {
			fc.send(`{"id":` + string(m.ID) + `,"result":["Open_vSwitch"}}}`)
			return true
		}
		return false
	})
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	_, err := c.ListDBs(ctx)
	if !errors.Is(err, ErrDisconnected) || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "invalid JSON-RPC message") {
		t.Fatalf("list_dbs with garbage reply: %v", err)
	}
	t.Logf("error: %v", err)
	// The client reconnects by itself and the next call works.
	dbs, err := c.ListDBs(ctx)
	if err != nil || len(dbs) != 1 {
		t.Fatalf("after reconnect: %v, %v", dbs, err)
	}
	if n := s.connCount(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestMalformedResult(t *testing.T) {
	s := newFakeServer(t)
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		switch m.Method {
		case "list_dbs":
			fc.reply(m.ID, `5`)
		case "transact":
			fc.reply(m.ID, `[{"uuid":["uuid","nope"]}]`)
		case "get_schema":
			fc.reply(m.ID, `{"tables":{}}`)
		default:
			return false
		}
		return true
	})
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	if _, err := c.ListDBs(ctx); !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "ovsdb: list_dbs: malformed: result") {
		t.Errorf("list_dbs: %v", err)
	}
	if _, err := c.Transact(ctx, "Open_vSwitch", Insert("Port", Row{}, "")); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `ovsdb: transact Open_vSwitch: result 0 uuid: malformed: uuid "nope"`) {
		t.Errorf("transact: %v", err)
	}
	if _, err := c.GetSchema(ctx, "Open_vSwitch"); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "no name") {
		t.Errorf("get_schema: %v", err)
	}
	// A bad result is the call's problem, not the connection's.
	if err := c.Echo(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.connCount(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestRPCErrorReply(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, fastOptions())
	_, err := c.rawCall(testCtx(t), "frobnicate", []byte("[]"))
	var re *RPCError
	if !errors.As(err, &re) || re.Method != "frobnicate" || re.Err != "unknown method" || err.Error() != "frobnicate: unknown method" {
		t.Fatalf("error %v", err)
	}
	if d := decodeRPCError("m", json.RawMessage(`"plain"`)); d.Err != "plain" {
		t.Fatalf("string error: %+v", d)
	}
	if d := decodeRPCError("m", json.RawMessage(`{"error":"e","details":"d"}`)); d.Error() != "m: e: d" {
		t.Fatalf("object error: %v", d)
	}
	if d := decodeRPCError("m", json.RawMessage(`[1]`)); d.Err != "[1]" {
		t.Fatalf("odd error: %+v", d)
	}
}

func TestSocketClosedMidTransaction(t *testing.T) {
	s := newFakeServer(t)
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		if m.Method == "transact" && fc.n == 1 {
			_ = fc.nc.Close()
			return true
		}
		return false
	})
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	_, err := c.Transact(ctx, "Open_vSwitch", Select("Bridge", nil))
	if !errors.Is(err, ErrDisconnected) || !strings.HasPrefix(err.Error(), "ovsdb: transact Open_vSwitch (outcome unknown): "+s.endpoint()+": connection lost") {
		t.Fatalf("transact on a closed socket: %v", err)
	}
	t.Logf("error: %v", err)
	res, err := c.Transact(ctx, "Open_vSwitch", Select("Bridge", nil))
	if err != nil || len(res) != 1 {
		t.Fatalf("after reconnect: %v, %v", res, err)
	}
}

func TestEchoFromServer(t *testing.T) {
	s := newFakeServer(t)
	got := make(chan fakeMsg, 1)
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		if m.Method == "" && string(m.ID) == `"echo"` {
			got <- m
			return true
		}
		return false
	})
	c := dialFake(t, s, fastOptions())
	if err := c.Echo(testCtx(t)); err != nil { // the connection is up
		t.Fatal(err)
	}
	s.broadcast(`{"method":"echo","params":["ping",1],"id":"echo"}`)
	s.broadcast(`{"method":"bogus","params":[],"id":7}`)
	select {
	case m := <-got:
		if string(m.Result) != `["ping",1]` || string(m.Error) != "null" && m.Error != nil {
			t.Fatalf("echo reply %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no echo reply")
	}
}

func TestDeadServerDetected(t *testing.T) {
	s := newFakeServer(t)
	var mu sync.Mutex
	silent := true
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		mu.Lock()
		defer mu.Unlock()
		return silent && fc.n == 1 // the first connection never answers
	})
	opts := fastOptions()
	opts.EchoInterval, opts.EchoTimeout = 20*time.Millisecond, 100*time.Millisecond
	c := dialFake(t, s, opts)
	ctx := testCtx(t)
	start := time.Now()
	_, err := c.Transact(ctx, "Open_vSwitch", Select("Bridge", nil))
	if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "no echo reply within 100ms") {
		t.Fatalf("transact to a silent server: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s to notice", d)
	}
	if err := c.Echo(ctx); err != nil {
		t.Fatalf("after reconnect: %v", err)
	}
}

func TestCancelSentOnContextEnd(t *testing.T) {
	s := newFakeServer(t)
	s.msgs = make(chan fakeMsg, 10)
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool { return m.Method == "transact" }) // never answer
	c := dialFake(t, s, fastOptions())
	short, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	_, err := c.Transact(short, "Open_vSwitch", Select("Bridge", nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v", err)
	}
	var txID string
	for {
		select {
		case m := <-s.msgs:
			switch m.Method {
			case "transact":
				txID = string(m.ID)
			case "cancel":
				if string(m.Params) != "["+txID+"]" || string(m.ID) != "null" {
					t.Fatalf("cancel %+v for transact id %s", m, txID)
				}
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no cancel")
		}
	}
}

const (
	uuidA = "aaaaaaaa-0000-0000-0000-000000000001"
	uuidB = "bbbbbbbb-0000-0000-0000-000000000002"
	uuidC = "cccccccc-0000-0000-0000-000000000003"
)

func ifaceJSON(name string, ofport int) string {
	return fmt.Sprintf(`{"name":%q,"type":"internal","ofport":%d,"error":["set",[]],"external_ids":["map",[]]}`, name, ofport)
}

// collect reads n events.
func collect(t *testing.T, sub *Subscription, n int) []InterfaceEvent {
	t.Helper()
	var out []InterfaceEvent
	for len(out) < n {
		select {
		case ev := <-sub.Events():
			out = append(out, ev)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d events, want %d: %+v", len(out), n, out)
		}
	}
	return out
}

func describe(evs []InterfaceEvent) string {
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("%s %s %d->%d resync=%v", ev.Kind, ev.Name(), ev.OldOfport, ev.NewOfport, ev.Resync))
	}
	return strings.Join(parts, "; ")
}

func TestMonitorResumesAfterReconnect(t *testing.T) {
	s := newFakeServer(t)
	s.rows[uuidA] = ifaceJSON("p1", 1)
	s.rows[uuidB] = ifaceJSON("p2", 2)
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	ic, err := c.Interfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := ic.List(); len(l) != 2 || l[0].Name != "p1" || l[1].Ofport != 2 {
		t.Fatalf("initial cache %+v", l)
	}
	sub := ic.Subscribe()
	defer sub.Close()

	// A live update: p2's ofport changes.
	s.broadcast(`{"method":"update","params":["nodeflow-1",{"Interface":{"` + uuidB + `":{"old":{"ofport":2},"new":` + ifaceJSON("p2", 3) + `}}}],"id":null}`)
	if got := describe(collect(t, sub, 1)); got != "updated p2 2->3 resync=false" {
		t.Fatalf("live update: %s", got)
	}

	// The server dies; while it is away p1 goes, p2 changes, p3 appears.
	s.stop()
	s.mu.Lock()
	delete(s.rows, uuidA)
	s.rows[uuidB] = ifaceJSON("p2", 4)
	s.rows[uuidC] = ifaceJSON("p3", 5)
	s.mu.Unlock()
	s.start()

	got := describe(collect(t, sub, 3))
	if want := "deleted p1 1->0 resync=true; added p3 0->5 resync=true; updated p2 3->4 resync=true"; got != want &&
		got != "deleted p1 1->0 resync=true; updated p2 3->4 resync=true; added p3 0->5 resync=true" {
		t.Fatalf("after reconnect: %s\nwant %s", got, want)
	}
	if l := ic.List(); len(l) != 2 || l[0].Name != "p2" || l[1].Name != "p3" {
		t.Fatalf("cache after reconnect %+v", l)
	}
	if _, ok := ic.Get("p1"); ok {
		t.Fatal("p1 still cached")
	}
	if _, err := c.Transact(ctx, "Open_vSwitch", Select("Interface", nil)); err != nil {
		t.Fatalf("transact after reconnect: %v", err)
	}

	// A malformed update: the client drops the connection and resynchronises.
	s.broadcast(`{"method":"update","params":["nodeflow-1",{"Interface":{"x":{}}}],"id":null}`)
	deadline := time.Now().Add(10 * time.Second)
	for s.connCount() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("client did not reconnect after a malformed update")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	if err := c.Echo(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMonitorCancel(t *testing.T) {
	s := newFakeServer(t)
	s.msgs = make(chan fakeMsg, 10)
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	var mu sync.Mutex
	var got []MonitorUpdate
	m, err := c.Monitor(ctx, "Open_vSwitch", map[string]MonitorRequest{"Interface": {Columns: []string{"name"}, Select: &MonitorSelect{Initial: true, Insert: true}}},
		func(u MonitorUpdate) { mu.Lock(); got = append(got, u); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	req := <-s.msgs
	if req.Method != "monitor" || string(req.Params) != `["Open_vSwitch","`+m.ID()+`",{"Interface":{"columns":["name"],"select":{"initial":true,"insert":true,"delete":false,"modify":false}}}]` {
		t.Fatalf("monitor request %s %s", req.Method, req.Params)
	}
	if err := m.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if req := <-s.msgs; req.Method != "monitor_cancel" || string(req.Params) != `["`+m.ID()+`"]` {
		t.Fatalf("cancel request %s %s", req.Method, req.Params)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !got[0].Snapshot {
		t.Fatalf("updates %+v", got)
	}
}

func TestCallsAfterClose(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, fastOptions())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListDBs(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// A helper whose guard fails (another client changed the row after the
// read) reads again and retries; the second write goes through.
func TestGuardedRetryAfterConcurrentChange(t *testing.T) {
	s := newFakeServer(t)
	var mu sync.Mutex
	var writes []string
	reads := 0
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		if m.Method != "transact" {
			return false
		}
		var params []json.RawMessage
		_ = json.Unmarshal(m.Params, &params)
		var first struct{ Op, Table string }
		_ = json.Unmarshal(params[1], &first)
		mu.Lock()
		defer mu.Unlock()
		switch first.Op {
		case "select": // the read: br0 exists in standalone mode
			reads++
			fc.reply(m.ID, `[{"rows":[{"_uuid":["uuid","`+uuidA+`"],"name":"br0","ports":["set",[]],"datapath_type":"netdev",`+
				`"fail_mode":"standalone","protocols":["set",["OpenFlow13","OpenFlow15"]],"other_config":["map",[]],"external_ids":["map",[]]}]},`+
				`{"rows":[{"_uuid":["uuid","`+uuidB+`"],"bridges":["uuid","`+uuidA+`"]}]}]`)
		case "wait":
			writes = append(writes, string(m.Params))
			if len(writes) == 1 {
				fc.reply(m.ID, `[{"error":"timed out"},null]`)
			} else {
				fc.reply(m.ID, `[{},{"count":1}]`)
			}
		default:
			t.Errorf("unexpected transaction %s", m.Params)
			fc.reply(m.ID, `[]`)
		}
		return true
	})
	c := dialFake(t, s, fastOptions())
	if err := c.EnsureBridge(testCtx(t), BridgeSpec{Name: "br0", DatapathType: "netdev"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 2 || len(writes) != 2 {
		t.Fatalf("%d reads and %d writes, want 2 and 2", reads, len(writes))
	}
	want := `["Open_vSwitch",` +
		`{"op":"wait","table":"Bridge","where":[["_uuid","==",["uuid","` + uuidA + `"]]],"columns":["fail_mode"],"until":"==","rows":[{"fail_mode":"standalone"}],"timeout":0},` +
		`{"op":"update","table":"Bridge","where":[["_uuid","==",["uuid","` + uuidA + `"]]],"row":{"fail_mode":"secure"}}]`
	if writes[1] != want {
		t.Fatalf("write\n%s\nwant\n%s", writes[1], want)
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	s := newFakeServer(t)
	s.rows[uuidA] = ifaceJSON("p1", 0)
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	ic, err := c.Interfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub := ic.Subscribe()
	done := make(chan error, 1)
	go func() { _, err := c.WaitOfport(ctx, "p1"); done <- err }()
	// WaitOfport subscribes too; wait until it has, by polling the cache's
	// subscriber count with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ic.mu.RLock()
		n := len(ic.subs)
		ic.mu.RUnlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("WaitOfport did not subscribe")
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-sub.Events(); ok {
		t.Fatal("subscription channel still open after Close")
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "ovsdb: wait ofport p1: subscription closed") {
		t.Fatalf("WaitOfport after Close: %v", err)
	}
}

// TestOnChange calls its function after an update, and stops with its
// context.
func TestOnChange(t *testing.T) {
	s := newFakeServer(t)
	s.rows[uuidA] = ifaceJSON("p1", 1)
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	ic, err := c.Interfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	calls := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		ic.OnChange(wctx, func() { calls <- struct{}{} })
		close(done)
	}()
	// OnChange subscribes before its first event: retry the update until
	// one is seen.
	deadline := time.After(10 * time.Second)
	for port := 2; ; port++ {
		s.broadcast(fmt.Sprintf(`{"method":"update","params":["nodeflow-1",{"Interface":{"%s":{"old":{"ofport":%d},"new":%s}}}],"id":null}`,
			uuidA, port-1, ifaceJSON("p1", port)))
		select {
		case <-calls:
		case <-time.After(100 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("OnChange never called its function")
		}
		break
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("OnChange did not return when its context ended")
	}
}
