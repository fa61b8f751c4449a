package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"nodeflow/testbed"
)

// replaceAgent stops the agent of node m and starts another in its place,
// as the testbed starts it (its resolver configuration included; env adds
// to its environment), that keeps running after the test like the one it
// replaced: the testbed's state records its pid for later tests, and it is
// stopped before the testbed goes down (keepRunning).
func replaceAgent(t testing.TB, e *env, m *testbed.Member, env ...string) {
	t.Helper()
	stopAgentProcess(t, e, m.Name)
	logf, err := os.OpenFile(filepath.Join(m.Dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "---- %s: replaced by the e2e test %s\n", time.Now().Format(time.RFC3339), t.Name())
	cmd := agentCommand(e, m, logf)
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	keepRunning(cmd, func() { logf.Close() })
	for i := range e.state.Processes {
		if e.state.Processes[i].Name == "agent "+m.Name {
			e.state.Processes[i].PID = cmd.Process.Pid
		}
	}
}

// TestEgressFirewallAgentRestart restarts node1's agent with policies in
// place, one of them allowing a wildcard dnsName whose address a pod
// learned before the restart, under continuous traffic: not a connection
// through an allow rule fails, not one through the deny-all gets through.
// The address learned before the restart is kept (read back from the
// switch), though the restarted agent never looks wildcards up.
func TestEgressFirewallAgentRestart(t *testing.T) {
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	server4 := netip.MustParseAddr(g.e.state.DNSServers[0])
	learned, cidr, denied := ext(false, 40), ext(false, 1), ext(false, 41)
	g.applyFirewall(t, rules("Allow "+server4.String()+"/32 UDP/53", "Allow dns:*.ok.egfw.test", "Allow 198.18.0.1/32", "Deny 0.0.0.0/0"))
	if err := g.dns.Set("restart.ok.egfw.test", 3600, learned); err != nil {
		t.Fatal(err)
	}
	for _, p := range g.pods {
		// The path out is warm first (its next hop resolved), so that a
		// lost query is the firewall's doing.
		verdict(t, p, "tcp", cidr, true)
		got, err := resolve(p.netns, server4, "restart.ok.egfw.test", dns.TypeA)
		if err != nil || !slices.Equal(got, []netip.Addr{learned}) {
			t.Fatalf("%s: resolve: %v %v", p.node, got, err)
		}
		verdict(t, p, "tcp", learned, true)
		verdict(t, p, "tcp", denied, false)
	}

	load := newBackground()
	var allowed, denials tally
	for _, p := range g.pods {
		for _, dst := range []netip.Addr{learned, cidr} {
			load.loop(&allowed, 20*time.Millisecond, func() error {
				if _, err := extReach(p.netns, "tcp", dst, 2*time.Second); err != nil {
					return fmt.Errorf("%s to %s: %v", p.node, dst, err)
				}
				return nil
			})
		}
		load.loop(&denials, 0, func() error {
			_, err := extReach(p.netns, "tcp", denied, 300*time.Millisecond)
			return deniedErr(p.node+" to "+denied.String(), err)
		})
	}
	time.Sleep(500 * time.Millisecond) // traffic before the restart, by design of the scenario
	m := member(t, g.e, "node1")
	start := time.Now()
	replaceAgent(t, g.e, m)
	eventually(t, 60*time.Second, "restarted agent ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	t.Logf("agent restart: stopped and ready again in %s", time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // traffic after the restart, by design of the scenario
	load.end()
	if allowed.fail.Load() != 0 || allowed.ok.Load() == 0 {
		t.Errorf("through the allow rules across the restart: %s", &allowed)
	}
	if denials.fail.Load() != 0 || denials.tries() == 0 {
		t.Errorf("through the deny-all across the restart: %d of %d got through", denials.fail.Load(), denials.tries())
	}
	t.Logf("across the restart: %d connections through the allow rules, %d failed; %d denied attempts, %d through", allowed.ok.Load(), allowed.fail.Load(), denials.tries(), denials.fail.Load())
	lines, err := table50(m)
	if err != nil {
		t.Fatal(err)
	}
	if !hasFlow(lines, "priority=10998,", "nw_dst="+learned.String(), "goto_table:55") {
		t.Errorf("the learned address is gone from node1's table 50 after the restart")
	}
}
