package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

var nsSeq atomic.Int32

// netns creates a network namespace for the test and deletes it at the end.
func netns(t testing.TB, role string) string {
	t.Helper()
	name := fmt.Sprintf("nfrc-%s-%d-%d", role, os.Getpid(), nsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	return name
}

func inNetns(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s in %s: %v: %s", strings.Join(args, " "), ns, err, out)
	}
	return string(out)
}

// attachHost creates a namespace with a veth whose peer is port ofport of
// the sandbox's bridge, and gives it addr/24.
func attachHost(t testing.TB, sb *ovs.Sandbox, bridge, role, port string, ofport int, addr string) string {
	t.Helper()
	ns := netns(t, role)
	if _, err := sb.Exec("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec("ip", "link", "set", port, "up"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Vsctl("add-port", bridge, port, "--", "set", "interface", port, fmt.Sprintf("ofport_request=%d", ofport)); err != nil {
		t.Fatal(err)
	}
	inNetns(t, ns, "ip", "addr", "add", addr+"/24", "dev", "eth0")
	inNetns(t, ns, "ip", "link", "set", "eth0", "up")
	inNetns(t, ns, "ip", "link", "set", "lo", "up")
	return ns
}

// forwardState connects ports 1 and 2, with an optional register load in
// front so that two incarnations can want different actions.
func forwardState(mark bool) State {
	fwd := func(in, out uint32) openflow.Flow {
		var acts []openflow.Action
		if mark {
			acts = append(acts, plan.FromHost.Load())
		}
		acts = append(acts, openflow.OutputPort(out))
		return openflow.Flow{Table: 0, Priority: 100, Match: openflow.NewMatch(openflow.InPort(in)),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: acts}}}
	}
	return State{Flows: []openflow.Flow{fwd(1, 2), fwd(2, 1)}}
}

// fillerState is n flows in table 60 that no packet of the test meets.
func fillerState(first, n int, port uint32) State {
	var st State
	for i := first; i < first+n; i++ {
		st.Flows = append(st.Flows, openflow.Flow{Table: 60, Priority: 100,
			Match:        openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(ipN("10.50.0.0", i))),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(port)}}}})
	}
	return st
}

var nPacketsRE = regexp.MustCompile(`n_packets=(\d+)`)

// packets returns the n_packets of the flows ovs-ofctl selects with spec.
func packets(t testing.TB, sb *ovs.Sandbox, bridge, spec string) int {
	t.Helper()
	out, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", bridge, spec)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range nPacketsRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// TestAgentRestartZeroLoss holds a continuous stream of pings through a
// flow while the agent restarts, and the new incarnation's start-up
// reconcile rewrites that very flow, deletes stale flows and adds new ones
// in one bundle. Not one packet may be lost.
func TestAgentRestartZeroLoss(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	cli := attachHost(t, sb, "br0", "cli", "vc0", 1, "10.200.0.1")
	attachHost(t, sb, "br0", "srv", "vs0", 2, "10.200.0.2")

	s1 := NewStore(StoreOptions{})
	mustSet(t, s1, "node/forward", forwardState(false))
	mustSet(t, s1, "node/filler", fillerState(0, 3000, 9))
	run1 := start(t, addr, s1, Options{AuditInterval: -1})

	// Warm up: the first pings wait for ARP.
	waittest.Poll(t, "first ping", 20*time.Second, func() error {
		_, err := exec.Command("ip", "netns", "exec", cli, "ping", "-c", "1", "-W", "1", "10.200.0.2").CombinedOutput()
		return err
	})

	const count = 2500
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := exec.Command("ip", "netns", "exec", cli, "ping", "-q", "-i", "0.002", "-c", strconv.Itoa(count), "-W", "1", "10.200.0.2").CombinedOutput()
		done <- result{string(out), err}
	}()
	before := packets(t, sb, "br0", "in_port=1")
	waittest.Poll(t, "stream flowing", 10*time.Second, func() error {
		if n := packets(t, sb, "br0", "in_port=1"); n < before+200 {
			return fmt.Errorf("%d packets so far", n-before)
		}
		return nil
	})

	// Restart: the old agent goes away (its connection closes, OVS keeps the
	// flows), a new one starts with a changed desired state.
	restartAt := time.Now()
	run1.stop()
	s2 := NewStore(StoreOptions{})
	mustSet(t, s2, "node/forward", forwardState(true))
	mustSet(t, s2, "node/filler", fillerState(1000, 3000, 9))
	run2 := start(t, addr, s2, Options{AuditInterval: -1})
	took := time.Since(restartAt)
	if g := run2.r.Generation(); g != 2 {
		t.Errorf("second incarnation has generation %d, want 2", g)
	}
	if err := sameState(t, sb, "br0", s2, run2.r.Generation(), true); err != nil {
		t.Fatal(err)
	}
	mid := packets(t, sb, "br0", "in_port=1")
	waittest.Poll(t, "stream flowing after the restart", 10*time.Second, func() error {
		if n := packets(t, sb, "br0", "in_port=1"); n < mid+100 {
			return fmt.Errorf("%d packets since", n-mid)
		}
		return nil
	})

	var res result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("ping did not finish")
	}
	m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(res.out)
	if m == nil {
		t.Fatalf("ping output: %v\n%s", res.err, res.out)
	}
	sent, got := m[1], m[2]
	t.Logf("agent restart (stop, dial, read 3,002 flows, one bundle of +1000 -1000 ~2 flows) took %s; ping: %s sent, %s received", took.Round(time.Millisecond), sent, got)
	if sent != got || sent != strconv.Itoa(count) {
		t.Fatalf("lost packets across the restart: %s sent, %s received\n%s", sent, got, res.out)
	}
}

// TestSwitchRestartReplays kills ovs-vswitchd and starts it again: the
// bridge comes back from the database without flows, groups or meters, and
// the reconciler replays the whole state. It logs the time from
// ovs-vswitchd answering again to the state being back.
func TestSwitchRestartReplays(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	mustSet(t, s, "pipeline", pipelineState())
	mustSet(t, s, "unidle/meters", meterState())
	for i := 0; i < 200; i++ {
		var eps []netip.Addr
		for k := 0; k < 10; k++ {
			eps = append(eps, ipN("10.128.0.0", i*10+k))
		}
		mustSet(t, s, fmt.Sprintf("service/ns/s%d:80/TCP", i), serviceState(uint32(i+1), ipN("10.96.0.0", i), 80, eps, 8080, false))
	}
	run := start(t, addr, s, Options{AuditInterval: -1})
	gen := run.r.Generation()
	if err := sameState(t, sb, "br0", s, gen, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.RestartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waittest.Poll(t, "state replayed", 30*time.Second, func() error { return sameState(t, sb, "br0", s, gen, false) })
	t.Logf("ovs-vswitchd restart: %d flows and 200 groups back %s after it answered", func() int { f, _, _ := s.Counts(); return f }(), time.Since(back).Round(time.Millisecond))
	meters, err := sb.Ofctl("-O", "OpenFlow15", "dump-meters", "br0")
	if err != nil || !strings.Contains(meters, fmt.Sprintf("meter=%d", plan.MeterReject)) {
		t.Fatalf("meter not replayed: %v\n%s", err, meters)
	}
	if run.r.Generation() != gen {
		t.Errorf("a switch restart changed the generation from %d to %d", gen, run.r.Generation())
	}
}

// TestDriftRepair changes the switch behind the reconciler's back in each
// way the issue lists, and checks that the reconciler puts it back, through
// the flow monitor alone (the periodic audit is off). It logs how long each
// repair took, from the start of the ovs-ofctl command to the commit of
// the repairing bundle.
func TestDriftRepair(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := driftState(t)
	repairs := make(chan SyncReport, 16)
	run := start(t, addr, s, Options{AuditInterval: -1, OnSync: func(rep SyncReport) {
		if rep.Stats.Total() > 0 {
			repairs <- rep
		}
	}})
	gen := run.r.Generation()
	if err := sameState(t, sb, "br0", s, gen, false); err != nil {
		t.Fatal(err)
	}
	<-repairs // the start-up sync
	tests := []struct {
		name string
		args []string
		want func(DiffStats) bool
	}{
		{"del-flows", []string{"-O", "OpenFlow13", "del-flows", "br0"}, func(d DiffStats) bool { return d.FlowAdds > 60 }},
		{"mod-flows", []string{"-O", "OpenFlow13", "mod-flows", "br0", "table=30,actions=drop"}, func(d DiffStats) bool { return d.FlowModifies == 21 }}, // 20 services and the miss
		{"del-groups", []string{"-O", "OpenFlow15", "del-groups", "br0"}, func(d DiffStats) bool { return d.GroupAdds == 20 && d.FlowAdds == 20 }},
		{"foreign flow", []string{"-O", "OpenFlow13", "add-flow", "br0", "table=0,priority=1000,ip,actions=drop"}, func(d DiffStats) bool { return d.FlowDeletes == 1 }},
		{"foreign flow with our cookie feature", []string{"-O", "OpenFlow13", "add-flow", "br0", "cookie=0x0600000000000000,table=35,priority=7,actions=drop"}, func(d DiffStats) bool { return d.FlowDeletes == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := time.Now()
			if _, err := sb.Ofctl(tt.args...); err != nil {
				t.Fatal(err)
			}
			var got DiffStats
			for !tt.want(got) {
				select {
				case rep := <-repairs:
					if rep.Err != nil {
						t.Fatal(rep.Err)
					}
					got.add(rep.Stats)
					if tt.want(got) {
						t.Logf("%s repaired in %s (%s, %s sync)", tt.name, rep.Start.Add(rep.Duration).Sub(changed).Round(100*time.Microsecond), got, rep.Kind)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("no repair within 20 s; so far %s", got)
				}
			}
			waittest.Poll(t, "state back", 10*time.Second, func() error { return sameState(t, sb, "br0", s, gen, false) })
		})
	}
}

// TestAuditRepairsGroups changes a group, which the flow monitor cannot
// see: the periodic audit puts it back.
func TestAuditRepairsGroups(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := driftState(t)
	run := start(t, addr, s, Options{AuditInterval: 200 * time.Millisecond})
	gen := run.r.Generation()
	if _, err := sb.Ofctl("-O", "OpenFlow15", "mod-group", "br0", "group_id=1,type=select,bucket=bucket_id:0,actions=drop"); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	waittest.Poll(t, "group repaired", 20*time.Second, func() error { return sameState(t, sb, "br0", s, gen, false) })
	t.Logf("mod-group repaired by the audit within %s", time.Since(changed).Round(time.Millisecond))
}

func driftState(t *testing.T) *Store {
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	mustSet(t, s, "pipeline", pipelineState())
	mustSet(t, s, "pod/default/a", podState(3, mac(2), netip.MustParseAddr("10.128.0.2"), 7))
	for i := 0; i < 20; i++ {
		mustSet(t, s, fmt.Sprintf("service/ns/s%d:80/TCP", i), serviceState(uint32(i+1), ipN("10.96.0.0", i), 80,
			[]netip.Addr{ipN("10.128.1.0", i), ipN("10.128.2.0", i)}, 8080, false))
	}
	return s
}
