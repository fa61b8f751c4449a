package gatewayflows

import (
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/internal/testutil/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// seedConfig is the seed's topology (node 172.18.0.3, services 10.96.0.0/16)
// with the ofports of the hand-built spike: eth0 is 1, the patch port 2.
func seedConfig() Config {
	return Config{
		UplinkPort:   1,
		PatchPort:    2,
		NodeIPs:      []netip.Addr{netip.MustParseAddr("172.18.0.3")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		Masquerade:   conntrack.DefaultPlan(),
		RouterMAC:    flowtest.MAC("0a:58:0a:80:00:01"),
		HostMAC:      flowtest.MAC("9e:e2:d8:a8:58:46"),
	}
}

func dualConfig() Config {
	c := seedConfig()
	c.NodeIPs = append(c.NodeIPs, netip.MustParseAddr("fc00:f853:ccd:e793::3"))
	c.ServiceCIDRs = append(c.ServiceCIDRs, netip.MustParsePrefix("fd00:10:96::/112"))
	c.SecondaryIPs = []netip.Addr{netip.MustParseAddr("172.20.0.2"), netip.MustParseAddr("fd00:172:20::2")}
	return c
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"seed-ipv4.flows", seedConfig()},
		{"dual-stack.flows", dualConfig()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := Flows(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tc.name), flowtest.Render(fs), *update)
		})
	}
	t.Run("pipeline-breth0.flows", func(t *testing.T) {
		golden.Check(t, filepath.Join("testdata", "pipeline-breth0.flows"), flowtest.Render(PipelineFlows(plan.Gateway)), *update)
	})
}

// TestSeedFlows checks that every flow of the seed's document (and of the
// hand-built spike that carried real traffic) appears among the built flows
// with the same table, priority, match and actions.
func TestSeedFlows(t *testing.T) {
	fs, err := Flows(seedConfig())
	if err != nil {
		t.Fatal(err)
	}
	fs = append(fs, PipelineFlows(plan.Gateway)...)
	got := map[string]bool{}
	for _, f := range fs {
		got[strings.TrimSpace(f.String())] = true
	}
	// The spike's dump, with explicit priorities where the seed's flows
	// leave them at the default (nodeflow gives every flow a priority so
	// that each table can end in a priority-0 flow).
	for _, want := range []string{
		"priority=500,ip,in_port=LOCAL,nw_dst=10.96.0.0/16 actions=ct(commit,table=2,zone=64001,nat(src=169.254.169.2))",
		"priority=500,ip,in_port=2,nw_src=10.96.0.0/16,nw_dst=169.254.169.2 actions=ct(table=3,zone=64001,nat)",
		"priority=500,ip,in_port=2,nw_src=172.18.0.3,nw_dst=169.254.169.2 actions=ct(commit,table=4,zone=64001,nat(dst=172.18.0.3))",
		"priority=500,ip,in_port=LOCAL,nw_dst=169.254.169.1 actions=ct(table=5,zone=64002,nat)",
		"priority=100,ip,in_port=2 actions=ct(commit,zone=64000,exec(set_field:0x1->ct_mark)),output:1",
		"priority=100,ip,in_port=LOCAL actions=ct(commit,zone=64000,exec(set_field:0x2->ct_mark)),output:1",
		"priority=50,ip,in_port=1 actions=ct(table=1,zone=64000,nat)",
		"priority=0 actions=NORMAL",
		"table=1, priority=100,ct_state=+est+trk,ct_mark=0x1,ip actions=output:2",
		"table=1, priority=100,ct_state=+est+trk,ct_mark=0x2,ip actions=LOCAL",
		"table=1, priority=100,ct_state=+rel+trk,ct_mark=0x1,ip actions=output:2",
		"table=1, priority=100,ct_state=+rel+trk,ct_mark=0x2,ip actions=LOCAL",
		"table=1, priority=0 actions=NORMAL",
		"table=2, priority=100 actions=set_field:0a:58:0a:80:00:01->eth_dst,output:2",
		"table=3, priority=100 actions=move:NXM_OF_ETH_DST[]->NXM_OF_ETH_SRC[],set_field:9e:e2:d8:a8:58:46->eth_dst,LOCAL",
		"table=4, priority=100,ip actions=ct(commit,table=3,zone=64002,nat(src=169.254.169.1))",
		"table=5, priority=100,ip actions=ct(commit,table=2,zone=64001,nat)",
	} {
		if !got[want] {
			t.Errorf("missing seed flow %q", want)
		}
	}
}

// TestSecondaryIPs checks that each usable secondary address gets one
// hairpin flow, in its family, and that node IPs, masquerade addresses and
// repeats get none.
func TestSecondaryIPs(t *testing.T) {
	c := dualConfig()
	a := netip.MustParseAddr
	c.SecondaryIPs = []netip.Addr{
		a("172.20.0.2"), a("172.20.0.2"), // a repeat
		a("172.18.0.3"), a("fc00:f853:ccd:e793::3"), // the node IPs
		a("169.254.169.2"), a("fd69::1"), // masquerade addresses
		a("192.0.2.7"), a("2001:db8::7"),
	}
	fs, err := Flows(c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range fs {
		l := strings.TrimSpace(f.String())
		if strings.Contains(l, "priority=500") && strings.Contains(l, "table=4,zone=64001)") {
			got[l]++
		}
	}
	want := []string{
		"priority=500,ip,in_port=2,nw_src=172.18.0.3,nw_dst=172.20.0.2 actions=ct(commit,table=4,zone=64001)",
		"priority=500,ip,in_port=2,nw_src=172.18.0.3,nw_dst=192.0.2.7 actions=ct(commit,table=4,zone=64001)",
		"priority=500,ipv6,in_port=2,ipv6_src=fc00:f853:ccd:e793::3,ipv6_dst=2001:db8::7 actions=ct(commit,table=4,zone=64001)",
	}
	for _, w := range want {
		if got[w] != 1 {
			t.Errorf("secondary flow %q: %d times, want once", w, got[w])
		}
		delete(got, w)
	}
	for l := range got {
		t.Errorf("unexpected secondary flow %q", l)
	}
}

// TestEveryTableEnds checks that PipelineFlows gives every table of both
// bridges, except the version table, exactly one priority-0 flow that does
// what the plan says its miss does.
func TestEveryTableEnds(t *testing.T) {
	for _, b := range plan.Bridges {
		have := map[uint8]string{}
		for _, f := range PipelineFlows(b) {
			if f.Priority != 0 {
				t.Errorf("%s: pipeline flow %q is not priority 0", b, f.String())
			}
			if _, dup := have[f.Table]; dup {
				t.Errorf("%s: two pipeline flows in table %d", b, f.Table)
			}
			have[f.Table] = f.String()
		}
		for _, tb := range plan.Tables(b) {
			text, ok := have[uint8(tb.ID)]
			delete(have, uint8(tb.ID))
			if tb.ID == plan.VersionTable {
				if ok {
					t.Errorf("%s: the version table has a pipeline flow %q", tb, text)
				}
				continue
			}
			var want string
			switch tb.Miss {
			case plan.MissDrop, plan.MissReturn:
				want = "actions=drop"
			case plan.MissGoto:
				want = fmt.Sprintf("actions=goto_table:%d", tb.Next)
			case plan.MissNormal:
				want = "actions=NORMAL"
			}
			if !ok || !strings.HasSuffix(text, want) {
				t.Errorf("%s: pipeline flow %q, want one ending in %q", tb, text, want)
			}
		}
		for table, text := range have {
			t.Errorf("%s: pipeline flow %q in undeclared table %d", b, text, table)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no uplink", func(c *Config) { c.UplinkPort = 0 }, "uplink port 0"},
		{"same ports", func(c *Config) { c.PatchPort = c.UplinkPort }, "both 1"},
		{"no node IP", func(c *Config) { c.NodeIPs = nil }, "no node IP"},
		{"two v4", func(c *Config) { c.NodeIPs = append(c.NodeIPs, netip.MustParseAddr("10.0.0.1")) }, "two node IPs"},
		{"bad mac", func(c *Config) { c.HostMAC = nil }, "host MAC"},
		{"unmasked svc", func(c *Config) { c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.1/16")} }, "service CIDR"},
		{"no v6 masquerade", func(c *Config) {
			c.Masquerade = conntrack.Plan{V4: conntrack.DefaultPlan().V4}
			c.NodeIPs = append(c.NodeIPs, netip.MustParseAddr("fd00::3"))
		}, "no masquerade subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := seedConfig()
			tc.mutate(&c)
			_, err := Flows(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "gateway: ") {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
