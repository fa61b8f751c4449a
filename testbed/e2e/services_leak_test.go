package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/model/service"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// TestServiceLeak checks that nothing addressed to a service CIDR leaves
// a node: from a pod and from a node's host, IPv4 and IPv6, a ClusterIP on
// a port no Service serves is refused at once (TCP RST, ICMP unreachable
// for UDP), an address no Service holds is dropped (the connection times
// out), and an idled Service's port is held back (dropped, not refused).
// Meanwhile the fabric, where anything routed out of a node's uplink
// goes, sees no packet for the service CIDRs.
func TestServiceLeak(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-leak")
	pods := deployPods(t, e, ns, "leak", 2)
	web := createService(t, e, ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "leak"}, IPFamilyPolicy: ptrPolicy(v1.IPFamilyPolicyRequireDualStack),
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	})
	idled := createService(t, e, ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "idled", Annotations: map[string]string{service.IdledAtAnnotation: time.Now().UTC().Format(time.RFC3339)}},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "nothing"}, IPFamilyPolicy: ptrPolicy(v1.IPFamilyPolicyRequireDualStack),
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	})
	cip := map[bool]netip.Addr{}
	idle := map[bool]netip.Addr{}
	for _, s := range web.Spec.ClusterIPs {
		a := netip.MustParseAddr(s)
		cip[a.Is6()] = a
	}
	for _, s := range idled.Spec.ClusterIPs {
		a := netip.MustParseAddr(s)
		idle[a.Is6()] = a
	}
	free := map[bool]netip.Addr{false: unusedServiceAddr(t, e, "10.96.250.1"), true: unusedServiceAddr(t, e, "fd00:10:96::fa01")}

	// The served port works from both: the guards leave it alone.
	node, _ := e.state.Member(pods[0].node)
	for _, v6 := range []bool{false, true} {
		eventually(t, 30*time.Second, "served port of "+cip[v6].String(), func(ctx context.Context) error {
			_, _, err := httpGet(ctx, pods[0].netns, cip[v6], 80)
			return err
		})
	}

	capture := startCapture(t, e)
	clients := []struct{ name, netns string }{{"pod " + pods[0].name, pods[0].netns}, {"host of " + node.Name, node.Netns}}
	for _, c := range clients {
		for _, v6 := range []bool{false, true} {
			fam := family(v6)
			t.Run(c.name+"/"+fam+"/unserved-port-refused", func(t *testing.T) {
				start := time.Now()
				err := tcpConnect(c.netns, cip[v6], 81, 3*time.Second)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("TCP to %s:81 (no Service serves it): %v, want connection refused", cip[v6], err)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("refused after %s, want at once", d)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				if _, _, err := udpEcho(ctx, c.netns, cip[v6], 81); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("UDP to %s:81: %v, want connection refused (ICMP unreachable)", cip[v6], err)
				}
			})
			t.Run(c.name+"/"+fam+"/unallocated-dropped", func(t *testing.T) {
				if err := tcpConnect(c.netns, free[v6], 80, 1500*time.Millisecond); !isTimeout(err) {
					t.Fatalf("TCP to %s (no Service holds it): %v, want a timeout (dropped)", free[v6], err)
				}
			})
			t.Run(c.name+"/"+fam+"/idled-held-back", func(t *testing.T) {
				if err := tcpConnect(c.netns, idle[v6], 80, 1500*time.Millisecond); !isTimeout(err) {
					t.Fatalf("TCP to idled %s:80: %v, want a timeout (held back, not refused)", idle[v6], err)
				}
			})
		}
	}

	n := capture.stop(t)
	if n != 0 {
		t.Errorf("the fabric saw %d packets for the service CIDRs (nothing may leave a node):\n%s", n, capture.text)
	}
	// The drops were counted on br0.
	for _, m := range []string{pods[0].node} {
		mem, _ := e.state.Member(m)
		if got := sumFlowPackets(t, mem, "br0", "table=30", "priority=110,"); got == 0 {
			t.Errorf("%s: br0's service CIDR drop flows counted nothing", m)
		}
	}
}

func ptrPolicy(p v1.IPFamilyPolicy) *v1.IPFamilyPolicy { return &p }

// unusedServiceAddr returns an address of the service CIDR, from start
// upwards, that no Service holds.
func unusedServiceAddr(t *testing.T, e *env, start string) netip.Addr {
	t.Helper()
	list, err := e.client.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[netip.Addr]bool{}
	for _, s := range list.Items {
		for _, ip := range s.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				used[a] = true
			}
		}
	}
	a := netip.MustParseAddr(start)
	for used[a] {
		a = a.Next()
	}
	return a
}

// tcpConnect connects from inside netns and closes at once.
func tcpConnect(netns string, dst netip.Addr, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := nsutil.Dial(ctx, netns, "tcp", netip.AddrPortFrom(dst, uint16(port)).String(), timeout)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	var te interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &te) && te.Timeout()) || strings.Contains(err.Error(), "timeout")
}

// fabricCapture is a tcpdump on the fabric (where a node's uplink sends
// what it routes out) of packets addressed to the service CIDRs.
type fabricCapture struct {
	cmd  *exec.Cmd
	file string
	log  bytes.Buffer
	text string
}

func startCapture(t *testing.T, e *env) *fabricCapture {
	t.Helper()
	var fabric string
	for _, m := range e.state.Members {
		if m.Kind == "bridge" {
			fabric = m.Netns
		}
	}
	if fabric == "" {
		t.Fatal("no fabric in the topology")
	}
	c := &fabricCapture{file: filepath.Join(t.TempDir(), "fabric.pcap")}
	c.cmd = exec.Command("ip", "netns", "exec", fabric, "tcpdump", "-i", "any", "-nn", "-U", "-w", c.file,
		"dst net 10.96.0.0/16 or dst net fd00:10:96::/112")
	c.cmd.Stderr = &c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	eventually(t, 10*time.Second, "tcpdump listening on the fabric", func(context.Context) error {
		if !strings.Contains(c.log.String(), "listening on") {
			return fmt.Errorf("tcpdump: %q", c.log.String())
		}
		return nil
	})
	return c
}

// stop ends the capture and returns how many packets it caught.
func (c *fabricCapture) stop(t *testing.T) int {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	_ = c.cmd.Wait()
	out, err := exec.Command("tcpdump", "-nn", "-r", c.file).Output()
	if err != nil {
		if st, serr := os.Stat(c.file); serr == nil && st.Size() <= 24 {
			return 0
		}
		t.Fatalf("tcpdump -r: %v", err)
	}
	c.text = string(out)
	return strings.Count(c.text, "\n")
}

// sumFlowPackets sums n_packets of bridge's flows that match filter and
// whose line contains part.
func sumFlowPackets(t *testing.T, m *testbed.Member, bridge, filter, part string) int {
	t.Helper()
	sum := 0
	for _, l := range flowLines(t, m, bridge, filter) {
		if n := packetsOf(l); n >= 0 && strings.Contains(l, part) {
			sum += n
		}
	}
	return sum
}
