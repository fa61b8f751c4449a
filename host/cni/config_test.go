package cni

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestParseConfig(t *testing.T) {
	good := `{"cniVersion":"1.0.0","name":"nodeflow","type":"nodeflow","ipam":{"subnets":["fd00:10:244:1::/64","10.244.1.0/24"]}}`
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Bridge != DefaultBridge || c.MTU != DefaultMTU || c.IPAM.DataDir != DefaultDataDir {
		t.Errorf("defaults not applied: %+v", c)
	}
	want := []Range{
		{Subnet: netip.MustParsePrefix("10.244.1.0/24"), Gateway: netip.MustParseAddr("10.244.1.1")},
		{Subnet: netip.MustParsePrefix("fd00:10:244:1::/64"), Gateway: netip.MustParseAddr("fd00:10:244:1::1")},
	}
	if len(c.Ranges) != 2 || c.Ranges[0] != want[0] || c.Ranges[1] != want[1] {
		t.Errorf("ranges = %+v, want %+v (IPv4 first)", c.Ranges, want)
	}

	bad := []struct {
		name, conf string
		code       uint
		msg        string
	}{
		{"not json", `{"name":`, types.ErrDecodingFailure, "decode network configuration"},
		{"no name", `{"cniVersion":"1.0.0","type":"nodeflow","ipam":{"subnets":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, "name: missing"},
		{"name with slash", `{"name":"a/b","ipam":{"subnets":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, "not usable as a directory name"},
		{"other type", `{"name":"n","type":"bridge","ipam":{"subnets":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, `type: "bridge" is not "nodeflow"`},
		{"delegated ipam", `{"name":"n","ipam":{"type":"host-local","subnets":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, `ipam: type: "host-local" is not supported`},
		{"no subnets", `{"name":"n","ipam":{}}`, types.ErrInvalidNetworkConfig, "ipam: subnets: missing"},
		{"bad subnet", `{"name":"n","ipam":{"subnets":["10.0.0.0/33"]}}`, types.ErrInvalidNetworkConfig, "ipam: subnets[0]:"},
		{"host bits", `{"name":"n","ipam":{"subnets":["10.0.0.5/24"]}}`, types.ErrInvalidNetworkConfig, "did you mean 10.0.0.0/24"},
		{"two ipv4 subnets", `{"name":"n","ipam":{"subnets":["10.0.0.0/24","10.0.1.0/24"]}}`, types.ErrInvalidNetworkConfig, "a second IPv4 subnet"},
		{"no room", `{"name":"n","ipam":{"subnets":["10.0.0.0/31"]}}`, types.ErrInvalidNetworkConfig, "no room for a gateway and a pod"},
		{"gateway outside", `{"name":"n","ipam":{"subnets":["10.0.0.0/24"],"gateways":["10.0.1.1"]}}`, types.ErrInvalidNetworkConfig, "gateways[0]: 10.0.1.1 is not a host address"},
		{"too many gateways", `{"name":"n","ipam":{"subnets":["10.0.0.0/24"],"gateways":["10.0.0.1","10.0.0.2"]}}`, types.ErrInvalidNetworkConfig, "2 given for 1 subnets"},
		{"mtu", `{"name":"n","mtu":100,"ipam":{"subnets":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, "mtu: 100 is outside"},
		{"ovsdb endpoint", `{"name":"n","ovsdb":"/run/db.sock","ipam":{"subnets":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, "ovsdb:"},
		{"datapath", `{"name":"n","datapathType":"dpdk","ipam":{"subnets":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, "datapathType"},
		{"bad prevResult", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnets":["10.0.0.0/24"]},"prevResult":{"ips":[{"address":"bogus"}]}}`, types.ErrDecodingFailure, "prevResult"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.conf))
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not a *types.Error", err)
			}
			if e.Code != tc.code {
				t.Errorf("code %d, want %d (%v)", e.Code, tc.code, e)
			}
			if !strings.Contains(e.Error(), tc.msg) {
				t.Errorf("error %q does not mention %q", e.Error(), tc.msg)
			}
		})
	}
}

func TestParseK8sArgs(t *testing.T) {
	a, err := ParseK8sArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;K8S_POD_UID=u-1;K8S_POD_INFRA_CONTAINER_ID=c1")
	if err != nil {
		t.Fatal(err)
	}
	if a != (K8sArgs{PodNamespace: "default", PodName: "web-1", PodUID: "u-1", InfraContainerID: "c1"}) {
		t.Errorf("got %+v", a)
	}
	if _, err := ParseK8sArgs("K8S_POD_NAME"); err == nil {
		t.Error("element without = accepted")
	}
}

func TestMACFromIP(t *testing.T) {
	for _, tc := range []struct{ ip, mac string }{
		{"10.244.1.7", "0a:58:0a:f4:01:07"},
		{"fd00:10:244:1::a:b", "0a:58:00:0a:00:0b"},
	} {
		if got := MACFromIP(netip.MustParseAddr(tc.ip)).String(); got != tc.mac {
			t.Errorf("MACFromIP(%s) = %s, want %s", tc.ip, got, tc.mac)
		}
	}
}

func TestHostVethName(t *testing.T) {
	a := HostVethName("0123456789abcdef", "eth0")
	if len(a) != 15 || !strings.HasPrefix(a, "nf") {
		t.Errorf("name %q: want nf + 13 hex digits", a)
	}
	if a != HostVethName("0123456789abcdef", "eth0") {
		t.Error("not deterministic")
	}
	if a == HostVethName("0123456789abcdef", "eth1") || a == HostVethName("0123456789abcdee", "eth0") {
		t.Error("collision between different attachments")
	}
}
