package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/host/cni"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/workload"
)

func TestNodesRegisterWithPodCIDRs(t *testing.T) {
	e := up(t)
	t.Logf("testbed up took %s", e.upDuration)
	nodes, err := e.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("%d nodes, want 2", len(nodes.Items))
	}
	clusterV4 := netip.MustParsePrefix("10.244.0.0/16")
	clusterV6 := netip.MustParsePrefix("fd00:10:244::/56")
	seen := map[string]string{}
	for _, n := range nodes.Items {
		if !ready(n.Status.Conditions) {
			t.Errorf("node %s is not Ready", n.Name)
		}
		if len(n.Spec.PodCIDRs) != 2 {
			t.Fatalf("node %s podCIDRs %v, want one per family", n.Name, n.Spec.PodCIDRs)
		}
		v4, v6 := netip.MustParsePrefix(n.Spec.PodCIDRs[0]), netip.MustParsePrefix(n.Spec.PodCIDRs[1])
		if !clusterV4.Contains(v4.Addr()) || v4.Bits() != 24 || !clusterV6.Contains(v6.Addr()) || v6.Bits() != 64 {
			t.Errorf("node %s podCIDRs %v outside the cluster CIDRs or of the wrong size", n.Name, n.Spec.PodCIDRs)
		}
		for _, c := range n.Spec.PodCIDRs {
			if other, dup := seen[c]; dup {
				t.Errorf("podCIDR %s given to %s and %s", c, other, n.Name)
			}
			seen[c] = n.Name
		}
		m, ok := e.state.Member(n.Name)
		if !ok {
			t.Fatalf("node %s is not a testbed member", n.Name)
		}
		var addrs []string
		for _, a := range n.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				addrs = append(addrs, a.Address)
			}
		}
		if strings.Join(addrs, ",") != strings.Join(m.Addresses, ",") {
			t.Errorf("node %s InternalIPs %v, want the node IPs %v", n.Name, addrs, m.Addresses)
		}
	}
	// The node renews its Lease.
	for _, n := range nodes.Items {
		l, err := e.client.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			t.Errorf("lease of %s: %v", n.Name, err)
		}
	}
}

func ready(conds any) bool {
	switch cs := conds.(type) {
	case []v1.NodeCondition:
		for _, c := range cs {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue
			}
		}
	case []v1.PodCondition:
		for _, c := range cs {
			if c.Type == v1.PodReady {
				return c.Status == v1.ConditionTrue
			}
		}
	}
	return false
}

// ovsPort is a row of the Interface table, read with ovs-vsctl (the oracle).
type ovsPort struct {
	Name        string
	Ofport      int
	ExternalIDs map[string]string
}

// cniPorts lists the ports the CNI plugin made on the node's br0.
func cniPorts(t testing.TB, m *testbed.Member) []ovsPort {
	t.Helper()
	out, err := exec.Command("ovs-vsctl", "--db=unix:"+filepath.Join(m.OVSRundir, "db.sock"), "--format=json",
		"--columns=name,ofport,external_ids", "find", "Interface", "external_ids:owner="+cni.OwnerCNI).Output()
	if err != nil {
		t.Fatalf("ovs-vsctl find on %s: %v", m.Name, err)
	}
	var tbl struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(out, &tbl); err != nil {
		t.Fatal(err)
	}
	var ports []ovsPort
	for _, row := range tbl.Data {
		var p ovsPort
		_ = json.Unmarshal(row[0], &p.Name)
		_ = json.Unmarshal(row[1], &p.Ofport)
		var m []any // ["map", [[k, v], ...]]
		_ = json.Unmarshal(row[2], &m)
		p.ExternalIDs = map[string]string{}
		if len(m) == 2 {
			for _, kv := range m[1].([]any) {
				pair := kv.([]any)
				p.ExternalIDs[pair[0].(string)] = pair[1].(string)
			}
		}
		ports = append(ports, p)
	}
	return ports
}

func onBridge(t *testing.T, m *testbed.Member, port string) string {
	out, err := exec.Command("ovs-vsctl", "--db=unix:"+filepath.Join(m.OVSRundir, "db.sock"), "port-to-br", port).Output()
	if err != nil {
		t.Fatalf("port-to-br %s: %v", port, err)
	}
	return strings.TrimSpace(string(out))
}

func TestDeploymentPodsGetAddressesPortsAndReady(t *testing.T) {
	e := up(t)
	ctx := context.Background()
	ns := createNamespace(t, e, "e2e-deploy")
	// What other pods (the cluster DNS) hold before this test's exist.
	before := podResources(t, e)
	// Spread over both nodes, so both CNI paths run.
	dep := spreadDeployment(ns, "web", 3, v1.ContainerPort{Name: "http", ContainerPort: 8080}, v1.ContainerPort{ContainerPort: 5353, Protocol: v1.ProtocolUDP})
	pod := &dep.Spec.Template.Spec
	pod.TerminationGracePeriodSeconds = ptr.To(int64(5))
	pod.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
		PeriodSeconds: 1,
	}
	if _, err := e.client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []v1.Pod
	eventually(t, 90*time.Second, "3 pods Ready", func(ctx context.Context) error {
		list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, p := range list.Items {
			if ready(p.Status.Conditions) && p.DeletionTimestamp == nil {
				n++
			}
		}
		if n != 3 || len(list.Items) != 3 {
			return fmt.Errorf("%d of %d pods Ready", n, len(list.Items))
		}
		pods = list.Items
		return nil
	})

	nodes := map[string]*v1.Node{}
	for _, p := range pods {
		if nodes[p.Spec.NodeName] == nil {
			n, err := e.client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			nodes[p.Spec.NodeName] = n
		}
	}
	if len(nodes) != 2 {
		t.Errorf("pods on %d nodes, want both", len(nodes))
	}
	for _, p := range pods {
		node := nodes[p.Spec.NodeName]
		m, _ := e.state.Member(node.Name)
		t.Run(p.Name, func(t *testing.T) {
			// Addresses: one per family, from the node's podCIDRs.
			if len(p.Status.PodIPs) != 2 || p.Status.PodIP != p.Status.PodIPs[0].IP {
				t.Fatalf("podIPs %v podIP %s", p.Status.PodIPs, p.Status.PodIP)
			}
			var ips []string
			for i, ip := range p.Status.PodIPs {
				a := netip.MustParseAddr(ip.IP)
				if !netip.MustParsePrefix(node.Spec.PodCIDRs[i]).Contains(a) {
					t.Errorf("pod IP %s is not in %s's podCIDR %s", a, node.Name, node.Spec.PodCIDRs[i])
				}
				ips = append(ips, a.String())
			}
			if p.Status.HostIP != m.Addresses[0] {
				t.Errorf("hostIP %s, want %s", p.Status.HostIP, m.Addresses[0])
			}
			if len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready || p.Status.ContainerStatuses[0].State.Running == nil {
				t.Errorf("containerStatuses %+v", p.Status.ContainerStatuses)
			}
			// The port on the node's br0 names the pod.
			var port *ovsPort
			for _, op := range cniPorts(t, m) {
				if op.ExternalIDs[cni.ExternalIDPodUID] == string(p.UID) {
					port = &op
				}
			}
			if port == nil {
				t.Fatalf("no port for pod uid %s on %s", p.UID, node.Name)
			}
			mac := cni.MACFromIP(netip.MustParseAddr(ips[0])).String()
			want := map[string]string{
				cni.ExternalIDPodNamespace: ns,
				cni.ExternalIDPodName:      p.Name,
				cni.ExternalIDIP:           strings.Join(ips, ","),
				cni.ExternalIDMAC:          mac,
			}
			for k, v := range want {
				if port.ExternalIDs[k] != v {
					t.Errorf("port %s external_ids:%s = %q, want %q", port.Name, k, port.ExternalIDs[k], v)
				}
			}
			if len(port.ExternalIDs[cni.ExternalIDSandbox]) != 64 {
				t.Errorf("port %s sandbox %q", port.Name, port.ExternalIDs[cni.ExternalIDSandbox])
			}
			if port.Ofport <= 0 {
				t.Errorf("port %s ofport %d", port.Name, port.Ofport)
			}
			if br := onBridge(t, m, port.Name); br != "br0" {
				t.Errorf("port %s on %q, want br0", port.Name, br)
			}
			// The test server answers inside the pod, with its name.
			netns := strings.TrimPrefix(port.ExternalIDs[cni.ExternalIDNetns], "/run/netns/")
			checkServer(t, netns, ips[0], p.Name)
			checkServer(t, netns, ips[1], p.Name)
		})
	}

	// Deleting the Deployment runs CNI DEL: ports, namespaces and addresses go.
	if err := e.client.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "pods deleted", func(ctx context.Context) error {
		list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods left", len(list.Items))
		}
		return nil
	})
	for _, left := range podResources(t, e) {
		if !slices.Contains(before, left) {
			t.Errorf("left after deletion: %s", left)
		}
	}
	for _, m := range e.state.Members {
		if recs, _ := filepath.Glob(filepath.Join(m.Dir, "pods", ns+"_*")); m.Dir != "" && len(recs) > 0 {
			t.Errorf("node %s: pod records left: %v", m.Name, recs)
		}
	}
}

// podResources lists what the testbed's pods hold on the nodes, one string
// each: their br0 ports, host veths and allocated addresses, and their
// network namespaces.
func podResources(t *testing.T, e *env) []string {
	t.Helper()
	var out []string
	for _, m := range e.state.Members {
		if m.OVSRundir == "" {
			continue
		}
		for _, p := range cniPorts(t, &m) {
			out = append(out, fmt.Sprintf("node %s: br0 port %s (pod %s/%s)", m.Name, p.Name, p.ExternalIDs[cni.ExternalIDPodNamespace], p.ExternalIDs[cni.ExternalIDPodName]))
		}
		links, err := exec.Command("ip", "-n", m.Netns, "-o", "link").Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range hostVeth.FindAll(links, -1) {
			out = append(out, fmt.Sprintf("node %s: host veth %s", m.Name, v))
		}
		// The kubelet's default IPAM directory, or the agent's once it runs;
		// the agent's own reservation for mp0 is not a pod's address.
		for _, dir := range []string{filepath.Join(m.Dir, "cni", "nodeflow"), filepath.Join(m.Dir, "ipam", "nodeflow")} {
			files, _ := filepath.Glob(filepath.Join(dir, "10.*"))
			for _, f := range files {
				if b, err := os.ReadFile(f); err == nil && !strings.HasPrefix(string(b), "nodeflow-agent\n") {
					out = append(out, fmt.Sprintf("node %s: address %s allocated", m.Name, f))
				}
			}
		}
	}
	for _, n := range podNetns(e) {
		out = append(out, "pod namespace "+n)
	}
	return out
}

// hostVeth matches a CNI host veth in `ip -o link` output.
var hostVeth = regexp.MustCompile(`: nf[0-9a-f]{13}[@:]`)

// podNetns lists the testbed's pod network namespaces.
func podNetns(e *env) []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), e.state.NetnsPrefix+"pod-") {
			out = append(out, en.Name())
		}
	}
	return out
}

// checkServer asks the pod's test server for its name, from inside the pod.
func checkServer(t *testing.T, netns, ip, pod string) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nsutil.Dial(ctx, netns, network, addr, 5*time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + net.JoinHostPort(ip, "8080") + "/")
	if err != nil {
		t.Errorf("GET from inside %s: %v", pod, err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	name, client, _, err := workload.ParseReply(string(b))
	if err != nil || name != pod {
		t.Errorf("server in %s answered %q (%v)", pod, b, err)
	}
	if host, _, _ := net.SplitHostPort(client); host != ip {
		t.Errorf("server in %s saw client %s, want %s", pod, client, ip)
	}
}

func createNamespace(t testing.TB, e *env, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := e.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Pods need the namespace's default service account.
	eventually(t, 30*time.Second, "service account "+name+"/default", func(ctx context.Context) error {
		_, err := e.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	return name
}

func TestHostNetworkPod(t *testing.T) {
	e := up(t)
	ctx := context.Background()
	ns := createNamespace(t, e, "e2e-hostnet")
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnet", Namespace: ns},
		Spec: v1.PodSpec{
			NodeName:                      "node2",
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []v1.Container{{
				Name: "srv", Image: "testbed/srv",
				Ports:          []v1.ContainerPort{{ContainerPort: 9090, HostPort: 9090}},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(9090)}}, PeriodSeconds: 1},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *v1.Pod
	eventually(t, 60*time.Second, "hostNetwork pod Ready", func(ctx context.Context) error {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, "hostnet", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ready(p.Status.Conditions) {
			return fmt.Errorf("not Ready: %+v", p.Status.Conditions)
		}
		got = p
		return nil
	})
	m, _ := e.state.Member("node2")
	var ips []string
	for _, ip := range got.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if strings.Join(ips, ",") != strings.Join(m.Addresses, ",") {
		t.Errorf("hostNetwork pod IPs %v, want the node IPs %v", ips, m.Addresses)
	}
	for _, p := range cniPorts(t, m) {
		if p.ExternalIDs[cni.ExternalIDPodName] == "hostnet" {
			t.Errorf("hostNetwork pod got a CNI port %s", p.Name)
		}
	}
	// It serves in the node's namespace, on the node IP.
	checkServerPort(t, m.Netns, m.Addresses[0], "9090", "hostnet")
	// `testbed exec NS/POD` resolves a hostNetwork pod to the node. The node
	// IP sits on eth0, or on breth0 once the agent has moved it there.
	if out, err := testbedCmd(t, e, "exec", ns+"/hostnet", "--", "ip", "-o", "addr", "show"); err != nil || !strings.Contains(out, m.Addresses[0]) {
		t.Errorf("exec into the hostNetwork pod: %v\n%s", err, out)
	}
	if err := e.client.CoreV1().Pods(ns).Delete(ctx, "hostnet", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hostNetwork pod gone", func(ctx context.Context) error {
		_, err := e.client.CoreV1().Pods(ns).Get(ctx, "hostnet", metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
}

func checkServerPort(t *testing.T, netns, ip, port, pod string) {
	t.Helper()
	c, err := nsutil.Dial(context.Background(), netns, "tcp", net.JoinHostPort(ip, port), 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s:%s in %s: %v", ip, port, netns, err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "pod="+pod+" ") {
		t.Errorf("server on %s:%s answered %q", ip, port, b)
	}
}

func TestStatusAndExec(t *testing.T) {
	e := up(t)
	out, err := testbedCmd(t, e, "status")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("status printed %d lines, want one per member (4):\n%s", len(lines), out)
	}
	byName := map[string][]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("status line %q: want 5 columns", l)
		}
		byName[f[0]] = f
	}
	n1 := byName["node1"]
	if n1 == nil || n1[1] != "k8s-node" || n1[2] != e.state.NetnsPrefix+"node1" || n1[3] != "172.30.0.11,fd00:172:30::11" || !strings.HasPrefix(n1[4], "/") {
		t.Errorf("node1 status %v", n1)
	}
	if x := byName["ext1"]; x == nil || x[1] != "host" || x[4] != "-" {
		t.Errorf("ext1 status %v", x)
	}
	// In a node, plain OVS tools reach that node's OVS.
	if out, err := testbedCmd(t, e, "exec", "node1", "--", "ovs-vsctl", "get", "Open_vSwitch", ".", "external_ids"); err != nil {
		t.Errorf("exec ovs-vsctl in node1: %v\n%s", err, out)
	}
	// The external host has its address and a default route on the fabric.
	out, err = testbedCmd(t, e, "exec", "ext1", "--", "ip", "route", "show", "default")
	if err != nil || !strings.Contains(out, "via 172.30.0.1 dev eth0") {
		t.Errorf("ext1 default route: %v\n%s", err, out)
	}
	// Node to external host over the fabric, both families.
	for _, dst := range []string{"172.30.0.100", "fd00:172:30::100"} {
		if out, err := testbedCmd(t, e, "exec", "node1", "--", "ping", "-c", "1", "-W", "5", dst); err != nil {
			t.Errorf("ping %s from node1: %v\n%s", dst, err, out)
		}
	}
	// TX checksum offload is off on the fabric veths.
	if out, err := testbedCmd(t, e, "exec", "node2", "--", "ethtool", "-k", "eth0"); err != nil || !strings.Contains(out, "tx-checksumming: off") {
		t.Errorf("node2 eth0 offload: %v\n%s", err, out)
	}
	if out, err := testbedCmd(t, e, "exec", "nosuch", "--", "true"); err == nil || !strings.Contains(out, "no member") {
		t.Errorf("exec into a missing member: %v\n%s", err, out)
	}
	if out, err := testbedCmd(t, e, "kubectl", "get", "nodes", "-o", "name"); err != nil || !strings.Contains(out, "node/node1") {
		t.Errorf("testbed kubectl: %v\n%s", err, out)
	}
	if out, err := testbedCmd(t, e, "logs", "node1"); err != nil || !strings.Contains(out, "node registered") {
		t.Errorf("testbed logs node1: %v\n%.2000s", err, out)
	}
}
