package ovs_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

func TestSandboxLifecycle(t *testing.T) {
	ovstest.Require(t)
	a, err := ovs.Start(context.Background(), ovs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ovs.Start(context.Background(), ovs.Options{})
	if err != nil {
		a.Stop()
		t.Fatal(err)
	}
	// Two sandboxes at once, each with its own netdev br0.
	for _, sb := range []*ovs.Sandbox{a, b} {
		if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"); err != nil {
			t.Fatal(err)
		}
		out, err := sb.Ofctl("-O", "OpenFlow13", "dump-flows", "br0")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "actions=NORMAL") {
			t.Fatalf("dump-flows through %s: %q", sb.MgmtSock("br0"), out)
		}
	}
	pid := a.VswitchdPid()
	if err := a.RestartVswitchd(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.VswitchdPid() == pid || a.VswitchdPid() == 0 {
		t.Fatalf("restart kept pid %d", pid)
	}
	dirs := []string{a.Dir, b.Dir}
	nss := []string{a.Netns, b.Netns}
	for _, sb := range []*ovs.Sandbox{a, b} {
		if err := sb.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("sandbox dir %s left behind", d)
		}
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, ns := range nss {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
	if err := exec.Command("kill", "-0", strconv.Itoa(pid)).Run(); err == nil {
		t.Errorf("ovs-vswitchd pid %d still running", pid)
	}
}

// A sandbox left behind by a killed test process (its namespace and its
// directory) is removed by the next sandbox's Start.
func TestSandboxReapsLeftovers(t *testing.T) {
	ovstest.Require(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid := dead.Process.Pid
	ns := "nfovs-" + strconv.Itoa(pid) + "-1"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	dir, err := os.MkdirTemp("/tmp", "nfovs-"+strconv.Itoa(pid)+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	ovstest.New(t, ovs.Options{})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("leftover directory %s still there", dir)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), ns+" ") || strings.Contains(string(out), ns+"\n") {
		t.Errorf("leftover namespace %s still there", ns)
	}
}
