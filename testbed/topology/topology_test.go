package topology

import (
	"strings"
	"testing"
)

func TestDefault(t *testing.T) {
	top, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range top.Members() {
		names = append(names, n.Kind+":"+n.Name)
	}
	if got := strings.Join(names, " "); got != "bridge:fabric k8s-node:node1 k8s-node:node2 host:ext1" {
		t.Errorf("members: %s", got)
	}
	n1 := top.Topology.Nodes["node1"]
	if a := n1.Addresses(); len(a) != 2 || a[0].String() != "172.30.0.11/24" || a[1].String() != "fd00:172:30::11/64" {
		t.Errorf("node1 addresses %v", a)
	}
	if br := top.LinkedBridge(n1, "eth0"); br == nil || br.Name != "fabric" {
		t.Errorf("node1 eth0 bridge %v", br)
	}
	if k := top.Kubernetes; len(k.PodCIDRs) != 2 || k.NodeCIDRMaskIPv6 != 64 {
		t.Errorf("kubernetes %+v", k)
	}
}

func TestParseErrors(t *testing.T) {
	base := "name: t\ntopology:\n  nodes:\n    br: {kind: bridge}\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"bad name", "name: Big_Name\ntopology: {nodes: {a: {kind: host}}}", "name:"},
		{"unknown field", "name: t\ncolour: red\ntopology: {nodes: {a: {kind: host}}}", "unknown field"},
		{"bad kind", "name: t\ntopology: {nodes: {a: {kind: router}}}", `kind: "router" is not`},
		{"wrong family", base + "    a: {kind: host, ipv4: 'fd00::1/64'}\n  links: [{endpoints: ['a:eth0', 'br:a']}]", "wrong family"},
		{"host route", base + "    a: {kind: host, ipv4: 10.0.0.1/32}\n  links: [{endpoints: ['a:eth0', 'br:a']}]", "prefix length"},
		{"node without address", base + "    a: {kind: k8s-node}\n", "needs an ipv4 or ipv6"},
		{"no eth0 link", base + "    a: {kind: host, ipv4: 10.0.0.2/24}\n", "no link for a:eth0"},
		{"unknown member", base + "  links: [{endpoints: ['x:eth0', 'br:x']}]", `no node "x"`},
		{"bad endpoint", base + "  links: [{endpoints: ['x', 'br:x']}]", "not MEMBER:INTERFACE"},
		{"used twice", base + "    a: {kind: host}\n  links: [{endpoints: ['a:eth0', 'br:a']}, {endpoints: ['a:eth0', 'br:b']}]", "used twice"},
		{"two v4 pod cidrs", "name: t\nkubernetes: {pod-cidrs: [10.0.0.0/16, 10.1.0.0/16]}\ntopology: {nodes: {a: {kind: host}}}", "same family"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
