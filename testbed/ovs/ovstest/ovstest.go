// Package ovstest gives tests a private Open vSwitch with one call.
//
// New skips the test when the machine lacks what a sandbox needs (root, the
// OVS binaries, network namespaces) and says why. When the environment
// variable NODEFLOW_REQUIRE_OVS is set, as `make test` and CI set it, a missing
// prerequisite fails the test instead, so that integration tests never pass
// by silently not running.
package ovstest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"nodeflow/testbed/ovs"
)

// Require skips or fails t when a sandbox cannot run here.
func Require(t testing.TB) {
	t.Helper()
	reason := ""
	switch {
	case os.Geteuid() != 0:
		reason = "needs root for network namespaces"
	case ovs.Check() != nil:
		reason = ovs.Check().Error()
	default:
		if _, err := exec.LookPath("ip"); err != nil {
			reason = "needs ip from iproute2 (run `make deps`)"
		}
	}
	if reason == "" {
		return
	}
	if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
		t.Fatalf("OVS sandbox unavailable and NODEFLOW_REQUIRE_OVS is set: %s", reason)
	}
	t.Skipf("OVS sandbox unavailable: %s", reason)
}

// New starts a sandbox for t and stops it when t ends.
func New(t testing.TB, opts ovs.Options) *ovs.Sandbox {
	t.Helper()
	Require(t)
	sb, err := ovs.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start OVS sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Stop(); err != nil {
			t.Errorf("stop OVS sandbox: %v", err)
		}
	})
	return sb
}

// AddBridge adds bridge name to sb as nodeflow's tests want it: the
// userspace datapath, OpenFlow 1.3 and 1.5, and secure fail mode (no flows
// of its own). extra are more ovs-vsctl arguments for the same call, such
// as "--", "add-port", ....
func AddBridge(t testing.TB, sb *ovs.Sandbox, name string, extra ...string) {
	t.Helper()
	args := []string{"add-br", name, "--", "set", "bridge", name, "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"}
	if _, err := sb.Vsctl(append(args, extra...)...); err != nil {
		t.Fatalf("add bridge %s: %v", name, err)
	}
}

// AddDummyBridge adds bridge name to sb on the dummy datapath (a sandbox
// started with ovs.Options.Dummy), with OpenFlow 1.3 and 1.5 and secure
// fail mode, and a dummy port "p<N>" at OpenFlow port N for each of ports.
func AddDummyBridge(t testing.TB, sb *ovs.Sandbox, name string, ports ...int) {
	t.Helper()
	args := []string{"add-br", name, "--", "set", "bridge", name, "datapath_type=dummy",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"}
	for _, p := range ports {
		args = append(args, "--", "add-port", name, fmt.Sprintf("p%d", p),
			"--", "set", "interface", fmt.Sprintf("p%d", p), "type=dummy", fmt.Sprintf("ofport_request=%d", p))
	}
	if _, err := sb.Vsctl(args...); err != nil {
		t.Fatalf("add bridge %s: %v", name, err)
	}
}
