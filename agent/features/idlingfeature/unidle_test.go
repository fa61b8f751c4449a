package idlingfeature

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"nodeflow/agent/feature"
	"nodeflow/datapath/idlingflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// syn returns an ethernet frame of a TCP SYN from a pod to dst:80.
func syn(sport uint16, seq uint32) []byte {
	f := make([]byte, 14+20+20)
	binary.BigEndian.PutUint16(f[12:14], 0x0800)
	ip := f[14:]
	ip[0], ip[9] = 0x45, 6
	binary.BigEndian.PutUint16(ip[2:4], 40)
	copy(ip[12:16], []byte{10, 244, 0, 5})
	copy(ip[16:20], []byte{10, 96, 0, 50})
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:2], sport)
	binary.BigEndian.PutUint16(tcp[2:4], 80)
	binary.BigEndian.PutUint32(tcp[4:8], seq)
	tcp[12], tcp[13] = 5<<4, 0x02
	return f
}

func packetIn(id uint32, inPort uint32, frame []byte) feature.PacketIn {
	return feature.PacketIn{Bridge: plan.Pod, Category: plan.PacketInUnidle, Msg: &openflow.PacketIn{
		Reason: openflow.PacketInAction, Table: uint8(plan.PodServiceLB), Data: frame, Userdata: idlingflows.Userdata(id),
		Match: openflow.NewMatch(openflow.InPort(inPort))}}
}

// TestHoldAndRelease follows one idled port through a wait cycle: its
// flows are set, the first packet asks for pods once, a retransmit takes
// no room, the bounds hold, and unidling re-injects every held packet to
// table 0 from its port (through breth0 when it came from there) and
// removes the flows.
func TestHoldAndRelease(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: types.UID("u1")}}
	h := featuretest.New(featuretest.DefaultNode(), svc)
	now := time.Unix(1000, 0)
	var rejected []*openflow.PacketIn
	u := New(Options{PortPackets: 3, HoldTime: 10 * time.Second, Now: func() time.Time { return now },
		Reject: func(p *openflow.PacketIn) bool { rejected = append(rejected, p); return true }})
	ctx := h.Synced(t, u)
	name := service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: corev1.ProtocolTCP}
	port := &service.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.50")}}
	ids := map[string]uint32{serviceflows.GroupKey(name, service.IPv4, false): 7}
	u.Idled(name, port, ids)
	st, ok := h.Stores[plan.Pod].Get(idlingflows.Owner(name))
	if !ok || len(st.Flows) != 1 || !strings.Contains(st.Flows[0].String(), "priority=195,ct_state=+new+trk,tcp,nw_dst=10.96.0.50,tp_dst=80") {
		t.Fatalf("idled port's flows: %v", st.Flows)
	}

	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1)))
	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1)))  // the SYN retransmitted
	u.HandlePacketIn(packetIn(7, 2, syn(40001, 9)))  // from breth0, through the patch port
	u.HandlePacketIn(packetIn(99, 5, syn(40002, 9))) // not an idled port
	if u.packets != 2 {
		t.Fatalf("held %d packets, want 2 (one retransmit, one unknown port)", u.packets)
	}
	events := drain(h.Events)
	if len(events) != 1 || !strings.Contains(events[0], "NeedPods The service-port ns/web:http needs pods.") {
		t.Fatalf("events %q, want one NeedPods", events)
	}
	u.HandlePacketIn(packetIn(7, 4, syn(40003, 1)))
	u.HandlePacketIn(packetIn(7, 4, syn(40004, 1))) // over PortPackets
	if u.packets != 3 {
		t.Fatalf("held %d packets, want the port's bound 3", u.packets)
	}

	u.Unidled(name, true)
	if _, ok := h.Stores[plan.Pod].Get(idlingflows.Owner(name)); ok {
		t.Error("the unidled port's flows are still wanted")
	}
	u.doRelease(ctx, <-u.release)
	sent := h.Sent()
	if len(sent) != 3 {
		t.Fatalf("re-injected %d packets, want 3", len(sent))
	}
	var fromGateway int
	for _, s := range sent {
		po, ok := s.Msg.(*openflow.PacketOut)
		switch {
		case ok && s.Bridge == plan.Gateway:
			// Through breth0's patch port (2), from its LOCAL port.
			fromGateway++
			if po.InPort != openflow.PortLocal || openflow.ActionsString(po.Actions) != "output:2" {
				t.Errorf("re-injection through breth0 %+v: want in_port=LOCAL, output to the patch port", po)
			}
		case !ok || s.Bridge != plan.Pod || po.InPort != 4 || !strings.Contains(openflow.ActionsString(po.Actions), "TABLE"):
			t.Errorf("re-injection %+v: want a packet-out from the pod's port to table 0", s)
		}
	}
	if fromGateway != 1 {
		t.Errorf("%d packets re-injected through breth0, want 1", fromGateway)
	}
	if len(rejected) != 0 {
		t.Errorf("%d packets rejected", len(rejected))
	}
}

// TestLatePacket: a packet-in of a port released a moment ago (a datapath
// flow of its catch flows not yet revalidated) is sent on like the held
// packets, re-injected or rejected as the port was released; after the
// window it is an unknown port's.
func TestLatePacket(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: types.UID("u1")}}
	h := featuretest.New(featuretest.DefaultNode(), svc)
	now := time.Unix(1000, 0)
	var rejected int
	u := New(Options{Now: func() time.Time { return now }, Reject: func(*openflow.PacketIn) bool { rejected++; return true }})
	ctx := h.Started(t, u)
	ports := map[string]uint32{"http": 7, "gone": 8}
	for p, id := range ports {
		name := service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}, Port: p, Protocol: corev1.ProtocolTCP}
		port := &service.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.50")}}
		u.Idled(name, port, map[string]uint32{serviceflows.GroupKey(name, service.IPv4, false): id})
		u.Unidled(name, p == "http") // "gone" lost its Service
		if r := <-u.release; len(r.held) != 0 {
			t.Fatalf("released %d packets, none held", len(r.held))
		}
	}
	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1)))
	u.HandlePacketIn(packetIn(8, 4, syn(40001, 1)))
	for range 2 {
		select {
		case r := <-u.release:
			u.doRelease(ctx, r)
		default:
			t.Fatal("a late packet-in was not sent on")
		}
	}
	if sent := h.Sent(); len(sent) != 1 || sent[0].Bridge != plan.Pod {
		t.Errorf("re-injected %v, want the late packet of the released port", sent)
	}
	if rejected != 1 {
		t.Errorf("%d late packets rejected, want the one of the port without endpoints", rejected)
	}
	now = now.Add(lateWindow)
	u.expire()
	u.HandlePacketIn(packetIn(7, 4, syn(40002, 1)))
	select {
	case r := <-u.release:
		t.Errorf("a packet-in after the window sent on: %+v", r)
	default:
	}
}

// A packet caught after arriving on the tunnel port goes back with its
// tunnel metadata, and Open vSwitch reads the packet-out so.
func TestReinjectionKeepsTunnelMetadata(t *testing.T) {
	ports := featuretest.DefaultNode().Ports
	src := netip.MustParseAddr("172.30.0.12")
	pin := &openflow.PacketIn{Reason: openflow.PacketInAction, Data: syn(40000, 1), Userdata: idlingflows.Userdata(7),
		Match: openflow.NewMatch(openflow.InPort(ports.Tunnel), openflow.TunnelID(0x2a), openflow.TunIPv4Src(src), openflow.Reg(5, 7, 0xffffffff))}
	bridge, po := reinjection(pin, ports)
	if bridge != plan.Pod || po.InPort != ports.Tunnel {
		t.Fatalf("re-injected to %v from %d, want br0 from the tunnel port %d", bridge, po.InPort, ports.Tunnel)
	}
	if got := po.Match.String(); got != "tun_id=0x2a,tun_src=172.30.0.12" {
		t.Errorf("packet-out match %q, want the tunnel fields only (no register of the caught packet)", got)
	}
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
			t.Fatalf("ovs-ofctl not found and NODEFLOW_REQUIRE_OVS is set: %v", err)
		}
		t.Skip("ovs-ofctl not installed: the packet-out is not checked against Open vSwitch")
	}
	b, err := openflow.Marshal(openflow.Version15, 1, po)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(b)).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl ofp-print: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "tun_id=0x2a,tun_src=172.30.0.12,in_port=1") || strings.Contains(string(out), "error") {
		t.Errorf("ovs-ofctl reads the packet-out as:\n%s", out)
	}
}

// TestExpiry: a packet held past the hold time is rejected, and the next
// packet starts a new wait cycle with a new NeedPods.
func TestExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	var rejected int
	u, h, _ := idledWeb(t, Options{HoldTime: 10 * time.Second, Now: func() time.Time { return now },
		Reject: func(*openflow.PacketIn) bool { rejected++; return true }})
	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1)))
	now = now.Add(9 * time.Second)
	u.expire()
	if rejected != 0 {
		t.Fatalf("rejected before the hold time")
	}
	now = now.Add(time.Second)
	u.expire()
	if rejected != 1 || u.packets != 0 {
		t.Fatalf("after the hold time: %d rejected, %d held; want 1, 0", rejected, u.packets)
	}
	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1))) // the client tries again
	if n := len(drain(h.Events)); n != 2 {
		t.Fatalf("%d NeedPods events, want 2 (one per wait cycle)", n)
	}
}

// TestUnidledWithoutEndpoints: a port that goes away (or loses its
// annotation) with no endpoint answers its held packets as a service
// without endpoints instead of re-injecting them.
func TestUnidledWithoutEndpoints(t *testing.T) {
	var rejected int
	u, h, name := idledWeb(t, Options{Reject: func(*openflow.PacketIn) bool { rejected++; return true }})
	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1)))
	u.HandlePacketIn(packetIn(7, 4, syn(40001, 1)))
	u.Unidled(name, false)
	u.doRelease(context.Background(), <-u.release)
	if rejected != 2 || len(h.Sent()) != 0 {
		t.Fatalf("%d rejected, %d re-injected; want 2, 0", rejected, len(h.Sent()))
	}
}

// idledWeb starts an Unidler with opts on a test host and idles ns/web's
// TCP port 80 (ClusterIP 10.96.0.50, ServiceID 7).
func idledWeb(t *testing.T, opts Options) (*Unidler, *featuretest.Host, service.ServicePortName) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	h := featuretest.New(featuretest.DefaultNode(), svc)
	u := New(opts)
	h.Started(t, u)
	name := service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: corev1.ProtocolTCP}
	port := &service.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.50")}}
	u.Idled(name, port, map[string]uint32{serviceflows.GroupKey(name, service.IPv4, false): 7})
	return u, h, name
}

func drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestReusedID: the services feature reuses group ids. When ns/web's id 7
// goes to ns/api, web re-idled under another id or unidled must not take
// 7 from api: api's packets are still held.
func TestReusedID(t *testing.T) {
	u, _, web := idledWeb(t, Options{})
	api := service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "api"}, Port: "http", Protocol: corev1.ProtocolTCP}
	apiPort := &service.ServicePort{Name: api, Protocol: corev1.ProtocolTCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.51")}}
	webPort := &service.ServicePort{Name: web, Protocol: corev1.ProtocolTCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.50")}}
	u.Idled(api, apiPort, map[string]uint32{serviceflows.GroupKey(api, service.IPv4, false): 7})
	u.Idled(web, webPort, map[string]uint32{serviceflows.GroupKey(web, service.IPv4, false): 8})
	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1)))
	u.Unidled(web, false)
	u.HandlePacketIn(packetIn(7, 4, syn(40001, 1)))
	if held := len(u.byName[api].held); held != 2 {
		t.Fatalf("api holds %d packets, want 2: its id was taken back by web", held)
	}
	if p := u.byID[8]; p != nil {
		t.Errorf("id 8 still maps to %s after web was unidled", p.name)
	}
}

// TestNeedPodsProcessedService: with the service proxy running, the
// Services' cache holds its processed form (proxy.ServiceOf), and the
// NeedPods event still names the Service.
func TestNeedPodsProcessedService(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u-web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.50", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	h := featuretest.New(featuretest.DefaultNode(), svc)
	if err := h.Informers().Core().V1().Services().Informer().SetTransform(func(obj any) (any, error) {
		if s, ok := obj.(*corev1.Service); ok {
			return service.ServiceOf(s), nil
		}
		return obj, nil
	}); err != nil {
		t.Fatal(err)
	}
	u := New(Options{})
	h.Started(t, u)
	if obj, _, _ := u.svcs.GetByKey("ns/web"); obj == nil {
		t.Fatal("ns/web not in the cache")
	} else if _, ok := obj.(*service.Service); !ok {
		t.Fatalf("the cache holds a %T, want the proxy's processed Service", obj)
	}
	name := service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: corev1.ProtocolTCP}
	port := &service.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.50")}}
	u.Idled(name, port, map[string]uint32{serviceflows.GroupKey(name, service.IPv4, false): 7})
	u.HandlePacketIn(packetIn(7, 4, syn(40000, 1)))
	events := drain(h.Events)
	if len(events) != 1 || !strings.Contains(events[0], "NeedPods The service-port ns/web:http needs pods.") {
		t.Fatalf("events %q, want one NeedPods", events)
	}
}
