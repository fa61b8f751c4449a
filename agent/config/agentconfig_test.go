package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"nodeflow/agent/config"
	"nodeflow/agent/features"
)

// fields are the features' fields, as the agent reads the file.
var fields = features.FileFields()

const full = `apiVersion: nodeflow.io/v1alpha1
kind: AgentConfiguration
nodeName: node1
ovsRundir: /var/run/openvswitch
podBridge: br0
gatewayBridge: breth0
uplink: eth0
datapathType: netdev
clusterCIDRs: [10.244.0.0/16, "fd00:10:244::/56"]
serviceCIDRs: [10.96.0.0/16]
masqueradeSubnetV4: 169.254.169.0/29
masqueradeSubnetV6: "fd69::/125"
mtu: 1450
healthAddr: 0.0.0.0:9476
cniConfDir: /etc/cni/net.d
services: true
unidle: false
unidleHoldTime: 90s
egressFirewall: true
virtualNetworks: false
resolvConf: /etc/resolv.conf
hostCheckInterval: 1m
gcPercent: 75
gcStartupFloor: 96
externalIPs:
  allowedCIDRs: [192.0.2.0/24, "2001:db8::/64"]
  rejectedCIDRs: [192.0.2.128/25]
loadBalancerIPs:
  allowedCIDRs: [198.51.100.0/24]
nodePortAddresses: [172.30.0.0/24]
clusterDNSServices: [kube-system/kube-dns, openshift-dns/dns-default]
trustedDNS: [169.254.20.10, "fd00:172:30::/64"]
`

// Every field becomes its flag's value, as the command line writes it.
func TestParse(t *testing.T) {
	c, err := config.Parse([]byte(full), fields)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range c.Settings() {
		got[s.Flag] = s.Value
	}
	for flag, want := range map[string]string{
		"node-name": "node1", "datapath-type": "netdev", "cluster-cidr": "10.244.0.0/16,fd00:10:244::/56", "service-cidr": "10.96.0.0/16",
		"masquerade-subnet-v6": "fd69::/125", "mtu": "1450", "unidle": "false", "unidle-hold-time": "90s", "host-check-interval": "1m",
		"cni-conf-dir": "/etc/cni/net.d", "egress-firewall": "true", "gc-percent": "75", "gc-startup-floor": "96", "virtual-networks": "false",
		"external-ip-allowed-cidr": "192.0.2.0/24,2001:db8::/64", "external-ip-rejected-cidr": "192.0.2.128/25",
		"load-balancer-ip-allowed-cidr": "198.51.100.0/24", "nodeport-addresses": "172.30.0.0/24",
		"cluster-dns-service": "kube-system/kube-dns,openshift-dns/dns-default", "trusted-dns": "169.254.20.10,fd00:172:30::/64",
	} {
		if got[flag] != want {
			t.Errorf("--%s = %q, want %q", flag, got[flag], want)
		}
	}
	if _, ok := got["kubeconfig"]; ok {
		t.Error("a field the file leaves out set its flag")
	}
	if len(got) != 28 {
		t.Errorf("%d settings, want the file's 28: %v", len(got), got)
	}
	// An empty list is a setting: no cluster DNS Service at all.
	c, err = config.Parse([]byte("apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\nclusterDNSServices: []\n"), fields)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Settings(); len(s) != 1 || s[0].Flag != "cluster-dns-service" || s[0].Value != "" {
		t.Errorf("clusterDNSServices: []: %+v", s)
	}
}

// Bad files fail with the field named.
func TestParseErrors(t *testing.T) {
	head := "apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\n"
	for _, c := range []struct{ name, file, want string }{
		{"unknown field", head + "clusterCidrs: [10.0.0.0/8]\n", `unknown field "clusterCidrs"`},
		{"wrong type", head + "mtu: big\n", "mtu: string given, want int"},
		{"bad CIDR", head + "clusterCIDRs: [10.0.0.0/8, 10.0.0.0/33]\n", `clusterCIDRs[1]: "10.0.0.0/33" is not a CIDR`},
		{"wrong family", head + "masqueradeSubnetV4: \"fd69::/125\"\n", "masqueradeSubnetV4"},
		{"bad duration", head + "unidleHoldTime: 1h-\n", `unidleHoldTime: "1h-" is not a positive duration`},
		{"duration as a number", head + "unidleHoldTime: 60\n", "unidleHoldTime"},
		{"twice", head + "mtu: 1400\nmtu: 1500\n", "mtu"},
		{"bad datapath", head + "datapathType: kernel\n", `datapathType: "kernel"`},
		{"mtu out of range", head + "mtu: 100\n", "mtu: 100"},
		{"gc percent out of range", head + "gcPercent: -5\n", "gcPercent: -5"},
		{"gc start-up floor out of range", head + "gcStartupFloor: -1\n", "gcStartupFloor: -1"},
		{"empty bridge", head + "podBridge: \"\"\n", "podBridge: empty"},
		{"bad policy CIDR", head + "externalIPs:\n  rejectedCIDRs: [1.2.3.4/40]\n", `externalIPs.rejectedCIDRs[0]: "1.2.3.4/40" is not a CIDR`},
		{"unknown policy field", head + "externalIPs:\n  allowed: [1.2.3.0/24]\n", `unknown field "externalIPs.allowed"`},
		{"bad node port address", head + "nodePortAddresses: [primary, 10.0.0.0/8]\n", `nodePortAddresses[0]: "primary" is not a CIDR`},
		{"cluster DNS Service without a namespace", head + "clusterDNSServices: [kube-dns]\n", `clusterDNSServices[0]: "kube-dns" is not namespace/name`},
		{"bad trusted DNS", head + "trustedDNS: [169.254.20.10, 169.254.20.300]\n", `trustedDNS[1]: "169.254.20.300" is not an address or a CIDR`},
		{"wrong kind", "apiVersion: nodeflow.io/v1alpha1\nkind: KubeProxyConfiguration\n", `kind "KubeProxyConfiguration"`},
		{"no version", "kind: AgentConfiguration\n", `apiVersion ""`},
		{"not YAML", "\tfoo: [", "not YAML"},
	} {
		_, err := config.Parse([]byte(c.file), fields)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// Load names the file.
func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\nmtu: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(p, fields); err == nil || !strings.Contains(err.Error(), p+": mtu: 10") {
		t.Errorf("Load: %v, want the file and the field named", err)
	}
	if _, err := config.Load(filepath.Join(t.TempDir(), "none"), fields); err == nil {
		t.Error("a missing file loaded")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(full))
	f.Add([]byte("apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\nmtu: 1e9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Parse(b, fields)
		if err != nil {
			return
		}
		for _, s := range c.Settings() {
			if s.Flag == "" || s.Field == "" {
				t.Fatalf("setting %+v", s)
			}
		}
	})
}

// The example in docs/install.md is a valid file.
func TestDocExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\napiVersion: "+config.APIVersion)
	if !ok {
		t.Fatal("docs/install.md has no AgentConfiguration example")
	}
	body, _, _ := strings.Cut(rest, "```")
	if _, err := config.Parse([]byte("apiVersion: "+config.APIVersion+body), fields); err != nil {
		t.Errorf("the example in docs/install.md: %v", err)
	}
}

// namespaceBudget sets --namespace-budget; a negative one is refused.
func TestParseNamespaceBudget(t *testing.T) {
	head := "apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\n"
	c, err := config.Parse([]byte(head+"namespaceBudget: 20000\n"), fields)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Settings(); len(s) != 1 || s[0] != (config.Setting{Flag: "namespace-budget", Field: "namespaceBudget", Value: "20000"}) {
		t.Errorf("settings %+v", s)
	}
	if _, err := config.Parse([]byte(head+"namespaceBudget: -1\n"), fields); err == nil || !strings.Contains(err.Error(), "namespaceBudget: -1") {
		t.Errorf("negative budget: %v", err)
	}
}

// docs/install.md lists every field of the file: the agent's own and the
// features'.
func TestDocFields(t *testing.T) {
	b, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "```yaml\napiVersion: "+config.APIVersion)
	body, _, _ := strings.Cut(rest, "```")
	listed := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if also, ok := strings.CutPrefix(line, "# also: "); ok {
			for _, f := range strings.Split(also, ", ") {
				listed[strings.TrimSpace(f)] = true
			}
			continue
		}
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			listed[name] = true
		}
	}
	var names []string
	own := reflect.TypeFor[config.AgentConfiguration]()
	for i := range own.NumField() {
		if name, _, _ := strings.Cut(own.Field(i).Tag.Get("json"), ","); name != "" && name != "-" && name != "apiVersion" && name != "kind" {
			names = append(names, name)
		}
	}
	var walk func(fs []config.Field)
	walk = func(fs []config.Field) {
		for _, f := range fs {
			names = append(names, f.Name)
			walk(f.Fields)
		}
	}
	walk(fields)
	for _, n := range names {
		if !listed[n] {
			t.Errorf("field %s is not in docs/install.md's example", n)
		}
	}
}

// A feature's field is declared once, and not over one of the agent's.
func TestFieldDeclaredTwice(t *testing.T) {
	for _, fs := range [][]config.Field{
		{{Name: "mtu", Flag: "mtu", Type: config.String}},
		{{Name: "x", Flag: "x", Type: config.Bool}, {Name: "x", Flag: "y", Type: config.Bool}},
		{{Name: "o", Type: config.Object, Fields: []config.Field{{Name: "a", Flag: "a", Type: config.List}, {Name: "a", Flag: "b", Type: config.List}}}},
	} {
		if _, err := config.Parse([]byte("apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\n"), fs); err == nil || !strings.Contains(err.Error(), "declared twice") {
			t.Errorf("fields %+v: %v, want an error", fs, err)
		}
	}
}

// A feature's fields set their flags with the values the command line
// would give, and are checked as declared.
func TestFeatureFields(t *testing.T) {
	fs := []config.Field{
		{Name: "enabled", Flag: "enabled", Type: config.Bool},
		{Name: "wait", Flag: "wait", Type: config.String, Check: config.PositiveDuration},
		{Name: "policy", Type: config.Object, Fields: []config.Field{{Name: "allowed", Flag: "allowed-cidr", Type: config.List, Check: config.CIDR}}},
	}
	head := "apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\n"
	c, err := config.Parse([]byte(head+"mtu: 1400\npolicy:\n  allowed: [10.0.0.0/8, 10.1.0.0/16]\nenabled: false\nwait: 5s\n"), fs)
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Setting{{Flag: "mtu", Field: "mtu", Value: "1400"}, {Flag: "enabled", Field: "enabled", Value: "false"},
		{Flag: "wait", Field: "wait", Value: "5s"}, {Flag: "allowed-cidr", Field: "policy.allowed", Value: "10.0.0.0/8,10.1.0.0/16"}}
	if got := c.Settings(); !slices.Equal(got, want) {
		t.Errorf("settings %+v, want %+v", got, want)
	}
	for _, bad := range []struct{ file, want string }{
		{"enabled: yes please\n", "enabled: string given, want bool"},
		{"wait: 0s\n", `wait: "0s" is not a positive duration`},
		{"policy:\n  allowed: [10.0.0.0/8, nope]\n", `policy.allowed[1]: "nope" is not a CIDR`},
		{"policy:\n  denied: []\n", `unknown field "policy.denied"`},
		{"policy: [10.0.0.0/8]\n", "policy"},
	} {
		if _, err := config.Parse([]byte(head+bad.file), fs); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error with %q", bad.file, err, bad.want)
		}
	}
}
