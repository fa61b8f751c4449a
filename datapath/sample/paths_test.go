package sample

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
)

// probe drives one connection of the traffic matrix through the sandbox:
// its first packet takes plan path first, the answer takes reply, and the
// client's next packet takes established. Every path of plan.Paths is taken
// by exactly one probe; a path added to the plan (the egress firewall's,
// NetworkPolicy's) needs a probe here.
type probe struct {
	first, reply, established string // plan path names; reply and established may be empty
	// in is the interface the client sends by (a pod's port, eth0 for the
	// outside and the other node, breth0 for the host).
	in  string
	seg func(c *Config) segment
	// out is the interface the server receives on, want the addresses it
	// sees (src may be invalid: not checked).
	out           string
	wantSrc       netip.Addr
	wantDst       netip.AddrPort
	wantTunnelled bool
	// replyTunnelled says the reply leaves by in inside VXLAN, to the
	// tunnel endpoint the first packet came from.
	replyTunnelled bool
}

// Endpoints of the sample's addresses, as probes address them.
var (
	remotePod  = netip.MustParseAddr("10.128.1.5")
	toLocal    = netip.MustParseAddrPort("10.96.0.11:80")
	toRemote   = netip.MustParseAddrPort("10.96.0.12:80")
	toHost     = netip.MustParseAddrPort("10.96.0.13:80")
	toOther    = netip.MustParseAddrPort("10.96.0.14:80")
	toSecond   = netip.MustParseAddrPort("10.96.0.15:443")
	toOutside  = netip.MustParseAddrPort("10.96.0.21:80")
	localEP    = netip.MustParseAddrPort("10.128.0.5:8080")
	remoteEP   = netip.MustParseAddrPort("10.128.1.5:8080")
	hostEP     = netip.MustParseAddrPort("172.18.0.3:8081")
	otherEP    = netip.MustParseAddrPort("172.18.0.4:8082")
	secondEP   = netip.MustParseAddrPort("172.20.0.2:4443")
	outsideSrv = netip.MustParseAddrPort("192.0.2.50:80")
)

// fromPod is a pod's first segment to dst, from client port sport.
func fromPod(name string, sport uint16, dst netip.AddrPort) func(c *Config) segment {
	return fromPodIn(Namespace, name, sport, dst)
}

// fromPodIn is fromPod for a pod of namespace ns.
func fromPodIn(ns, name string, sport uint16, dst netip.AddrPort) func(c *Config) segment {
	return func(c *Config) segment {
		p, _ := c.Pod(ns, name)
		return segment{srcMAC: p.MAC, dstMAC: c.RouterMAC(), src: netip.AddrPortFrom(p.IPs[0], sport), dst: dst, syn: true}
	}
}

// fromHost is the host's first segment to a service: the kernel routes the
// service network via the masquerade next hop, from the host masquerade
// address.
func fromHost(sport uint16, dst netip.AddrPort) func(c *Config) segment {
	return func(c *Config) segment {
		m := c.Masquerade.V4
		return segment{srcMAC: c.Local.MAC, dstMAC: conntrack.MAC(m.NextHop), src: netip.AddrPortFrom(m.Host, sport), dst: dst, syn: true}
	}
}

// fromOutside is an outside client's first segment to this node's port.
func fromOutside(sport uint16, port uint16) func(c *Config) segment {
	return func(c *Config) segment {
		return segment{srcMAC: DefaultGatewayMAC, dstMAC: c.Local.MAC, src: netip.AddrPortFrom(OutsideClient, sport),
			dst: netip.AddrPortFrom(c.Local.IPs[0], port), syn: true}
	}
}

// fromRemoteHost is the other node's host's first segment to dst, in VXLAN
// as the other node sends a service connection of its host: SNATed to its
// node IP, VNI 0.
func fromRemoteHost(sport uint16, dst netip.AddrPort) func(c *Config) segment {
	return func(c *Config) segment {
		return segment{srcMAC: conntrack.MAC(plan.RouterIP(c.Remote.PodCIDRs[0])), dstMAC: c.RouterMAC(),
			src: netip.AddrPortFrom(c.Remote.IPs[0], sport), dst: dst, syn: true,
			tunnel: &underlay{srcMAC: c.Remote.MAC, dstMAC: c.Local.MAC, src: c.Remote.IPs[0], dst: c.Local.IPs[0]}}
	}
}

// fromRemotePod is the other node's pod's first segment to dst, in VXLAN
// as the other node sends it.
func fromRemotePod(sport uint16, dst netip.AddrPort) func(c *Config) segment {
	return func(c *Config) segment {
		return segment{srcMAC: conntrack.MAC(plan.RouterIP(c.Remote.PodCIDRs[0])), dstMAC: c.RouterMAC(),
			src: netip.AddrPortFrom(remotePod, sport), dst: dst, syn: true,
			tunnel: &underlay{srcMAC: c.Remote.MAC, dstMAC: c.Local.MAC, src: c.Remote.IPs[0], dst: c.Local.IPs[0], vni: c.Pods[0].NamespaceID}}
	}
}

var (
	gatewayIP = netip.MustParseAddr("10.128.0.1") // the router address: SNAT for hairpin and remote endpoints
	nodeIP    = netip.MustParseAddr("172.18.0.3")
)

// probes cover plan.Paths.
var probes = []probe{
	{first: "pod -> pod, same node", in: "b", seg: fromPod("b", 40001, localEP), out: "a", wantDst: localEP},
	{first: "pod -> pod, other node (sending node)", in: "b", seg: fromPod("b", 40002, remoteEP), out: uplinkName, wantDst: remoteEP, wantTunnelled: true},
	{first: "pod -> pod, other node (receiving node)", in: uplinkName, seg: fromRemotePod(40003, localEP), out: "a", wantDst: localEP},
	{first: "pod -> host by mp0's address", reply: "pod -> host by mp0's address (reply)",
		in: "b", seg: fromPod("b", 40018, netip.MustParseAddrPort("10.128.0.2:22")), out: mgmtName, wantDst: netip.MustParseAddrPort("10.128.0.2:22")},
	{first: "pod -> host by the node IP", reply: "pod -> host by the node IP (reply)",
		in: "b", seg: fromPod("b", 40019, netip.MustParseAddrPort("172.18.0.3:22")), out: mgmtName, wantDst: netip.MustParseAddrPort("172.18.0.3:22")},
	{first: "pod -> ClusterIP -> local pod", reply: "pod -> ClusterIP -> local pod (reply)",
		in: "b", seg: fromPod("b", 40004, toLocal), out: "a", wantSrc: netip.MustParseAddr("10.128.0.6"), wantDst: localEP},
	{first: "pod -> ClusterIP -> remote pod", reply: "pod -> ClusterIP -> remote pod (reply)",
		in: "b", seg: fromPod("b", 40005, toRemote), out: uplinkName, wantDst: remoteEP, wantTunnelled: true},
	{first: "pod -> ClusterIP -> itself (hairpin)", reply: "pod -> ClusterIP -> itself (hairpin reply)",
		in: "a", seg: fromPod("a", 40006, toLocal), out: "a", wantSrc: gatewayIP, wantDst: localEP},
	{first: "pod -> ClusterIP -> host endpoint, this node", reply: "pod -> ClusterIP -> host endpoint, this node (reply)",
		in: "b", seg: fromPod("b", 40007, toHost), out: gatewayBridge, wantSrc: netip.MustParseAddr("169.254.169.1"), wantDst: hostEP},
	{first: "pod -> ClusterIP -> host endpoint, other node", reply: "pod -> ClusterIP -> host endpoint, other node (reply)",
		in: "b", seg: fromPod("b", 40008, toOther), out: uplinkName, wantSrc: nodeIP, wantDst: otherEP},
	{first: "pod -> outside", reply: "pod -> outside (reply)",
		in: "b", seg: fromPod("b", 40009, outsideSrv), out: uplinkName, wantSrc: nodeIP, wantDst: outsideSrv},
	{first: "pod -> outside, judged by an egress firewall", in: "c", seg: fromPodIn(FencedNamespace, "c", 40020, outsideSrv),
		out: uplinkName, wantSrc: nodeIP, wantDst: outsideSrv},
	{first: "pod -> ClusterIP -> outside endpoint, judged by an egress firewall", in: "c", seg: fromPodIn(FencedNamespace, "c", 40021, toOutside),
		out: uplinkName, wantSrc: nodeIP, wantDst: outsideSrv},
	{first: "host -> ClusterIP -> local pod", reply: "host -> ClusterIP -> local pod (reply)",
		in: gatewayBridge, seg: fromHost(40010, toLocal), out: "a", wantSrc: netip.MustParseAddr("169.254.169.2"), wantDst: localEP},
	{first: "host -> ClusterIP -> remote pod", reply: "host -> ClusterIP -> remote pod (reply)",
		in: gatewayBridge, seg: fromHost(40011, toRemote), out: uplinkName, wantSrc: nodeIP, wantDst: remoteEP, wantTunnelled: true},
	{first: "host -> ClusterIP -> remote pod (receiving node)", reply: "host -> ClusterIP -> remote pod (receiving node, reply)",
		in: uplinkName, seg: fromRemoteHost(40022, localEP), out: "a", wantSrc: netip.MustParseAddr("172.18.0.4"), wantDst: localEP, replyTunnelled: true},
	{first: "host -> ClusterIP -> host endpoint, this node (the longest)", reply: "host -> ClusterIP -> host endpoint, this node (reply)",
		established: "host -> ClusterIP -> host endpoint, this node (established)",
		in:          gatewayBridge, seg: fromHost(40012, toHost), out: gatewayBridge, wantSrc: netip.MustParseAddr("169.254.169.1"), wantDst: hostEP},
	{first: "host -> ClusterIP -> secondary IP of this node", reply: "host -> ClusterIP -> secondary IP of this node (reply)",
		in: gatewayBridge, seg: fromHost(40013, toSecond), out: gatewayBridge, wantSrc: netip.MustParseAddr("169.254.169.1"), wantDst: secondEP},
	{first: "host -> ClusterIP -> host endpoint, other node", reply: "host -> ClusterIP -> host endpoint, other node (reply)",
		in: gatewayBridge, seg: fromHost(40014, toOther), out: uplinkName, wantSrc: nodeIP, wantDst: otherEP},
	{first: "outside -> NodePort -> local pod", reply: "outside -> NodePort -> local pod (reply)",
		in: uplinkName, seg: fromOutside(40015, 30011), out: "a", wantSrc: OutsideClient, wantDst: localEP},
	{first: "outside -> NodePort -> remote pod", reply: "outside -> NodePort -> remote pod (reply)",
		in: uplinkName, seg: fromOutside(40016, 30012), out: uplinkName, wantSrc: gatewayIP, wantDst: remoteEP, wantTunnelled: true},
	{first: "outside -> NodePort -> host endpoint, this node", reply: "outside -> NodePort -> host endpoint, this node (reply)",
		in: uplinkName, seg: fromOutside(40017, 30013), out: gatewayBridge, wantSrc: netip.MustParseAddr("169.254.169.1"), wantDst: hostEP},
}

// TestProbesCoverPaths: every modelled path has exactly one probe, and
// every probe names a modelled path.
func TestProbesCoverPaths(t *testing.T) {
	modelled := map[string]bool{}
	for _, p := range plan.Paths() {
		modelled[p.Name] = true
	}
	probed := map[string]int{}
	for _, pr := range probes {
		for _, n := range []string{pr.first, pr.reply, pr.established} {
			if n == "" {
				continue
			}
			probed[n]++
			if !modelled[n] {
				t.Errorf("a probe takes %q, which plan.Paths does not model", n)
			}
		}
	}
	for n := range modelled {
		if probed[n] != 1 {
			t.Errorf("path %q is taken by %d probes, want 1 (add one to probes)", n, probed[n])
		}
	}
}

// TestRecirculationBudget drives every modelled path with real packets
// through the sample installed in a sandboxed ovs-vswitchd (see
// datapath_test.go for how a packet is traced), and checks, per path:
//   - the packet arrives where it should, with the addresses it should have;
//   - its recirculations, counted by the datapath, do not exceed
//     plan.MaxRecirculations and equal the model's count;
//   - the OpenFlow tables it visited, and which of those visits
//     recirculated, are exactly the model's steps (in any order).
//
// So the model in datapath/plan, and docs/pipeline.md generated from it,
// cannot say anything the flows do not do.
func TestRecirculationBudget(t *testing.T) {
	r := newRig(t)
	paths := map[string]plan.Path{}
	for _, p := range plan.Paths() {
		paths[p.Name] = p
	}
	for _, pr := range probes {
		t.Run(pr.first, func(t *testing.T) {
			r.t = t
			orig := pr.seg(&r.cfg)
			seen := r.check(pr.first, paths[pr.first], pr.in, orig, pr.out)
			if seen == nil {
				return
			}
			if pr.wantDst != seen.dst || pr.wantSrc.IsValid() && pr.wantSrc != seen.src.Addr() || pr.wantTunnelled != (seen.tunnel != nil) {
				t.Errorf("%s received %s; want destination %s, source %v, tunnelled %v", pr.out, seen, pr.wantDst, pr.wantSrc, pr.wantTunnelled)
			}
			if pr.reply == "" {
				return
			}
			answer := r.check(pr.reply, paths[pr.reply], pr.out, seen.reply(), pr.in)
			if answer == nil {
				return
			}
			if answer.src != orig.dst || answer.dst != orig.src {
				t.Errorf("the reply reached %s as %s, want it from %s to %s", pr.in, answer, orig.dst, orig.src)
			}
			if (answer.tunnel != nil) != pr.replyTunnelled || pr.replyTunnelled && (answer.tunnel.dst != orig.tunnel.src || answer.tunnel.src != orig.tunnel.dst) {
				t.Errorf("the reply reached %s as %s; want it tunnelled %v, back to the first packet's tunnel endpoint", pr.in, answer, pr.replyTunnelled)
			}
			if pr.established == "" {
				return
			}
			next := orig
			next.syn, next.ack = false, true
			again := r.check(pr.established, paths[pr.established], pr.in, next, pr.out)
			if again != nil && (again.src != seen.src || again.dst != seen.dst) {
				t.Errorf("the established packet reached %s as %s, want %s -> %s like the first", pr.out, again, seen.src, seen.dst)
			}
		})
	}
}

// check sends seg by interface in, checks what it did against path, and
// returns the segment that left by out, or nil when it did not.
func (r *rig) check(name string, path plan.Path, in string, seg segment, out string) *segment {
	t := r.t
	t.Helper()
	tr, err := r.send(in, seg)
	detail := func() string {
		return "model:\n" + plan.RenderPath(path) + tr.String()
	}
	if err != nil {
		t.Errorf("%s: %v\n%s", name, err, detail())
		return nil
	}
	if n := tr.recirculations(); n > plan.MaxRecirculations {
		t.Errorf("%s: %d recirculations, the datapath allows %d\n%s", name, n, plan.MaxRecirculations, detail())
	} else if n != path.Recirculations() {
		t.Errorf("%s: %d recirculations in the datapath, the model says %d\n%s", name, n, path.Recirculations(), detail())
	}
	derived := 0
	for _, h := range tr.hits {
		if h.recirc {
			derived++
		}
	}
	if derived != tr.recirculations() {
		t.Errorf("%s: the flows visited recirculate %d times, the datapath recirculated %d times\n%s", name, derived, tr.recirculations(), detail())
	}
	model := visits(path.Steps, func(s plan.Step) visit { return visit{s.Bridge, s.Table, s.Recirc} })
	trace := visits(tr.hits, func(h hit) visit { return visit{h.bridge, h.table, h.recirc} })
	if d := visitDiff(model, trace); d != "" {
		t.Errorf("%s: the model's steps differ from the tables visited: %s\n%s", name, d, detail())
	}
	var got []string
	for n := range tr.sent {
		got = append(got, n)
	}
	slices.Sort(got)
	if len(got) != 1 || got[0] != out || len(tr.sent[out]) != 1 {
		t.Errorf("%s: %s sent by %s; want it received once on %s\n%s", name, seg, strings.Join(got, ", "), out, detail())
		return nil
	}
	s, parsed := parseSegment(tr.sent[out][0])
	if !parsed {
		t.Errorf("%s: %s sent something that is not a TCP segment", name, out)
		return nil
	}
	return &s
}

// TestRecirculationLimitIsCaught checks the checker at the limit: on the
// sample's br0, a pod's packet sent through a chain of 6 ct(table=N)
// actions is counted as 6 recirculations and arrives, and one sent
// through 7 is reported as dropped for exceeding the limit.
func TestRecirculationLimitIsCaught(t *testing.T) {
	r := newRig(t)
	r.stopReconcilers()
	b, _ := r.cfg.Pod(Namespace, "b")
	a, _ := r.cfg.Pod(Namespace, "a")
	chainFlows := func(dport uint16, first, n int) []string {
		fs := []string{fmt.Sprintf("table=0,priority=1000,tcp,in_port=%d,tp_dst=%d,actions=ct(table=%d,zone=%d)", b.Port, dport, first, first)}
		for k := first; k < first+n-1; k++ {
			fs = append(fs, fmt.Sprintf("table=%d,priority=1,tcp,actions=ct(table=%d,zone=%d)", k, k+1, k+1))
		}
		return append(fs, fmt.Sprintf("table=%d,priority=1,tcp,actions=output:%d", first+n-1, a.Port))
	}
	for _, f := range append(chainFlows(6, 200, 6), chainFlows(7, 210, 7)...) {
		if _, err := r.sb.Ofctl("-O", "OpenFlow15", "add-flow", podBridge, f); err != nil {
			t.Fatal(err)
		}
	}
	seg := fromPod("b", 41000, netip.AddrPortFrom(a.IPs[0], 6))(&r.cfg)
	tr, err := r.send("b", seg)
	if err != nil || tr.recirculations() != plan.MaxRecirculations || len(tr.sent["a"]) != 1 {
		t.Errorf("6 chained ct: error %v, %d recirculations, %d frames to a; want no error, %d, 1\n%s",
			err, tr.recirculations(), len(tr.sent["a"]), plan.MaxRecirculations, tr)
	}
	seg = fromPod("b", 41001, netip.AddrPortFrom(a.IPs[0], 7))(&r.cfg)
	tr, err = r.send("b", seg)
	if !errors.Is(err, errOverLimit) || len(tr.sent) != 0 {
		t.Errorf("7 chained ct: error %v, frames sent %d; want %v and none\n%s", err, len(tr.sent), errOverLimit, tr)
	}
}
