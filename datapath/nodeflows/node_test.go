package nodeflows

import (
	"flag"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/internal/testutil/golden"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testConfig is node1 of the testbed's default topology.
func testConfig() Config {
	return Config{
		TunnelPort:   1,
		PatchPort:    2,
		MgmtPort:     3,
		RouterMAC:    flowtest.MAC("0a:58:0a:f4:00:01"),
		MgmtMAC:      flowtest.MAC("0a:58:0a:f4:00:02"),
		HostMAC:      flowtest.MAC("9e:e2:d8:a8:58:46"),
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:10:244::/64")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")},
		NodeIPs:      []netip.Addr{netip.MustParseAddr("172.30.0.11"), netip.MustParseAddr("fd00:172:30::11")},
		Masquerade:   conntrack.DefaultPlan(),
	}
}

func testRemote() Remote {
	return Remote{Name: "node2", TunnelIP: netip.MustParseAddr("172.30.0.12"),
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}}
}

func testPod() Pod {
	return Pod{Namespace: "default", Name: "a", Port: 4, MAC: flowtest.MAC("0a:58:0a:f4:00:05"), NamespaceID: 0x123,
		IPs: []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00:10:244::5")}}
}

func testHops() []plan.NextHop {
	return []plan.NextHop{
		{Prefix: netip.MustParsePrefix("0.0.0.0/0"), MAC: flowtest.MAC("02:00:00:00:00:01")},
		{Prefix: netip.MustParsePrefix("172.30.0.12/32"), MAC: flowtest.MAC("02:00:00:00:00:12")},
		{Prefix: netip.MustParsePrefix("::/0"), MAC: flowtest.MAC("02:00:00:00:00:01")},
	}
}

// all builds every kind of br0 flow for the test node, by golden file name.
func all(t *testing.T) map[string][]openflow.Flow {
	t.Helper()
	c := testConfig()
	must := func(fs []openflow.Flow, err error) []openflow.Flow {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	return map[string][]openflow.Flow{
		"node-local.flows":  must(NodeFlows(c)),
		"node-remote.flows": must(RemoteFlows(c, testRemote())),
		"node-remote-returns-by-tunnel.flows": must(RemoteFlows(c, Remote{Name: "node3", TunnelIP: netip.MustParseAddr("172.30.0.13"),
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:10:244:2::/64")},
			NodeIPs:  []netip.Addr{netip.MustParseAddr("172.30.0.13"), netip.MustParseAddr("fd00:172:30::13")}, ReturnsByTunnel: true})),
		"pod.flows":          must(PodFlows(c, testPod())),
		"nexthops.flows":     must(GatewayOutputFlows(c, testHops())),
		"nd.flows":           NDFlows([]uint32{3, 4, 5}),
		"pipeline-br0.flows": gatewayflows.PipelineFlows(plan.Pod),
	}
}

func TestGolden(t *testing.T) {
	for name, fs := range all(t) {
		t.Run(name, func(t *testing.T) {
			golden.Check(t, filepath.Join("testdata", name), flowtest.Render(fs), *update)
		})
	}
}

// TestTablesAndFeatures checks that every flow lands in a declared br0
// table that admits its owner's feature, and that every table a flow goes to
// is declared.
func TestTablesAndFeatures(t *testing.T) {
	owners := map[string]string{
		"node-local.flows": OwnerLocal, "node-remote.flows": RemoteOwner("node2"), "pod.flows": PodOwner("default", "a"),
		"node-remote-returns-by-tunnel.flows": RemoteOwner("node3"),
		"nexthops.flows":                      OwnerNextHops, "nd.flows": OwnerND, "pipeline-br0.flows": gatewayflows.PipelineOwner(plan.Pod),
	}
	for name, fs := range all(t) {
		feat, err := plan.OwnerFeature(owners[name])
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			tb, ok := plan.LookupTable(plan.Pod, plan.TableID(f.Table))
			if !ok {
				t.Errorf("%s: %s: undeclared table", name, f)
				continue
			}
			if !tb.Allows(feat) {
				t.Errorf("%s: %s: %s does not admit feature %s", name, f, tb, feat)
			}
			for _, in := range f.Instructions {
				if g, ok := in.(openflow.GotoTable); ok {
					if _, ok := plan.LookupTable(plan.Pod, plan.TableID(g.Table)); !ok || g.Table <= f.Table {
						t.Errorf("%s: %s: goto_table:%d is undeclared or not forward", name, f, g.Table)
					}
				}
			}
		}
	}
}

// TestEveryTableEndsInDrop checks the pipeline flows give each br0 table an
// explicit priority-0 flow, and that the miss of each drop table is a drop.
func TestEveryTableEndsInDrop(t *testing.T) {
	byTable := map[uint8]openflow.Flow{}
	for _, f := range gatewayflows.PipelineFlows(plan.Pod) {
		if f.Priority == 0 {
			byTable[f.Table] = f
		}
	}
	for _, tb := range plan.Tables(plan.Pod) {
		if tb.ID == plan.VersionTable {
			continue
		}
		f, ok := byTable[uint8(tb.ID)]
		if !ok {
			t.Errorf("%s has no priority-0 flow", tb)
			continue
		}
		if tb.Miss == plan.MissDrop && !strings.HasSuffix(f.String(), "actions=drop") {
			t.Errorf("%s: miss %q is not a drop", tb, f)
		}
	}
}

func TestValidation(t *testing.T) {
	c := testConfig()
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"no tunnel port", func() error { c := testConfig(); c.TunnelPort = 0; _, err := NodeFlows(c); return err }, "tunnel port 0"},
		{"two v4 pod CIDRs", func() error {
			c := testConfig()
			c.PodCIDRs = append(c.PodCIDRs, netip.MustParsePrefix("10.245.0.0/24"))
			_, err := NodeFlows(c)
			return err
		}, "two of one family"},
		{"remote without address", func() error { r := testRemote(); r.TunnelIP = netip.Addr{}; _, err := RemoteFlows(c, r); return err }, `remote node "node2": tunnel IP`},
		{"remote overlapping", func() error {
			r := testRemote()
			r.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/23")}
			_, err := RemoteFlows(c, r)
			return err
		}, "overlaps this node's"},
		{"remote unmasked", func() error {
			r := testRemote()
			r.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.1.7/24")}
			_, err := RemoteFlows(c, r)
			return err
		}, "not a valid masked prefix"},
		{"pod without IP", func() error { p := testPod(); p.IPs = nil; _, err := PodFlows(c, p); return err }, "pod default/a: no IP"},
		{"pod namespace id too wide", func() error { p := testPod(); p.NamespaceID = 1 << 24; _, err := PodFlows(c, p); return err }, "namespace id"},
		{"bad next hop", func() error {
			_, err := GatewayOutputFlows(c, []plan.NextHop{{Prefix: netip.MustParsePrefix("10.0.0.1/8"), MAC: flowtest.MAC("02:00:00:00:00:01")}})
			return err
		}, "next hop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "node: ") {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestOVSRendersTheSame installs every br0 flow over nodeflow's OpenFlow
// connection into a sandboxed bridge and compares `ovs-ofctl -O OpenFlow15
// dump-flows --no-stats` with Flow.String.
func TestOVSRendersTheSame(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	var fs []openflow.Flow
	for _, part := range all(t) {
		fs = append(fs, part...)
	}
	flowtest.InstallAndCompare(t, sb, "br0", fs)
}
