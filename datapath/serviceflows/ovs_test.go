package serviceflows

import (
	"fmt"

	"nodeflow/model/service"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// stubPipeline is the least of br0's other tables that a trace needs to
// reach and leave the service tables; the real flows belong to the node
// owner. ofport 1 is a pod, 2 the patch port.
var stubPipeline = []string{
	"table=0, priority=100,in_port=1 actions=set_field:0x1/0xf->reg0,goto_table:20",
	"table=0, priority=100,in_port=2 actions=set_field:0x3/0xf->reg0,goto_table:20",
	"table=20, priority=0 actions=goto_table:25",
	"table=25, priority=50,ip actions=ct(table=30,zone=65000,nat)",
	"table=25, priority=50,ipv6 actions=ct(table=30,zone=65000,nat)",
	"table=30, priority=0 actions=goto_table:40",
	"table=31, priority=0 actions=",
	"table=35, priority=0 actions=drop",
	"table=40, priority=200,ct_state=+new+trk,ct_mark=0x1/0xf,ip actions=ct(commit,table=50,zone=65001,nat(src=172.18.0.3))",
	"table=40, priority=200,ct_state=+new+trk,ct_mark=0x2/0xf,ip actions=ct(commit,table=50,zone=65001,nat(src=10.128.0.1))",
	"table=40, priority=0 actions=goto_table:50",
	"table=50, priority=0 actions=goto_table:60",
	"table=60, priority=100,ip,nw_dst=10.128.0.0/14 actions=output:1",
	"table=60, priority=100,ip,nw_dst=169.254.169.0/29 actions=output:2",
	"table=60, priority=100,ip,nw_dst=172.16.0.0/12 actions=output:2",
	"table=60, priority=100,ipv6,ipv6_dst=fd01::/48 actions=output:1",
	"table=60, priority=100,ipv6,ipv6_dst=fd69::/125 actions=output:2",
}

func writeLines(t *testing.T, name string, lines []string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// installPod adds out's br0 groups, then the stub pipeline flows and
// out's br0 flows, to the sandbox's br0 with ovs-ofctl.
func installPod(t *testing.T, sb *ovs.Sandbox, out Output, pipeline []string) {
	t.Helper()
	var flows, groups []string
	for _, f := range out.Pod.Flows {
		flows = append(flows, strings.TrimSpace(f.String()))
	}
	for _, g := range out.Pod.Groups {
		groups = append(groups, g.String())
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-groups", "br0", writeLines(t, "groups", groups)); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flows", "br0", writeLines(t, "flows", slices.Concat(pipeline, flows))); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every 20 ms until it holds or timeout passes, and
// reports whether it held.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // the polling interval
	}
	return true
}

// dumpLines runs an ovs-ofctl dump and returns its entry lines, trimmed.
func dumpLines(t *testing.T, sb *ovs.Sandbox, args ...string) []string {
	t.Helper()
	out, err := sb.Ofctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "OFPST_") || strings.HasPrefix(l, "NXST_") {
			continue
		}
		lines = append(lines, l)
	}
	slices.Sort(lines)
	return lines
}

// TestOVSAcceptsServiceState installs every golden case's output into a
// sandbox br0 and breth0 from its rendered text, checks that
// `ovs-ofctl -O OpenFlow15 dump-flows/dump-groups` shows exactly it, and
// traces new connections through the service tables within the
// recirculation budget.
func TestOVSAcceptsServiceState(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	for _, br := range []string{"br0", "breth0"} {
		if _, err := sb.Vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=dummy",
			"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
			"--", "add-port", br, br+"-p1", "--", "set", "interface", br+"-p1", "type=dummy", "ofport_request=1",
			"--", "add-port", br, br+"-p2", "--", "set", "interface", br+"-p2", "type=dummy", "ofport_request=2"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-meter", "br0", RejectMeter().String()); err != nil {
		t.Fatal(err)
	}

	alloc := plan.NewIDAllocator(plan.ServiceGroups)
	var flows, groups, gwFlows []string
	ids := map[string]uint32{}
	for _, tc := range goldenCases() {
		out, err := Build(testNode(), tc.in, alloc.Get)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range out.GroupIDs {
			ids[k] = v
		}
		for _, f := range out.Pod.Flows {
			flows = append(flows, strings.TrimSpace(f.String()))
		}
		for _, g := range out.Pod.Groups {
			groups = append(groups, g.String())
		}
		for _, f := range out.Gateway.Flows {
			gwFlows = append(gwFlows, strings.TrimSpace(f.String()))
		}
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-groups", "br0", writeLines(t, "groups", groups)); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flows", "br0", writeLines(t, "flows", slices.Concat(stubPipeline, flows))); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flows", "breth0", writeLines(t, "gw", gwFlows)); err != nil {
		t.Fatal(err)
	}

	// OVS shows exactly what was built: tables 30 and 35, the groups, and
	// breth0's flows, line for line.
	var gotFlows []string
	for _, table := range []string{"table=30", "table=35"} {
		for _, l := range dumpLines(t, sb, "-O", "OpenFlow15", "dump-flows", "--no-stats", "br0", table) {
			if !strings.Contains(l, "priority=0 ") {
				gotFlows = append(gotFlows, l)
			}
		}
	}
	slices.Sort(gotFlows)
	slices.Sort(flows)
	if !slices.Equal(gotFlows, flows) {
		t.Errorf("br0 flows differ:\n%s", lineDiff(flows, gotFlows))
	}
	gotGroups := dumpLines(t, sb, "-O", "OpenFlow15", "dump-groups", "br0")
	slices.Sort(groups)
	if !slices.Equal(gotGroups, groups) {
		t.Errorf("groups differ:\n%s", lineDiff(groups, gotGroups))
	}
	gotGw := dumpLines(t, sb, "-O", "OpenFlow15", "dump-flows", "--no-stats", "breth0")
	slices.Sort(gwFlows)
	if !slices.Equal(gotGw, gwFlows) {
		t.Errorf("breth0 flows differ:\n%s", lineDiff(gwFlows, gotGw))
	}

	traces := []struct {
		name, flow string
		want       []string // substrings of the trace
	}{
		{"pod to ClusterIP",
			"in_port=1,tcp,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,nw_src=10.128.0.5,nw_dst=10.96.0.10,tp_src=40000,tp_dst=80",
			[]string{"group:", "using bucket", "nat(dst="}},
		{"pod to IPv6 ClusterIP",
			"in_port=1,tcp6,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,ipv6_src=fd01::5,ipv6_dst=fd02::10,tp_src=40000,tp_dst=80",
			[]string{"group:", "nat(dst=["}},
		{"uplink NodePort from the patch port",
			"in_port=2,tcp,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,nw_src=192.0.2.99,nw_dst=172.18.0.3,tp_src=40000,tp_dst=30080",
			[]string{"group:", "nat(dst="}},
		{"UDP with affinity learns",
			"in_port=1,udp,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,nw_src=10.128.0.5,nw_dst=10.96.0.11,udp_src=40000,udp_dst=53",
			[]string{"resubmit(,31)", "resubmit(,30)", "nat(dst="}},
		{"SCTP without endpoints is rejected",
			"in_port=1,sctp,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,nw_src=10.128.0.5,nw_dst=10.96.0.12,sctp_src=40000,sctp_dst=9",
			[]string{"controller(", "meter_id=2"}},
		{"a pod's own connection to an externalTrafficPolicy=Local NodePort without a local endpoint takes the cluster-wide group",
			"in_port=1,tcp,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,nw_src=10.128.0.5,nw_dst=172.18.0.3,tp_dst=30081,tp_src=40000",
			[]string{"priority 300", "group:", "nat(dst=10.128.1.5:8080)"}},
		{"SCTP to a ClusterIP sets the endpoint's port before an address-only DNAT",
			"in_port=1,sctp,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,nw_src=10.128.0.5,nw_dst=10.96.0.15,sctp_src=40000,sctp_dst=9999",
			[]string{"group:", "->sctp_dst", "nat(dst="}},
	}
	recirc := regexp.MustCompile(`(?m)^\s*Resuming from table`)
	for _, tr := range traces {
		t.Run(tr.name, func(t *testing.T) {
			out, err := sb.Appctl("ofproto/trace", "br0", flowtest.NewConnTrace(tr.flow))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tr.want {
				if !strings.Contains(out, w) {
					t.Errorf("trace lacks %q:\n%s", w, out)
				}
			}
			// selection_method=hash picks a bucket by score in the slow
			// path; dp_hash would show a hash() datapath action and a
			// recirculation.
			if strings.Contains(out, "group:") && (!strings.Contains(out, "score") || strings.Contains(out, "hash(")) {
				t.Errorf("group did not select by hash fields:\n%s", out)
			}
			if strings.Contains(out, "Max recirculation depth") {
				t.Errorf("recirculation limit hit:\n%s", out)
			}
			if n := len(recirc.FindAllString(out, -1)); n > plan.MaxRecirculations {
				t.Errorf("%d recirculations, budget %d:\n%s", n, plan.MaxRecirculations, out)
			}
			if testing.Verbose() {
				t.Logf("%s", out)
			}
		})
	}
}

// TestOVSAffinityLearns sends a real UDP packet through the affinity
// service on the dummy datapath and checks that its bucket's learn action
// installed the binding in table 31 with the affinity timeout, and that a
// second packet from the same client is served by it.
func TestOVSAffinityLearns(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-port", "br0", "p1", "--", "set", "interface", "p1", "type=dummy", "ofport_request=1",
		"--", "add-port", "br0", "p2", "--", "set", "interface", "p2", "type=dummy", "ofport_request=2"); err != nil {
		t.Fatal(err)
	}
	var aff Input
	for _, tc := range goldenCases() {
		if strings.HasPrefix(tc.name, "aff_") {
			aff = tc.in
		}
	}
	out, err := Build(testNode(), aff, fixedIDs())
	if err != nil {
		t.Fatal(err)
	}
	installPod(t, sb, out, stubPipeline)
	pkt := "in_port(1),eth(src=0a:58:0a:80:00:05,dst=0a:58:0a:80:00:01),eth_type(0x0800)," +
		"ipv4(src=10.128.0.5,dst=10.96.0.11,proto=17,tos=0,ttl=64,frag=no),udp(src=40000,dst=53)"
	if _, err := sb.Appctl("netdev-dummy/receive", "p1", pkt); err != nil {
		t.Fatal(err)
	}
	var learned string
	waitFor(5*time.Second, func() bool {
		for _, f := range dumpLines(t, sb, "-O", "OpenFlow15", "dump-flows", "br0", "table=31") {
			if strings.Contains(f, "hard_timeout=30") {
				learned = f
			}
		}
		return learned != ""
	})
	if learned == "" {
		all, _ := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0")
		gs, _ := sb.Ofctl("-O", "OpenFlow15", "dump-group-stats", "br0")
		t.Fatalf("no learned affinity flow in table 31:\n%s\n%s", all, gs)
	}
	for _, w := range []string{"cookie=0xfe", "nw_src=10.128.0.5", "reg5=0xa", "actions=set_field:0xa800002->reg3", "set_field:0x10/0x10->reg0"} {
		if !strings.Contains(learned, w) {
			t.Errorf("learned flow lacks %q: %s", w, learned)
		}
	}
	// A new connection from the same client now takes the learned binding.
	tr, err := sb.Appctl("ofproto/trace", "br0", flowtest.NewConnTrace(
		"in_port=1,udp,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,nw_src=10.128.0.5,nw_dst=10.96.0.11,udp_src=40001,udp_dst=53"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr, "reg0=0x10/0x10") || strings.Contains(tr, "group:") {
		t.Errorf("second connection did not use the learned endpoint:\n%s", tr)
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got []string) string {
	var sb strings.Builder
	for _, l := range want {
		if !slices.Contains(got, l) {
			sb.WriteString("- " + l + "\n")
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			sb.WriteString("+ " + l + "\n")
		}
	}
	return sb.String()
}

// TestOVSStaleAffinity learns two bindings from real packets, removes one
// endpoint and checks that the delete StaleAffinity builds removes exactly
// the binding to it.
func TestOVSStaleAffinity(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-port", "br0", "p1", "--", "set", "interface", "p1", "type=dummy", "ofport_request=1"); err != nil {
		t.Fatal(err)
	}
	var aff Input
	for _, tc := range goldenCases() {
		if strings.HasPrefix(tc.name, "aff_") {
			aff = tc.in
		}
	}
	out, err := Build(testNode(), aff, fixedIDs())
	if err != nil {
		t.Fatal(err)
	}
	installPod(t, sb, out, stubPipeline)
	// Clients until both endpoints have a binding (the hash spreads them).
	bindings := func() []string {
		var out []string
		for _, l := range dumpLines(t, sb, "-O", "OpenFlow15", "dump-flows", "br0", "table=31") {
			if strings.Contains(l, "hard_timeout") {
				out = append(out, l)
			}
		}
		return out
	}
	epOf := func(l string) string {
		if strings.Contains(l, "0xa800002->reg3") {
			return "10.128.0.2"
		}
		return "10.128.1.5"
	}
	for i := 10; i < 60; i++ {
		pkt := fmt.Sprintf("in_port(1),eth(src=0a:58:0a:80:00:05,dst=0a:58:0a:80:00:01),eth_type(0x0800),"+
			"ipv4(src=10.128.3.%d,dst=10.96.0.11,proto=17,tos=0,ttl=64,frag=no),udp(src=40000,dst=53)", i)
		if _, err := sb.Appctl("netdev-dummy/receive", "p1", pkt); err != nil {
			t.Fatal(err)
		}
	}
	var learned []string
	eps := map[string]bool{}
	if !waitFor(5*time.Second, func() bool {
		learned = bindings()
		clear(eps)
		for _, l := range learned {
			eps[epOf(l)] = true
		}
		return len(learned) == 50 && len(eps) == 2
	}) {
		t.Fatalf("bindings: %d, to %v", len(learned), eps)
	}
	// 10.128.1.5 goes away.
	var current []service.Endpoint
	for _, e := range aff.Endpoints {
		if e.IP != a("10.128.1.5") {
			current = append(current, e)
		}
	}
	mods := StaleAffinity(testNode(), aff.Port, aff.Endpoints, current)
	if len(mods) != 1 {
		t.Fatalf("%d mods", len(mods))
	}
	m := mods[0]
	spec := fmt.Sprintf("table=%d,cookie=0x%x/-1", m.Table, m.Cookie)
	if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0", spec); err != nil {
		t.Fatal(err)
	}
	left := bindings()
	if len(left) == 0 || len(left) == len(learned) {
		t.Fatalf("%d of %d bindings left", len(left), len(learned))
	}
	for _, l := range left {
		if epOf(l) != "10.128.0.2" {
			t.Errorf("binding to the removed endpoint left: %s", l)
		}
	}
}
