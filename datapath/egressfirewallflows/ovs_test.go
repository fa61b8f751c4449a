package egressfirewallflows

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"nodeflow/internal/testutil/flowtest"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// stubPipeline is the least of br0 that a trace needs around table 50: a
// classifier that gives each pod port its namespace (ofports 1, 3, 4 and
// 6 are pods of namespaces a, b, c and d; 5 is vxlan0 carrying namespace
// a), the node's cluster bypass, the table's miss, and a routing table
// that outputs everything to ofport 2.
var stubPipeline = []string{
	"table=0, priority=100,in_port=1 actions=set_field:0x1/0xf->reg0,set_field:0x123/0xffffff->reg1,goto_table:50",
	"table=0, priority=100,in_port=3 actions=set_field:0x1/0xf->reg0,set_field:0x456/0xffffff->reg1,goto_table:50",
	"table=0, priority=100,in_port=4 actions=set_field:0x1/0xf->reg0,set_field:0x789/0xffffff->reg1,goto_table:50",
	"table=0, priority=100,in_port=6 actions=set_field:0x1/0xf->reg0,set_field:0xabc/0xffffff->reg1,goto_table:50",
	"table=0, priority=100,in_port=5 actions=set_field:0x2/0xf->reg0,set_field:0x123/0xffffff->reg1,goto_table:50",
	"table=50, priority=20000,ip,nw_dst=10.244.0.0/16 actions=goto_table:60",
	"table=50, priority=0 actions=goto_table:60",
	"table=55, priority=0 actions=goto_table:60",
	"table=60, priority=0 actions=output:2",
}

// TestOVSVerdicts installs the guards and the golden namespaces' rules in
// a sandboxed br0 over nodeflow's own OpenFlow connection (ovs-ofctl must
// print exactly what was built), then traces packets from each
// namespace's pod and checks the verdict and the priority of the flow
// that gave it: first match wins, no match allows, ports through
// conjunctions, IPv4 and IPv6, the host alias, and the guards.
func TestOVSVerdicts(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	ovstest.AddDummyBridge(t, sb, "br0", 1, 2, 3, 4, 5, 6)
	fs := GuardFlows()
	for _, tc := range goldenCases() {
		built, err := Build(testConfig(), tc.ns)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, built...)
	}
	flowtest.InstallAndCompare(t, sb, "br0", fs)
	stub := filepath.Join(t.TempDir(), "stub")
	if err := os.WriteFile(stub, []byte(strings.Join(stubPipeline, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flows", "br0", stub); err != nil {
		t.Fatal(err)
	}

	const (
		allow = true
		deny  = false
	)
	// Each packet: the pod's port, the rest of the flow, the verdict, and
	// the priority of the table-50 flow that decides it.
	ports := func(proto string, dport int) string {
		l4 := strings.TrimSuffix(proto, "6")
		if l4 == "tcp" {
			l4 = "tp"
		}
		return fmt.Sprintf("%s_src=40000,%s_dst=%d", l4, l4, dport)
	}
	v4 := func(port int, proto, dst string, dport int) string {
		return fmt.Sprintf("in_port=%d,%s,dl_src=0a:58:0a:f4:00:05,dl_dst=0a:58:0a:f4:00:01,nw_src=10.244.0.5,nw_dst=%s,%s", port, proto, dst, ports(proto, dport))
	}
	v6 := func(port int, proto, dst string, dport int) string {
		return fmt.Sprintf("in_port=%d,%s,dl_src=0a:58:0a:f4:00:05,dl_dst=0a:58:0a:f4:00:01,ipv6_src=fd00:10:244::5,ipv6_dst=%s,%s", port, proto, dst, ports(proto, dport))
	}
	for _, tc := range []struct {
		name     string
		flow     string
		allowed  bool
		priority int
	}{
		// Namespace a: an allowlist, then deny all.
		{"a: allowed CIDR", v4(1, "tcp", "192.0.2.9", 80), allow, 10999},
		{"a: a DNS name's address", v4(1, "udp", "198.51.100.2", 53), allow, 10997},
		{"a: anything else is denied", v4(1, "tcp", "8.8.8.8", 53), deny, 10996},
		{"a: IPv6 CIDR with its port", v6(1, "tcp6", "2001:db8::1", 443), allow, 10998},
		{"a: IPv6 CIDR on another port falls to deny all", v6(1, "tcp6", "2001:db8::1", 80), deny, 10995},
		{"a: the node IP through its alias is denied by deny all", v4(1, "tcp", "169.254.169.2", 6443), deny, 30997},
		{"a: pod to pod is never judged", v4(1, "udp", "10.244.1.5", 53), allow, 20000},
		{"a: a reply is never judged", v4(1, "tcp", "8.8.8.8", 53) + ",ct_state=trk|est|rpl", allow, 40000},
		{"a: the tunnel's packets are never judged", v4(5, "tcp", "8.8.8.8", 53), allow, 40000},
		// Namespace b: ports through a conjunction.
		{"b: conjunction, TCP 443", v4(3, "tcp", "203.0.113.2", 443), allow, 10999},
		{"b: conjunction, UDP 53", v4(3, "udp", "203.0.113.3", 53), allow, 10999},
		{"b: conjunction, SCTP any port", v4(3, "sctp", "203.0.113.1", 9), allow, 10999},
		{"b: conjunction, IPv6", v6(3, "tcp6", "2001:db8::5", 80), allow, 10999},
		{"b: half of a conjunctive match falls to the next rule", v4(3, "tcp", "203.0.113.2", 22), deny, 10998},
		{"b: a whole protocol in a /24", v4(3, "udp", "203.0.113.9", 5353), deny, 10998},
		{"b: no rule matches: allowed by the miss", v4(3, "tcp", "203.0.113.200", 443), allow, 0},
		{"b: IPv6 on a port of no rule: allowed by the miss", v6(3, "tcp6", "2001:db8::5", 22), allow, 0},
		{"b: crossed prefixes and ports", v4(3, "tcp", "198.51.100.7", 2), deny, 10996},
		{"b: the prefix a /24 holds is gone", v4(3, "tcp", "198.51.100.9", 1), deny, 10996},
		// Namespace c: the node IP, directly and through its alias.
		{"c: node IP allowed on 6443", v4(4, "tcp", "172.30.0.11", 6443), allow, 10999},
		{"c: its alias allowed on 6443", v4(4, "tcp", "169.254.169.2", 6443), allow, 31000},
		{"c: IPv6 alias allowed on 6443", v6(4, "tcp6", "fd69::2", 6443), allow, 31000},
		{"c: the alias on another port is denied by deny all", v4(4, "tcp", "169.254.169.2", 80), deny, 30998},
		{"c: link-local denied", v4(4, "tcp", "169.254.1.1", 80), deny, 10998},
		{"c: an unselected node denied", v4(4, "tcp", "172.30.0.13", 6443), deny, 10997},
		// Namespace d: a link-local deny does not catch the alias.
		{"d: the alias is not link-local", v4(6, "tcp", "169.254.169.2", 80), allow, 21000},
		{"d: the alias on a denied port", v4(6, "tcp", "169.254.169.2", 22), deny, 30999},
		{"d: link-local denied", v4(6, "tcp", "169.254.1.1", 80), deny, 10999},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := sb.Appctl("ofproto/trace", "br0", tc.flow)
			if err != nil {
				t.Fatal(err)
			}
			allowed, prio, err := verdict(out)
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			if strings.Contains(tc.name, ": conjunction") != strings.Contains(out, "50. conj_id=") {
				t.Errorf("decided by a conj_id flow: %v, want %v:\n%s", !strings.Contains(tc.name, ": conjunction"), strings.Contains(tc.name, ": conjunction"), out)
			}
			if allowed != tc.allowed || prio != tc.priority {
				t.Errorf("allowed %v by priority %d, want %v by %d:\n%s", allowed, prio, tc.allowed, tc.priority, out)
			}
		})
	}
}

// table50 finds the table-50 step of a trace ("50. <match>, priority N"),
// the first after a conjunction's resubmission when there is one.
var table50 = regexp.MustCompile(`(?m)^\s*50\. (?:(.*), )?priority (\d+)`)

// verdict reads a trace: whether the packet reached the output port, and
// the priority of the table-50 flow that decided (the conj_id flow's for a
// conjunction).
func verdict(trace string) (allowed bool, prio int, err error) {
	ms := table50.FindAllStringSubmatch(trace, -1)
	if len(ms) == 0 {
		return false, 0, fmt.Errorf("no table 50 step")
	}
	last := ms[len(ms)-1]
	if _, err := fmt.Sscan(last[2], &prio); err != nil {
		return false, 0, err
	}
	i := strings.Index(trace, "Datapath actions:")
	if i < 0 {
		return false, 0, fmt.Errorf("no datapath actions")
	}
	dp := strings.TrimSpace(strings.SplitN(trace[i+len("Datapath actions:"):], "\n", 2)[0])
	switch {
	case dp == "drop":
		return false, prio, nil
	case strings.Contains(trace, "output:2"):
		return true, prio, nil
	}
	return false, 0, fmt.Errorf("datapath actions %q: neither drop nor output", dp)
}
