package nodefeature

import (
	"net/netip"
	"nodeflow/datapath/plan"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/datapath/nodeflows"
)

func TestRemoteOf(t *testing.T) {
	mk := func(addrs []corev1.NodeAddress, cidrs ...string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{PodCIDRs: cidrs},
			Status: corev1.NodeStatus{Addresses: addrs}}
	}
	v4 := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "fd00::12"}, {Type: corev1.NodeInternalIP, Address: "172.30.0.12"}}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want string // error substring, "" for success
	}{
		{"ok", mk(v4, "10.244.1.0/24", "fd00:10:244:1::/64"), ""},
		{"no address", mk(nil, "10.244.1.0/24"), "no IPv4 InternalIP"},
		{"only v6 address", mk(v4[:1], "10.244.1.0/24"), "no IPv4 InternalIP"},
		{"bad cidr", mk(v4, "10.244.1.0/33"), `podCIDR "10.244.1.0/33"`},
		{"no cidr yet", mk(v4), "no podCIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RemoteOf(tc.node)
			if tc.want == "" {
				if err != nil || r.TunnelIP != netip.MustParseAddr("172.30.0.12") || len(r.PodCIDRs) != 2 {
					t.Fatalf("remoteOf = %+v, %v", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "n2") {
				t.Fatalf("err = %v, want one naming n2 and containing %q", err, tc.want)
			}
		})
	}
}

func TestRemoteOfPipeline(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		set        bool
		want       bool
	}{
		{set: false, want: false},
		{annotation: "3", set: true, want: false},
		{annotation: "4", set: true, want: true},
		{annotation: "12", set: true, want: true},
		{annotation: "four", set: true, want: false},
		{annotation: "-4", set: true, want: false},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.30.0.12"}}}}
		if tc.set {
			n.Annotations = map[string]string{plan.PipelineAnnotation: tc.annotation}
		}
		r, err := RemoteOf(n)
		if err != nil {
			t.Fatalf("annotation %q: %v", tc.annotation, err)
		}
		if r.ReturnsByTunnel != tc.want {
			t.Errorf("annotation %q (set %v): ReturnsByTunnel = %v, want %v", tc.annotation, tc.set, r.ReturnsByTunnel, tc.want)
		}
	}
}

func TestOverlapping(t *testing.T) {
	taken := map[netip.Prefix]string{netip.MustParsePrefix("10.244.1.0/24"): "node2"}
	bad := nodeRemote("bad", "10.244.1.0/25")
	if err := Overlapping(bad, taken); err == nil || !strings.Contains(err.Error(), "overlaps node node2's 10.244.1.0/24") {
		t.Errorf("err = %v", err)
	}
	if err := Overlapping(nodeRemote("ok", "10.244.2.0/24"), taken); err != nil {
		t.Errorf("err = %v, want none", err)
	}
}

func nodeRemote(name, cidr string) nodeflows.Remote {
	return nodeflows.Remote{Name: name, TunnelIP: netip.MustParseAddr("172.30.0.99"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix(cidr)}}
}
