package agent

import (
	"net/netip"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	good := Config{NodeName: "n", OVSRundir: "/r", PodBridge: "br0", GatewayBridge: "breth0", Uplink: "eth0",
		DatapathType: "netdev", MTU: 1400,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no node", func(c *Config) { c.NodeName = "" }, "node name"},
		{"same bridges", func(c *Config) { c.GatewayBridge = "br0" }, "two distinct"},
		{"datapath", func(c *Config) { c.DatapathType = "dpdk" }, "datapath type"},
		{"mtu", func(c *Config) { c.MTU = 100 }, "mtu 100"},
		{"unmasked", func(c *Config) { c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.1/16")} }, "host bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
