package conntrack

import (
	"net/netip"
	"strings"
	"testing"
)

func TestZonePlan(t *testing.T) {
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	// The seed's numbers are fixed: breth0's flows must read as in the seed.
	for z, name := range map[Zone]string{64000: "Gateway", 64001: "HostMasquerade", 64002: "RouterMasquerade"} {
		zi, ok := Lookup(z)
		if !ok || zi.Name != name || zi.Bridge != BridgeGateway {
			t.Errorf("zone %d: got %+v, want %s on breth0", z, zi, name)
		}
	}
	for _, zi := range Zones() {
		if zi.Bridge == BridgePod && zi.Zone >= 64000 && zi.Zone <= 64002 {
			t.Errorf("br0 zone %s collides with the seed's zones", zi.Name)
		}
	}
}

func TestCheckZonesRejects(t *testing.T) {
	tests := []struct {
		name  string
		zones []ZoneInfo
		want  string
	}{
		{"duplicate", []ZoneInfo{{64000, "A", BridgeGateway, ""}, {64000, "B", BridgeGateway, ""}}, "declared twice"},
		{"br0 zone in breth0's range", []ZoneInfo{{64001, "Svc", BridgePod, ""}}, "inside breth0's reserved range"},
		{"breth0 zone outside its range", []ZoneInfo{{100, "Gw", BridgeGateway, ""}}, "outside breth0's reserved range"},
		{"zone zero", []ZoneInfo{{0, "Default", BridgePod, ""}}, "default zone"},
		{"unordered", []ZoneInfo{{65001, "B", BridgePod, ""}, {65000, "A", BridgePod, ""}}, "numeric order"},
		{"unknown bridge", []ZoneInfo{{65000, "A", "br9", ""}}, "unknown bridge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkZones(tt.zones)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestMasquerade(t *testing.T) {
	p := DefaultPlan()
	want := map[string]netip.Addr{
		"v4 router": netip.MustParseAddr("169.254.169.1"), "v4 host": netip.MustParseAddr("169.254.169.2"),
		"v4 etp": netip.MustParseAddr("169.254.169.3"), "v4 next hop": netip.MustParseAddr("169.254.169.4"),
		"v6 router": netip.MustParseAddr("fd69::1"), "v6 host": netip.MustParseAddr("fd69::2"),
		"v6 etp": netip.MustParseAddr("fd69::3"), "v6 next hop": netip.MustParseAddr("fd69::4"),
	}
	got := map[string]netip.Addr{
		"v4 router": p.V4.Router, "v4 host": p.V4.Host, "v4 etp": p.V4.ETPLocal, "v4 next hop": p.V4.NextHop,
		"v6 router": p.V6.Router, "v6 host": p.V6.Host, "v6 etp": p.V6.ETPLocal, "v6 next hop": p.V6.NextHop,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %s, want %s", k, got[k], w)
		}
	}
	if s := p.V4.HostPrefix().String(); s != "169.254.169.2/29" {
		t.Errorf("v4 host prefix %s", s)
	}
	if s := p.V6.HostPrefix().String(); s != "fd69::2/125" {
		t.Errorf("v6 host prefix %s", s)
	}
	if s := MAC(p.V4.NextHop).String(); s != "0a:58:a9:fe:a9:04" {
		t.Errorf("next hop MAC %s", s)
	}
	if m, ok := p.For(netip.MustParseAddr("10.96.0.1")); !ok || m.Is6() {
		t.Errorf("For(v4) = %+v %v", m, ok)
	}
	if m, ok := p.For(netip.MustParseAddr("fd00::1")); !ok || !m.Is6() {
		t.Errorf("For(v6) = %+v %v", m, ok)
	}
	single, err := NewPlan(DefaultMasqueradeV4, netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := single.For(netip.MustParseAddr("fd00::1")); ok {
		t.Error("single-stack plan answered for IPv6")
	}
}

func TestMasqueradeRejects(t *testing.T) {
	tests := []struct {
		name   string
		v4, v6 string
		want   string
	}{
		{"too small v4", "169.254.169.0/30", "", "at least 8 addresses"},
		{"too small v6", "", "fd69::/126", "at least 8 addresses"},
		{"host bits", "169.254.169.1/29", "", "host bits set"},
		{"v6 given as v4", "fd69::/125", "", "not IPv4"},
		{"v4 given as v6", "", "169.254.169.0/29", "not IPv6"},
		{"neither", "", "", "no subnet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v4, v6 netip.Prefix
			if tt.v4 != "" {
				v4 = netip.MustParsePrefix(tt.v4)
			}
			if tt.v6 != "" {
				v6 = netip.MustParsePrefix(tt.v6)
			}
			_, err := NewPlan(v4, v6)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
