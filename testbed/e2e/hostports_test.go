package e2e

import (
	"context"
	"fmt"
	"nodeflow/testbed"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestHostPorts runs a pod on node1 whose TCP and UDP container ports have
// hostPorts on every node address, and another pod's port on node1's IPv4
// address only, and reaches them as users do: from the external host
// through the uplink, from the other node's host, from a pod on the other
// node, from node1's own host (its node IP, and 127.0.0.1 from the node IP
// as the upstream HostPort test does), in both families. Deleting the pod
// takes its flows and its host rules away.
func TestHostPorts(t *testing.T) {
	e := up(t)
	requireTool(t, "agnhost", testbed.DefaultAgnhost())
	ctx := context.Background()
	ns := createNamespace(t, e, "e2e-hostports")
	node1, _ := e.state.Member("node1")
	v4, v6 := node1.Addresses[0], node1.Addresses[1]
	mk := func(name, node string, args []string, ports []v1.ContainerPort) {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.PodSpec{
				NodeName: node, TerminationGracePeriodSeconds: ptr.To(int64(1)),
				Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Args: args, Ports: ports}},
			},
		}
		if _, err := e.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("web", "node1", []string{"netexec", "--http-port=8080", "--udp-port=8081"}, []v1.ContainerPort{
		{ContainerPort: 8080, HostPort: 54321},
		{ContainerPort: 8081, HostPort: 54321, Protocol: v1.ProtocolUDP},
	})
	mk("only4", "node1", []string{"netexec", "--http-port=8080", "--udp-port=8081"}, []v1.ContainerPort{
		{ContainerPort: 8080, HostPort: 54322, HostIP: v4},
	})
	mk("client", "node2", []string{"pause"}, nil)
	for _, name := range []string{"web", "only4", "client"} {
		eventually(t, 60*time.Second, name+" Ready", func(ctx context.Context) error {
			p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !ready(p.Status.Conditions) {
				return fmt.Errorf("not Ready")
			}
			return nil
		})
	}
	url := func(ip string, port int) string {
		if strings.Contains(ip, ":") {
			ip = "[" + ip + "]"
		}
		return fmt.Sprintf("http://%s:%d/hostname", ip, port)
	}
	// Each source asks for the pod's hostname; the agent may still be
	// programming the flows when the pod turns Ready.
	check := func(what, want string, args ...string) {
		t.Helper()
		eventually(t, 20*time.Second, what, func(context.Context) error {
			out, err := testbedCmd(t, e, append([]string{"exec"}, args...)...)
			if err != nil || strings.TrimSpace(out) != want {
				return fmt.Errorf("%v: %q", err, out)
			}
			return nil
		})
	}
	for _, ip := range []string{v4, v6} {
		check("ext1 to "+ip, "web", "ext1", "--", "curl", "-s", "-m", "3", url(ip, 54321))
		check("node2 to "+ip, "web", "node2", "--", "curl", "-s", "-m", "3", url(ip, 54321))
		check("node1 to itself at "+ip, "web", "node1", "--", "curl", "-s", "-m", "3", url(ip, 54321))
		check("a pod on node2 to "+ip, "web", ns+"/client", "--", "curl", "-s", "-m", "3", url(ip, 54321))
		check("UDP from ext1 to "+ip, "web", "ext1", "--", "sh", "-c", "echo hostname | nc -u -w 2 "+ip+" 54321")
	}
	check("node1 to 127.0.0.1 from its node IP", "web", "node1", "--", "curl", "-s", "-m", "3", "--interface", v4, url("127.0.0.1", 54321))
	check("ext1 to the hostIP's port", "only4", "ext1", "--", "curl", "-s", "-m", "3", url(v4, 54322))
	check("node1 to the hostIP's port", "only4", "node1", "--", "curl", "-s", "-m", "3", url(v4, 54322))
	// A hostIP holds the port on that address only.
	if out, err := testbedCmd(t, e, "exec", "ext1", "--", "curl", "-s", "-m", "2", url(v6, 54322)); err == nil {
		t.Errorf("the IPv4 hostIP's port answers on %s: %q", v6, out)
	}

	// Deleted, the pod takes its flows and host rules along.
	if err := e.client.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "web's hostPort flows and host rules gone", func(context.Context) error {
		for _, br := range []string{"br0", "breth0"} {
			out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "unix:"+filepath.Join(node1.OVSRundir, br+".mgmt")).CombinedOutput()
			if err != nil {
				return fmt.Errorf("dump-flows %s: %v: %s", br, err, out)
			}
			if strings.Contains(string(out), "=54321") {
				return fmt.Errorf("%s still has flows for 54321", br)
			}
		}
		out, err := testbedCmd(t, e, "exec", "node1", "--", "nft", "list", "table", "ip", "nodeflow-hostports")
		if err != nil {
			return fmt.Errorf("nft: %v: %s", err, out)
		}
		if strings.Contains(out, "54321") || !strings.Contains(out, "54322") {
			return fmt.Errorf("host rules:\n%s", out)
		}
		return nil
	})
}
