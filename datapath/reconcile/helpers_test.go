package reconcile

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// testBridge starts a sandbox with a secure, userspace bridge that speaks
// OF1.3 and OF1.5, and returns it with the bridge's address.
func testBridge(t testing.TB, opts ovs.Options, bridge string) (*ovs.Sandbox, string) {
	t.Helper()
	sb := ovstest.New(t, opts)
	return sb, addBridge(t, sb, opts, bridge)
}

// addBridge adds bridge to sb (opts are sb's) and returns the address of
// its management socket.
func addBridge(t testing.TB, sb *ovs.Sandbox, opts ovs.Options, bridge string) string {
	t.Helper()
	dp := "netdev"
	if opts.Dummy {
		dp = "dummy"
	}
	if _, err := sb.Vsctl("add-br", bridge, "--", "set", "bridge", bridge, "datapath_type="+dp,
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	return "unix:" + sb.MgmtSock(bridge)
}

// running is a reconciler with its connection and loop.
type running struct {
	r      *Reconciler
	conn   *ofconn.Conn
	cancel context.CancelFunc
	done   chan error
}

// start dials addr and runs a reconciler for store until stop or the test
// ends, and waits for its first full sync.
func start(t testing.TB, addr string, store *Store, opts Options) *running {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.Bridge == "" {
		opts.Bridge = "br0"
	}
	r := New(store, opts)
	ctx, cancel := context.WithCancel(context.Background())
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	conn, err := ofconn.Dial(dctx, addr, r.ConnOptions(ofconn.Options{
		Logger: quietLogger(), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
	}))
	if err != nil {
		cancel()
		t.Fatalf("dial %s: %v", addr, err)
	}
	run := &running{r: r, conn: conn, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- r.Run(ctx) }()
	t.Cleanup(run.stop)
	select {
	case <-r.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("no first sync within 30 s")
	}
	return run
}

func (run *running) stop() {
	if run.cancel == nil {
		return
	}
	run.cancel()
	select {
	case <-run.done:
		run.conn.Close()
	case <-time.After(10 * time.Second):
		// A stuck write: closing the connection ends it.
		run.conn.Close()
		<-run.done
	}
	run.cancel = nil
}

func (run *running) flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run.r.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

var cookieRE = regexp.MustCompile(`cookie=0x([0-9a-f]+)`)

// normalize sorts lines and, when maskGen, clears the generation bits of
// cookies.
func normalize(lines []string, maskGen bool) string {
	var out []string
	for _, l := range lines {
		l = strings.TrimRight(l, " ")
		if l == "" {
			continue
		}
		if maskGen {
			l = cookieRE.ReplaceAllStringFunc(l, func(m string) string {
				v, _ := strconv.ParseUint(m[len("cookie=0x"):], 16, 64)
				return fmt.Sprintf("cookie=0x%x", v&uint64(plan.OwnerMask))
			})
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// ovsState is what ovs-ofctl shows of the bridge: dump-flows --no-stats and
// dump-groups, in OpenFlow 1.5, headers dropped.
func ovsState(sb *ovs.Sandbox, bridge string, maskGen bool) (string, error) {
	flows, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "--no-stats", bridge)
	if err != nil {
		return "", err
	}
	groups, err := sb.Ofctl("-O", "OpenFlow15", "dump-groups", bridge)
	if err != nil {
		return "", err
	}
	var lines []string
	for _, l := range strings.Split(flows+"\n"+groups, "\n") {
		if strings.Contains(l, " reply (") {
			continue
		}
		lines = append(lines, l)
	}
	return normalize(lines, maskGen), nil
}

// desiredState is the store's desired flows and groups as Render prints
// them, in the same form as ovsState.
func desiredState(t testing.TB, s *Store, gen plan.Generation, maskGen bool) string {
	t.Helper()
	var sb strings.Builder
	if err := s.Render(&sb, "", gen); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(sb.String(), "\n") {
		if strings.HasPrefix(l, "#") || strings.HasPrefix(l, " meter=") {
			continue
		}
		lines = append(lines, l)
	}
	return normalize(lines, maskGen)
}

func sameState(t testing.TB, sb *ovs.Sandbox, bridge string, s *Store, gen plan.Generation, maskGen bool) error {
	got, err := ovsState(sb, bridge, maskGen)
	if err != nil {
		return err
	}
	want := desiredState(t, s, gen, maskGen)
	if got != want {
		return fmt.Errorf("ovs-ofctl shows\n%s\n--- desired\n%s\n--- diff\n%s", got, want, lineDiff(got, want))
	}
	return nil
}

// lineDiff lists the lines only one side has.
func lineDiff(got, want string) string {
	g := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	w := map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	var out []string
	for l := range g {
		if !w[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range w {
		if !g[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// Realistic flows, in the shapes the features build.

var hashFields = []openflow.Field{
	openflow.IPv4Src(netip.MustParseAddr("255.255.255.255")),
	openflow.IPv4Dst(netip.MustParseAddr("255.255.255.255")),
	openflow.TCPSrc(0xffff),
	openflow.TCPDst(0xffff),
}

func mustMatch(f openflow.Field, err error) openflow.Field {
	if err != nil {
		panic(err)
	}
	return f
}

func mustLoad(a openflow.Action, err error) openflow.Action {
	if err != nil {
		panic(err)
	}
	return a
}

func ipN(base string, n int) netip.Addr {
	a := netip.MustParseAddr(base).As4()
	a[2] += byte(n >> 8)
	a[3] += byte(n)
	return netip.AddrFrom4(a)
}

// serviceState is a service port with endpoints: its select group, its
// ServiceLB flow and one EndpointDNAT flow per endpoint.
func serviceState(gid uint32, vip netip.Addr, port uint16, eps []netip.Addr, epPort uint16, snat bool) State {
	g := openflow.GroupEntry{ID: gid, Type: openflow.GroupTypeSelect, SelectionMethod: "hash", SelectionFields: hashFields}
	st := State{}
	for i, ep := range eps {
		g.Buckets = append(g.Buckets, openflow.Bucket{ID: uint32(i), Weight: 1, Actions: []openflow.Action{
			mustLoad(plan.EndpointIPv4.LoadValue(uint64(binaryAddr(ep)))),
			mustLoad(plan.EndpointPort.LoadValue(uint64(epPort))),
			openflow.ResubmitTable(uint8(plan.PodEndpointDNAT)),
		}})
		exec := []openflow.Action{openflow.NAT{Dst: true, MinAddr: ep, MinPort: epPort}}
		if snat {
			exec = append(exec, plan.SNATToNodeIP.Load())
		}
		st.Flows = append(st.Flows, openflow.Flow{
			Table: uint8(plan.PodEndpointDNAT), Priority: uint16(plan.PriorityNormal),
			Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPProto(6),
				mustMatch(plan.ServiceID.MatchValue(uint64(gid))),
				mustMatch(plan.EndpointIPv4.MatchValue(uint64(binaryAddr(ep)))),
				mustMatch(plan.EndpointPort.MatchValue(uint64(epPort)))),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
				openflow.CT{Commit: true, Zone: 65000, RecircTable: uint8(plan.PodSNAT), Actions: exec},
			}}},
		})
	}
	if len(eps) > 0 {
		st.Groups = []openflow.GroupEntry{g}
	}
	var acts []openflow.Action
	if len(eps) > 0 {
		acts = []openflow.Action{mustLoad(plan.ServiceID.LoadValue(uint64(gid))), openflow.Group{ID: gid}}
	} else {
		acts = []openflow.Action{openflow.Controller2{MaxLen: 0xffff, ControllerID: plan.ControllerID, Reason: 1,
			Userdata: []byte{byte(plan.PacketInReject)}, MeterID: plan.MeterReject}}
	}
	st.Flows = append(st.Flows, openflow.Flow{
		Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityHigh),
		Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPProto(6), openflow.IPv4Dst(vip), openflow.TCPDst(port),
			openflow.CtState(openflow.CtNew|openflow.CtTrk, openflow.CtNew|openflow.CtTrk)),
		Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: acts}},
	})
	return st
}

func binaryAddr(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// podState is a local pod: classifier, port security, delivery.
func podState(ofport uint32, mac net.HardwareAddr, addr netip.Addr, nsID uint64) State {
	router := net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x01}
	return State{Flows: []openflow.Flow{
		{Table: uint8(plan.PodClassifier), Priority: uint16(plan.PriorityNormal),
			Match: openflow.NewMatch(openflow.InPort(ofport)),
			Instructions: []openflow.Instruction{
				openflow.ApplyActions{Actions: []openflow.Action{plan.FromPod.Load()}},
				openflow.GotoTable{Table: uint8(plan.PodPortSecurity)}}},
		{Table: uint8(plan.PodPortSecurity), Priority: uint16(plan.PriorityNormal),
			Match: openflow.NewMatch(openflow.InPort(ofport), openflow.EthSrc(mac), openflow.EthType(0x0800), openflow.IPv4Src(addr)),
			Instructions: []openflow.Instruction{
				openflow.ApplyActions{Actions: []openflow.Action{mustLoad(plan.NamespaceID.LoadValue(nsID))}},
				openflow.GotoTable{Table: uint8(plan.PodUnSNAT)}}},
		{Table: uint8(plan.PodLocalDelivery), Priority: uint16(plan.PriorityNormal),
			Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(addr)),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
				openflow.SetField{Field: openflow.EthSrc(router)},
				openflow.SetField{Field: openflow.EthDst(mac)},
				openflow.OutputPort(ofport),
			}}}},
	}}
}

// pipelineState is the explicit miss flow of every table of br0.
func pipelineState() State { return State{Flows: gatewayflows.PipelineFlows(plan.Pod)} }

// meterState is the meter of the no-endpoint rejects.
func meterState() State {
	return State{
		Meters: []openflow.MeterEntry{{ID: plan.MeterReject, Flags: openflow.MeterFlagPktps | openflow.MeterFlagBurst,
			Bands: []openflow.MeterBand{{Type: openflow.MeterBandDrop, Rate: 100, BurstSize: 200}}}},
	}
}
