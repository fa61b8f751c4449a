package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// The test binary doubles as the plugin: with this variable set it runs the
// plugin's main instead of the tests, so the integration tests exec it like a
// runtime execs a CNI plugin, inside the node's network namespace.
const pluginEnv = "NODEFLOW_CNI_TEST_AS_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(pluginEnv) == "1" {
		p := &Plugin{}
		if err := skel.PluginMainFuncsWithError(p.Funcs(), version.All, "test plugin"); err != nil {
			_ = err.Print()
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// node is an OVS sandbox standing in for a node, and a plugin configuration.
type node struct {
	t    *testing.T
	sb   *ovs.Sandbox
	conf map[string]any
}

var nsSeq atomic.Int32

func newNode(t *testing.T, subnets ...string) *node {
	sb := ovstest.New(t, ovs.Options{})
	return &node{t: t, sb: sb, conf: map[string]any{
		"cniVersion":   "1.0.0",
		"name":         "test",
		"type":         "nodeflow",
		"ovsdb":        "unix:" + sb.DBSock(),
		"datapathType": "netdev",
		"ipam":         map[string]any{"subnets": subnets, "dataDir": t.TempDir()},
	}}
}

// podNetns creates a network namespace for a pod, deleted at test end.
func (n *node) podNetns() string {
	name := fmt.Sprintf("nfcnitest-%d-%d", os.Getpid(), nsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		n.t.Fatalf("ip netns add: %v: %s", err, out)
	}
	n.t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	return name
}

type invocation struct {
	cmd, container, netns string
	prevResult            []byte
	valid                 []types.GCAttachment
}

// run execs the plugin in the node's namespace and returns stdout and the
// decoded error, if it failed.
func (n *node) run(inv invocation) ([]byte, *types.Error) {
	n.t.Helper()
	conf := map[string]any{}
	for k, v := range n.conf {
		conf[k] = v
	}
	if inv.prevResult != nil {
		conf["prevResult"] = json.RawMessage(inv.prevResult)
	}
	if inv.valid != nil {
		conf["cniVersion"] = "1.1.0"
		conf["cni.dev/valid-attachments"] = inv.valid
	}
	stdin, _ := json.Marshal(conf)
	self, _ := os.Executable()
	cmd := exec.Command("ip", "netns", "exec", n.sb.Netns, self)
	netnsPath := ""
	if inv.netns != "" {
		netnsPath = filepath.Join("/run/netns", inv.netns)
	}
	cmd.Env = append(os.Environ(), pluginEnv+"=1",
		"CNI_COMMAND="+inv.cmd, "CNI_CONTAINERID="+inv.container, "CNI_NETNS="+netnsPath,
		"CNI_IFNAME=eth0", "CNI_PATH=/nonexistent",
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod-"+inv.container+";K8S_POD_UID=uid-"+inv.container)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var e types.Error
		if jerr := json.Unmarshal(stdout.Bytes(), &e); jerr != nil {
			n.t.Fatalf("plugin %s failed (%v) without a CNI error: stdout %q stderr %q", inv.cmd, err, stdout.String(), stderr.String())
		}
		return stdout.Bytes(), &e
	}
	return stdout.Bytes(), nil
}

func (n *node) mustRun(inv invocation) []byte {
	n.t.Helper()
	out, e := n.run(inv)
	if e != nil {
		n.t.Fatalf("plugin %s %s: %v", inv.cmd, inv.container, e)
	}
	return out
}

func (n *node) vsctl(args ...string) string {
	n.t.Helper()
	out, err := n.sb.Vsctl(args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func txOff(t *testing.T, netns, ifName string) bool {
	out := sh(t, "ip", "netns", "exec", netns, "ethtool", "-k", ifName)
	return strings.Contains(out, "tx-checksumming: off")
}

func TestPluginAddCheckDel(t *testing.T) {
	n := newNode(t, "10.99.0.0/24", "fd00:99::/64")
	pod := n.podNetns()
	if out, _ := n.sb.Vsctl("list-br"); strings.Contains(out, "br0") {
		t.Fatal("br0 exists before the first ADD")
	}

	out := n.mustRun(invocation{cmd: "ADD", container: "c1", netns: pod})
	r, err := current.NewResult(out)
	if err != nil {
		t.Fatalf("decode result %s: %v", out, err)
	}
	res := r.(*current.Result)
	host := HostVethName("c1", "eth0")
	if len(res.Interfaces) != 2 || res.Interfaces[0].Name != host || res.Interfaces[1].Name != "eth0" ||
		res.Interfaces[1].Sandbox != "/run/netns/"+pod || res.Interfaces[1].Mac != "0a:58:0a:63:00:02" {
		t.Errorf("interfaces: %s", out)
	}
	if len(res.IPs) != 2 || res.IPs[0].Address.String() != "10.99.0.2/24" || res.IPs[0].Gateway.String() != "10.99.0.1" ||
		res.IPs[1].Address.String() != "fd00:99::2/64" || res.IPs[1].Gateway.String() != "fd00:99::1" {
		t.Errorf("ips: %s", out)
	}

	// The plugin created br0 (no agent here) with the requested datapath.
	if dp := n.vsctl("get", "Bridge", "br0", "datapath_type"); dp != "netdev" {
		t.Errorf("br0 datapath_type %s", dp)
	}
	if br := n.vsctl("port-to-br", host); br != "br0" {
		t.Errorf("port %s on %q", host, br)
	}
	ids := n.vsctl("get", "Interface", host, "external_ids")
	for _, want := range []string{`pod-namespace=ns1`, `pod-name=pod-c1`, `pod-uid=uid-c1`, `ip="10.99.0.2,fd00:99::2"`,
		`mac="0a:58:0a:63:00:02"`, `sandbox=c1`, `ifname=eth0`, `owner=nodeflow-cni`} {
		if !strings.Contains(ids, want) {
			t.Errorf("external_ids %s lack %s", ids, want)
		}
	}
	if of := n.vsctl("get", "Interface", host, "ofport"); of == "-1" || of == "[]" {
		t.Errorf("ofport %s", of)
	}
	// Inside the pod: addresses, MAC, default routes, offload off.
	addr := sh(t, "ip", "-n", pod, "addr", "show", "eth0")
	for _, want := range []string{"10.99.0.2/24", "fd00:99::2/64", "link/ether 0a:58:0a:63:00:02", "mtu 1400"} {
		if !strings.Contains(addr, want) {
			t.Errorf("pod eth0 lacks %q:\n%s", want, addr)
		}
	}
	if routes := sh(t, "ip", "-n", pod, "route"); !strings.Contains(routes, "default via 10.99.0.1 dev eth0") {
		t.Errorf("pod IPv4 routes:\n%s", routes)
	}
	if routes := sh(t, "ip", "-n", pod, "-6", "route"); !strings.Contains(routes, "default via fd00:99::1 dev eth0") {
		t.Errorf("pod IPv6 routes:\n%s", routes)
	}
	if !txOff(t, pod, "eth0") || !txOff(t, n.sb.Netns, host) {
		t.Error("tx checksum offload is on at one end of the veth")
	}
	// The kernel keeps out of the host end: no ARP answers, no IPv6.
	for file, want := range HostEndSysctls {
		if got := strings.TrimSpace(sh(t, "ip", "netns", "exec", n.sb.Netns, "cat", filepath.Join("/proc/sys/net", fmt.Sprintf(file, host)))); got != want {
			t.Errorf("host end %s: %s is %s, want %s", host, file, got, want)
		}
	}

	// CHECK passes on the intact attachment...
	if _, e := n.run(invocation{cmd: "CHECK", container: "c1", netns: pod, prevResult: out}); e != nil {
		t.Fatalf("CHECK of an intact attachment: %v", e)
	}
	// ...is refused without prevResult...
	if _, e := n.run(invocation{cmd: "CHECK", container: "c1", netns: pod}); e == nil || e.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("CHECK without prevResult: %v", e)
	}
	// ...and fails once the pod lost its address.
	sh(t, "ip", "-n", pod, "addr", "del", "10.99.0.2/24", "dev", "eth0")
	if _, e := n.run(invocation{cmd: "CHECK", container: "c1", netns: pod, prevResult: out}); e == nil || !strings.Contains(e.Msg, "10.99.0.2/24 missing") {
		t.Errorf("CHECK after removing the address: %v", e)
	}

	// A retried ADD of another container gets the next address.
	n.mustRun(invocation{cmd: "ADD", container: "c2", netns: n.podNetns()})

	// DEL removes port, veth and addresses; a second DEL succeeds too.
	for range 2 {
		n.mustRun(invocation{cmd: "DEL", container: "c1", netns: pod, prevResult: out})
	}
	if ports := n.vsctl("list-ports", "br0"); strings.Contains(ports, host) || !strings.Contains(ports, HostVethName("c2", "eth0")) {
		t.Errorf("ports after DEL c1: %q", ports)
	}
	if links, _ := n.sb.Exec("ip", "link"); strings.Contains(links, host) {
		t.Errorf("veth %s left after DEL", host)
	}
	if links := sh(t, "ip", "-n", pod, "link"); strings.Contains(links, "eth0") {
		t.Errorf("pod eth0 left after DEL:\n%s", links)
	}
	dir := filepath.Join(n.conf["ipam"].(map[string]any)["dataDir"].(string), "test")
	if _, err := os.Stat(filepath.Join(dir, "10.99.0.2")); !os.IsNotExist(err) {
		t.Errorf("address of c1 still allocated (%v)", err)
	}
}

func TestPluginDelUnknown(t *testing.T) {
	n := newNode(t, "10.99.0.0/24")
	// No bridge, no store, no netns: DEL must still succeed (CNI spec).
	if _, e := n.run(invocation{cmd: "DEL", container: "never-added"}); e != nil {
		t.Fatalf("DEL of an unknown container: %v", e)
	}
	// And with the bridge present.
	n.mustRun(invocation{cmd: "ADD", container: "c1", netns: n.podNetns()})
	if _, e := n.run(invocation{cmd: "DEL", container: "never-added", netns: n.podNetns()}); e != nil {
		t.Fatalf("DEL of an unknown container: %v", e)
	}
	if ports := n.vsctl("list-ports", "br0"); ports != HostVethName("c1", "eth0") {
		t.Errorf("DEL of an unknown container touched other ports: %q", ports)
	}
}

func TestPluginRangeExhausted(t *testing.T) {
	n := newNode(t, "10.99.0.0/30") // room for exactly one pod
	n.mustRun(invocation{cmd: "ADD", container: "c1", netns: n.podNetns()})
	pod2 := n.podNetns()
	_, e := n.run(invocation{cmd: "ADD", container: "c2", netns: pod2})
	if e == nil || e.Code != CodeRangeExhausted || !strings.Contains(e.Msg, "10.99.0.0/30 is exhausted") {
		t.Fatalf("ADD into a full range: %v", e)
	}
	// The failed ADD left nothing behind.
	if ports := n.vsctl("list-ports", "br0"); strings.Contains(ports, HostVethName("c2", "eth0")) {
		t.Errorf("failed ADD left port: %q", ports)
	}
	if links := sh(t, "ip", "-n", pod2, "link"); strings.Contains(links, "eth0") {
		t.Errorf("failed ADD left pod interface:\n%s", links)
	}
	// After DEL of the first pod its address is free again.
	n.mustRun(invocation{cmd: "DEL", container: "c1"})
	n.mustRun(invocation{cmd: "ADD", container: "c2", netns: pod2})
}

func TestPluginBadConfigAndNetns(t *testing.T) {
	n := newNode(t, "10.99.0.0/24")
	n.conf["ipam"] = map[string]any{"subnets": []string{"10.99.0.7/24"}}
	if _, e := n.run(invocation{cmd: "ADD", container: "c1", netns: n.podNetns()}); e == nil || e.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("ADD with a bad subnet: %v", e)
	}
	n.conf["ipam"] = map[string]any{"subnets": []string{"10.99.0.0/24"}, "dataDir": t.TempDir()}
	n.conf["ovsdb"] = "unix:/nonexistent/db.sock"
	n.conf["cniVersion"] = "1.1.0" // STATUS is new in 1.1
	if _, e := n.run(invocation{cmd: "ADD", container: "c1", netns: n.podNetns()}); e == nil || e.Code != types.ErrTryAgainLater {
		t.Errorf("ADD with an unreachable ovsdb: %v", e)
	}
	if _, e := n.run(invocation{cmd: "STATUS"}); e == nil || e.Code != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with an unreachable ovsdb: %v", e)
	}
	n.conf["ovsdb"] = "unix:" + n.sb.DBSock()
	if _, e := n.run(invocation{cmd: "STATUS"}); e != nil {
		t.Errorf("STATUS: %v", e)
	}
	if _, e := n.run(invocation{cmd: "ADD", container: "c1", netns: "no-such-netns"}); e == nil || e.Code != types.ErrInvalidNetNS {
		t.Errorf("ADD into a missing netns: %v", e)
	}
}

func TestPluginGC(t *testing.T) {
	n := newNode(t, "10.99.0.0/24")
	n.mustRun(invocation{cmd: "ADD", container: "keep", netns: n.podNetns()})
	n.mustRun(invocation{cmd: "ADD", container: "stale", netns: n.podNetns()})
	n.mustRun(invocation{cmd: "GC", valid: []types.GCAttachment{{ContainerID: "keep", IfName: "eth0"}}})
	if ports := n.vsctl("list-ports", "br0"); ports != HostVethName("keep", "eth0") {
		t.Errorf("ports after GC: %q", ports)
	}
	if links, _ := n.sb.Exec("ip", "link"); strings.Contains(links, HostVethName("stale", "eth0")) {
		t.Error("GC left the stale veth")
	}
}
