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
