package nodeflows

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// TestRouterNDAnswer sends a real neighbour solicitation for the router
// from a pod's namespace through br0 on a sandboxed ovs-vswitchd: br0
// answers it (RouterNDFlows), and the pod's kernel takes the router's MAC
// from the advertisement, as a router's (no host, no proxy NDP, behind the
// port). A solicitation from :: (duplicate address detection) is not
// answered.
func TestRouterNDAnswer(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	for _, tool := range []string{"ip", "ping", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	pod := fmt.Sprintf("nfnd%d", os.Getpid())
	sh := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sh("ip", "netns", "add", pod)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", pod).Run() })
	sh("ip", "-n", sb.Netns, "link", "add", "h0", "type", "veth", "peer", "name", "eth0", "netns", pod)
	sh("ip", "netns", "exec", sb.Netns, "ethtool", "-K", "h0", "tx", "off")
	sh("ip", "netns", "exec", pod, "ethtool", "-K", "eth0", "tx", "off")
	sh("ip", "-n", sb.Netns, "link", "set", "h0", "up")
	sh("ip", "-n", pod, "link", "set", "eth0", "up")
	sh("ip", "-n", pod, "addr", "add", "fd00:10:244::5/64", "dev", "eth0", "nodad")
	sh("ip", "-n", pod, "-6", "route", "add", "default", "via", "fd00:10:244::1")
	if _, err := sb.Vsctl("add-port", "br0", "h0", "--", "set", "interface", "h0", "ofport_request=5"); err != nil {
		t.Fatal(err)
	}

	router, subnet := netip.MustParseAddr("fd00:10:244::1"), netip.MustParsePrefix("fd00:10:244::/64")
	mac, _ := net.ParseMAC("0a:58:0a:f4:00:01")
	fs := RouterNDFlows(router, mac, subnet)
	fs = append(fs,
		flow(plan.PodClassifier, plan.PriorityNormal, then(nil, plan.PodARP), fam6.eth(), openflow.IPProto(58), openflow.InPort(5), openflow.ICMPv6Type(135)),
		flow(plan.PodARP, plan.PriorityMiss, apply()),
	)
	flowtest.InstallAndCompare(t, sb, "br0", fs)

	// The kernel solicits the router to send the echo request; the echo
	// request itself goes nowhere.
	var neigh string
	deadline := time.Now().Add(10 * time.Second)
	for {
		_ = exec.Command("ip", "netns", "exec", pod, "ping", "-6", "-c", "1", "-W", "1", "fd00:99::1").Run()
		neigh = sh("ip", "-n", pod, "-6", "neigh", "show", "fd00:10:244::1")
		if strings.Contains(neigh, "lladdr") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(neigh, "lladdr 0a:58:0a:f4:00:01 router") {
		dump, _ := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0")
		t.Fatalf("the pod's neighbour entry for the router: %q, want lladdr 0a:58:0a:f4:00:01 router\n%s", neigh, dump)
	}
	dump, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0", "table=5")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "priority=300") && strings.Contains(l, "n_packets=0,") && !strings.Contains(l, "fe80::/10") && !strings.Contains(l, "fd00:10:244::/64") {
			t.Errorf("the advertisement's flow counted nothing: %s", l)
		}
	}
	// Duplicate address detection of the router's address: no answer.
	trace, err := sb.Appctl("ofproto/trace", "br0", "in_port=5,icmp6,ipv6_src=::,ipv6_dst=ff02::1:ff00:1,icmpv6_type=135,icmpv6_code=0,nd_target=fd00:10:244::1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(trace, "IN_PORT") || !strings.Contains(trace, "Datapath actions: drop") {
		t.Errorf("a solicitation from :: was answered:\n%s", trace)
	}
}
