package ofconn

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// testBridge starts a sandbox with bridge br0 (userspace datapath, secure
// fail mode, OF1.3 and OF1.5) and returns it with the bridge's address.
func testBridge(t testing.TB, extra ...string) (*ovs.Sandbox, string) {
	t.Helper()
	sb := ovstest.New(t, ovs.Options{})
	ovstest.AddBridge(t, sb, "br0", extra...)
	return sb, "unix:" + sb.MgmtSock("br0")
}

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// testDial dials with short timeouts and closes the Conn at test end.
func testDial(t testing.TB, addr string, opts Options) *Conn {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.ReconnectMin == 0 {
		opts.ReconnectMin = 50 * time.Millisecond
		opts.ReconnectMax = 500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestIntegrationHandshake(t *testing.T) {
	sb, addr := testBridge(t)
	if _, err := sb.Vsctl("add-br", "br13", "--", "set", "bridge", "br13", "datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)

	t.Run("OF1.5 negotiated and features", func(t *testing.T) {
		c := testDial(t, addr, Options{})
		if v := c.Version(); v != openflow.Version15 {
			t.Errorf("version %s, want OF1.5", v)
		}
		f, ok := c.Features()
		if !ok {
			t.Fatal("no features")
		}
		out, err := sb.Vsctl("get", "bridge", "br0", "datapath_id")
		if err != nil {
			t.Fatal(err)
		}
		want, err := strconv.ParseUint(strings.Trim(out, `"`), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if f.DatapathID != want || f.NTables != 254 {
			t.Errorf("features %+v, want datapath id %016x and 254 tables", f, want)
		}
		if err := c.Barrier(ctx); err != nil {
			t.Errorf("Barrier: %v", err)
		}
		if err := c.Echo(ctx, []byte("ping")); err != nil {
			t.Errorf("Echo: %v", err)
		}
	})

	t.Run("OF1.3 when the bridge allows only OF1.3", func(t *testing.T) {
		c := testDial(t, "unix:"+sb.MgmtSock("br13"), Options{})
		if v := c.Version(); v != openflow.Version13 {
			t.Errorf("version %s, want OF1.3", v)
		}
		if err := c.Barrier(ctx); err != nil {
			t.Errorf("Barrier: %v", err)
		}
	})

	t.Run("no common version", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := Dial(dctx, "unix:"+sb.MgmtSock("br13"), Options{Versions: []openflow.Version{openflow.Version15}, Logger: quietLogger(), ReconnectMin: 100 * time.Millisecond})
		if !errors.Is(err, ErrVersion) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrVersion and DeadlineExceeded", err)
		}
		var oe *OpError
		if !errors.As(err, &oe) || oe.Op != "dial" {
			t.Errorf("err %v is not an OpError for dial", err)
		}
	})

	t.Run("session setup enables async messages", func(t *testing.T) {
		for _, v := range []openflow.Version{openflow.Version13, openflow.Version15} {
			c := testDial(t, addr, Options{Versions: []openflow.Version{v}, ControllerID: 7})
			reply, err := c.Request(ctx, &openflow.GetConfigRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if gc := reply.(*openflow.GetConfigReply); gc.MissSendLen != 0xffff {
				t.Errorf("%s: miss_send_len %d, want 65535", v, gc.MissSendLen)
			}
			reply, err = c.Request(ctx, &openflow.GetAsyncRequest{})
			if err != nil {
				t.Fatal(err)
			}
			got := reply.(*openflow.GetAsyncReply).Config
			want := DefaultAsyncConfig(v)
			if got.PacketIn != want.PacketIn || got.PortStatus != want.PortStatus || got.FlowRemoved != want.FlowRemoved {
				t.Errorf("%s: async config %+v, want %+v", v, got, want)
			}
		}
	})
}

func TestIntegrationErrors(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	c := testDial(t, addr, Options{})
	_ = sb

	// A flow mod adding to table 255 is rejected with FLOW_MOD_FAILED/BAD_TABLE_ID.
	bad := openflow.NewFlowMod(openflow.FlowAdd)
	bad.Table = 255
	bad.Priority = 10
	bad.Match = openflow.NewMatch(openflow.EthType(0x0800))

	t.Run("apply names the failing message", func(t *testing.T) {
		good := openflow.NewFlowMod(openflow.FlowAdd)
		good.Table = 1
		err := c.Apply(ctx, good, bad, good)
		var be *BatchError
		if !errors.As(err, &be) || len(be.Errors) != 1 {
			t.Fatalf("err = %v, want a BatchError with one failure", err)
		}
		me := be.Errors[0]
		if me.Index != 1 || me.Total != 3 || me.Message != bad {
			t.Errorf("failure %d of %d (%v)", me.Index, me.Total, me.Message)
		}
		var oe *openflow.OFError
		if !errors.As(err, &oe) || oe.Name() != "OFPFMFC_BAD_TABLE_ID" {
			t.Fatalf("err = %v, want OFPFMFC_BAD_TABLE_ID", err)
		}
		if !strings.Contains(err.Error(), "ofconn: apply: message 2 of 3 (") || !strings.HasSuffix(err.Error(), "OFPFMFC_BAD_TABLE_ID (type 5 code 2)") {
			t.Errorf("error text %q", err)
		}
		// The failed request comes back whole.
		h, m, err := oe.Request()
		if err != nil || h.Type != openflow.TypeFlowMod {
			t.Fatalf("Request() = %+v %T %v", h, m, err)
		}
		if fm, ok := m.(*openflow.FlowMod); !ok || fm.Table != 255 {
			t.Errorf("failed request decoded as %#v", m)
		}
	})

	t.Run("request answered with an error", func(t *testing.T) {
		// NXT_SET_CONTROLLER_ID with a non-zero reserved byte: NXBRC_MUST_BE_ZERO.
		raw := &openflow.RawMessage{Header: openflow.Header{Type: openflow.TypeExperimenter}, Experimenter: openflow.ExperimenterNicira, ExpType: 20,
			Body: []byte{0, 0, 0, 0, 1, 0, 0, 7}}
		_, err := c.Request(ctx, raw)
		var oe *openflow.OFError
		if !errors.As(err, &oe) || oe.Name() != "NXBRC_MUST_BE_ZERO" {
			t.Fatalf("err = %v, want NXBRC_MUST_BE_ZERO", err)
		}
		var op *OpError
		if !errors.As(err, &op) || op.Op != "request RawMessage" {
			t.Errorf("err = %#v", err)
		}
	})

	t.Run("capture an OVS error", func(t *testing.T) {
		// Errors for messages sent with Send go to the error handler.
		got := make(chan AsyncMessage, 1)
		c2 := testDial(t, addr, Options{Handlers: Handlers{Error: func(m AsyncMessage) { got <- m }}})
		if err := c2.Send(ctx, bad); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			oe, ok := m.Message.(*openflow.OFError)
			if !ok || oe.Name() != "OFPFMFC_BAD_TABLE_ID" {
				t.Fatalf("got %#v", m.Message)
			}
			t.Logf("OVS error: %s", hex.EncodeToString(m.Raw))
		case <-ctx.Done():
			t.Fatal("no error delivered")
		}
	})
}

func TestIntegrationConcurrent(t *testing.T) {
	_, addr := testBridge(t)
	ctx := testCtx(t)
	c := testDial(t, addr, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				var err error
				switch i % 4 {
				case 0:
					err = c.Barrier(ctx)
				case 1:
					err = c.Echo(ctx, []byte(fmt.Sprintf("%d/%d", g, i)))
				case 2:
					var r openflow.Message
					r, err = c.Request(ctx, &openflow.FeaturesRequest{})
					if _, ok := r.(*openflow.FeaturesReply); err == nil && !ok {
						err = fmt.Errorf("features request answered by %T", r)
					}
				case 3:
					fm := openflow.NewFlowMod(openflow.FlowAdd)
					fm.Table = uint8(g % 10)
					fm.Priority = uint16(i)
					err = c.Apply(ctx, fm)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestIntegrationReconnect(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	events := make(chan ConnectEvent, 10)
	c := testDial(t, addr, Options{
		DetectEmptyTables: true,
		OnConnect:         func(_ context.Context, _ *Conn, ev ConnectEvent) { events <- ev },
	})
	first := <-events
	if first.Session != 1 || first.Restarted || first.FlowCount != 0 {
		t.Errorf("first event %+v", first)
	}
	fm := openflow.NewFlowMod(openflow.FlowAdd)
	fm.Table = 3
	if err := c.Apply(ctx, fm); err != nil {
		t.Fatal(err)
	}
	if err := sb.RestartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Session < 2 || !ev.Restarted || ev.FlowCount != 0 {
			t.Errorf("event after restart %+v, want a restart with empty tables", ev)
		}
		t.Logf("after restart: %+v", ev)
	case <-ctx.Done():
		t.Fatal("no reconnect")
	}
	if err := c.Apply(ctx, fm); err != nil {
		t.Errorf("Apply after reconnect: %v", err)
	}
	// A connection drop without a restart: the tables keep their flow.
	s := c.session()
	s.fail(errors.New("test: drop"))
	select {
	case ev := <-events:
		if ev.Restarted {
			t.Errorf("event after a plain reconnect %+v, want no restart", ev)
		}
	case <-ctx.Done():
		t.Fatal("no reconnect")
	}
	if st := c.Stats(); st.Connects < 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestIntegrationKilledSwitch(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	c := testDial(t, addr, Options{})
	if err := sb.KillVswitchd(); err != nil {
		t.Fatal(err)
	}
	waittest.Poll(t, "disconnect noticed", 10*time.Second, func() error {
		if c.Connected() {
			return errors.New("still connected")
		}
		return nil
	})
	err := c.Barrier(ctx)
	if !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Barrier while the switch is down: %v, want ErrDisconnected", err)
	}
	if err := sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	waittest.Poll(t, "reconnect", 20*time.Second, func() error { return c.Barrier(ctx) })
}

func TestIntegrationFlowMonitorAndRole(t *testing.T) {
	_, addr := testBridge(t)
	ctx := testCtx(t)
	updates := make(chan AsyncMessage, 16)
	mon := testDial(t, addr, Options{Handlers: Handlers{FlowMonitor: func(m AsyncMessage) { updates <- m }}})
	req := openflow.NewFlowMonitorRequest(1, openflow.MonitorInitial|openflow.MonitorAdded|openflow.MonitorRemoved|openflow.MonitorModified|openflow.MonitorInstructions)
	if _, err := mon.Multipart(ctx, req); err != nil {
		t.Fatal(err)
	}
	other := testDial(t, addr, Options{})
	fm := openflow.NewFlowMod(openflow.FlowAdd)
	fm.Table, fm.Priority = 4, 44
	if err := other.Apply(ctx, fm); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-updates:
		r, ok := m.Message.(*openflow.MultipartReply)
		if !ok || m.Header.Xid != 0 {
			t.Fatalf("update %+v %T", m.Header, m.Message)
		}
		ups, err := r.FlowUpdates()
		if err != nil || len(ups) != 1 {
			t.Fatalf("updates %v %v", ups, err)
		}
		t.Logf("flow monitor update: %+v", ups[0])
	case <-ctx.Done():
		t.Fatal("no flow monitor update")
	}

	// Role: become primary, then a stale generation is refused.
	reply, err := other.Request(ctx, &openflow.RoleRequest{Role: openflow.RolePrimary, GenerationID: 5})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := reply.(*openflow.RoleReply); !ok || r.Role != openflow.RolePrimary || r.GenerationID != 5 {
		t.Errorf("role reply %#v", reply)
	}
	_, err = mon.Request(ctx, &openflow.RoleRequest{Role: openflow.RolePrimary, GenerationID: 4})
	var oe *openflow.OFError
	if !errors.As(err, &oe) || oe.Name() != "OFPRRFC_STALE" {
		t.Errorf("stale role request: %v", err)
	}
}
