package hostportflows

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

var testNode = Node{
	IPs:    []netip.Addr{netip.MustParseAddr("172.18.0.3"), netip.MustParseAddr("fd00:18::3")},
	Uplink: 1, Patch: 2,
}

func strs(fs []openflow.Flow) []string {
	var out []string
	for _, f := range fs {
		out = append(out, strings.TrimSpace(f.String()))
	}
	slices.Sort(out)
	return out
}

func TestBuild(t *testing.T) {
	pod4, pod6 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:10:244:1::5")
	out, err := Build(testNode, []Mapping{
		{Protocol: v1.ProtocolTCP, HostPort: 8080, PodIP: pod4, ContainerPort: 80},
		{Protocol: v1.ProtocolTCP, HostPort: 8080, PodIP: pod6, ContainerPort: 80},
		{Protocol: v1.ProtocolUDP, HostIP: netip.MustParseAddr("172.18.0.3"), HostPort: 5353, PodIP: pod4, ContainerPort: 53},
		{Protocol: v1.ProtocolTCP, HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 9000, PodIP: pod4, ContainerPort: 9000},
		{Protocol: v1.ProtocolSCTP, HostIP: netip.MustParseAddr("0.0.0.0"), HostPort: 7777, PodIP: pod4, ContainerPort: 7777},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantPod := []string{
		"table=30, priority=250,ct_state=+new+trk,ct_ipv6_dst=fd00:18::3,ct_nw_proto=6,ct_tp_dst=8080,ipv6 actions=ct(commit,table=40,zone=65000,nat(dst=[fd00:10:244:1::5]:80))",
		"table=30, priority=250,ct_state=+new+trk,ct_nw_dst=172.18.0.3,ct_nw_proto=17,ct_tp_dst=5353,ip actions=ct(commit,table=40,zone=65000,nat(dst=10.244.1.5:53))",
		"table=30, priority=250,ct_state=+new+trk,ct_nw_dst=172.18.0.3,ct_nw_proto=6,ct_tp_dst=8080,ip actions=ct(commit,table=40,zone=65000,nat(dst=10.244.1.5:80))",
		"table=30, priority=250,ct_state=+new+trk,sctp,nw_dst=172.18.0.3,tp_dst=7777 actions=ct(commit,table=40,zone=65000,nat(dst=10.244.1.5))",
	}
	if got := strs(out.Pod.Flows); !slices.Equal(got, wantPod) {
		t.Errorf("br0 flows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantPod, "\n"))
	}
	gw := strs(out.Gateway.Flows)
	for _, want := range []string{
		"priority=110,tcp,in_port=1,nw_dst=172.18.0.3,tp_dst=8080 actions=output:2",
		"priority=110,tcp,in_port=2,nw_src=172.18.0.3,tp_src=8080 actions=output:1",
		"priority=110,tcp6,in_port=1,ipv6_dst=fd00:18::3,tp_dst=8080 actions=output:2",
		"priority=110,udp,in_port=1,nw_dst=172.18.0.3,tp_dst=5353 actions=output:2",
		"priority=110,sctp,in_port=2,nw_src=172.18.0.3,tp_src=7777 actions=output:1",
	} {
		if !slices.Contains(gw, want) {
			t.Errorf("breth0 lacks %q in:\n%s", want, strings.Join(gw, "\n"))
		}
	}
	if len(gw) != 8 {
		t.Errorf("%d breth0 flows, want 8 (two per address and port; none for 127.0.0.1)", len(gw))
	}
}

func TestBuildRejectsWhatItCannotDo(t *testing.T) {
	pod := netip.MustParseAddr("10.244.1.5")
	for _, tc := range []struct {
		m    Mapping
		want string
	}{
		{Mapping{Protocol: v1.ProtocolSCTP, HostPort: 7000, PodIP: pod, ContainerPort: 7001}, "SCTP hostPorts must equal"},
		{Mapping{Protocol: "ICMP", HostPort: 7000, PodIP: pod, ContainerPort: 7000}, `protocol "ICMP"`},
		{Mapping{Protocol: v1.ProtocolTCP, HostIP: netip.MustParseAddr("fd00::1"), HostPort: 7000, PodIP: pod, ContainerPort: 7000}, "different families"},
		{Mapping{Protocol: v1.ProtocolTCP, HostPort: 7000, ContainerPort: 7000}, "no pod IP"},
	} {
		_, err := Build(testNode, []Mapping{tc.m})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.m, err, tc.want)
		}
	}
}

// TestOVSAcceptsHostPorts installs a pod's flows in sandboxed bridges over
// nodeflow's own OpenFlow connection: ovs-ofctl prints exactly what was
// built.
func TestOVSAcceptsHostPorts(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	for _, br := range []string{"br0", "breth0"} {
		if _, err := sb.Vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=dummy",
			"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := Build(testNode, []Mapping{
		{Protocol: v1.ProtocolTCP, HostPort: 8080, PodIP: netip.MustParseAddr("10.244.1.5"), ContainerPort: 80},
		{Protocol: v1.ProtocolUDP, HostPort: 8080, PodIP: netip.MustParseAddr("fd00:10:244:1::5"), ContainerPort: 80},
		{Protocol: v1.ProtocolSCTP, HostPort: 7777, PodIP: netip.MustParseAddr("10.244.1.5"), ContainerPort: 7777},
	})
	if err != nil {
		t.Fatal(err)
	}
	flowtest.InstallAndCompare(t, sb, "br0", out.Pod.Flows)
	flowtest.InstallAndCompare(t, sb, "breth0", out.Gateway.Flows)
}

// TestCheckOn: a hostIP must be the node's own (or loopback, or none), and
// no hostPort takes a port the node itself listens on: a tenant's pod
// cannot DNAT a ClusterIP, another pod or an outside host to itself, nor
// the kubelet's API.
func TestCheckOn(t *testing.T) {
	n := testNode
	n.Secondary = []netip.Addr{netip.MustParseAddr("172.20.0.2")}
	n.Reserved = []uint16{10250, 9476}
	pod := netip.MustParseAddr("10.244.1.5")
	for _, c := range []struct {
		m    Mapping
		want string // "" served
	}{
		{Mapping{Protocol: v1.ProtocolTCP, HostPort: 8080, PodIP: pod, ContainerPort: 80}, ""},
		{Mapping{Protocol: v1.ProtocolTCP, HostIP: netip.MustParseAddr("172.18.0.3"), HostPort: 8080, PodIP: pod, ContainerPort: 80}, ""},
		{Mapping{Protocol: v1.ProtocolTCP, HostIP: netip.MustParseAddr("172.20.0.2"), HostPort: 8080, PodIP: pod, ContainerPort: 80}, ""},
		{Mapping{Protocol: v1.ProtocolTCP, HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 8080, PodIP: pod, ContainerPort: 80}, ""},
		{Mapping{Protocol: v1.ProtocolUDP, HostIP: netip.MustParseAddr("10.96.0.10"), HostPort: 53, PodIP: pod, ContainerPort: 53}, "the hostIP 10.96.0.10 is not an address of this node"},
		{Mapping{Protocol: v1.ProtocolTCP, HostIP: netip.MustParseAddr("10.244.2.7"), HostPort: 8080, PodIP: pod, ContainerPort: 80}, "not an address of this node"},
		{Mapping{Protocol: v1.ProtocolTCP, HostIP: netip.MustParseAddr("8.8.8.8"), HostPort: 443, PodIP: pod, ContainerPort: 443}, "not an address of this node"},
		{Mapping{Protocol: v1.ProtocolTCP, HostPort: 10250, PodIP: pod, ContainerPort: 8080}, "port 10250/TCP is the node's own"},
		{Mapping{Protocol: v1.ProtocolUDP, HostPort: 10250, PodIP: pod, ContainerPort: 8080}, ""}, // the kubelet listens on TCP only
	} {
		err := c.m.CheckOn(n)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want served", c.m, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrNotServed) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want refused: %s", c.m, err, c.want)
		}
	}
}
