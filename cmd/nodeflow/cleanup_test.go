package main

import (
	"testing"

	"github.com/urfave/cli/v2"
)

// cleanup takes every flag of the agent, so that it reads the agent's
// --config file, and shows only those it uses.
func TestCleanupTakesTheAgentsFlags(t *testing.T) {
	have := map[string]cli.Flag{}
	for _, f := range cleanupCommand().Flags {
		have[f.Names()[0]] = f
	}
	for _, f := range agentCommand().Flags {
		name := f.Names()[0]
		cf, ok := have[name]
		if !ok {
			t.Errorf("cleanup lacks the agent's --%s", name)
			continue
		}
		if vf, ok := cf.(cli.VisibleFlag); ok && vf.IsVisible() != cleanupFlags[name] {
			t.Errorf("--%s visible %v, want %v", name, vf.IsVisible(), cleanupFlags[name])
		}
	}
	for name := range cleanupFlags {
		if _, ok := have[name]; !ok {
			t.Errorf("cleanup uses --%s, which the agent does not have", name)
		}
	}
}

// The agent's configuration file sets cleanup's flags; the command line wins.
func TestCleanupConfigFile(t *testing.T) {
	got := map[string]string{}
	config := "apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\nuplink: ethfile\npodBridge: brfile\n" +
		"mtu: 1450\nunidleHoldTime: 10s\nclusterCIDRs: [10.0.0.0/16]\n"
	runWithConfigFile(t, cleanupCommand(), config, func(c *cli.Context) error {
		for _, f := range []string{"uplink", "pod-bridge", "gateway-bridge"} {
			got[f] = c.String(f)
		}
		return nil
	}, "--pod-bridge", "brflag")
	want := map[string]string{"uplink": "ethfile", "pod-bridge": "brflag", "gateway-bridge": "breth0"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("--%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestAgentPaths(t *testing.T) {
	for _, c := range []struct {
		rundir, socket, conf, data string
		wantSocket, wantData       string
	}{
		{"/var/run/openvswitch", "", "", "", "/run/nodeflow/nodeflow.sock", "/var/lib/cni/networks"},
		{"/run/openvswitch", "", "/etc/cni/net.d", "", "/run/nodeflow/nodeflow.sock", "/var/lib/cni/networks"},
		{"/tmp/ovs", "", "/tmp/node/net.d", "", "/tmp/ovs/nodeflow.sock", "/tmp/node/ipam"},
		{"/tmp/ovs", "none", "/tmp/node/net.d", "/data", "", "/data"},
		{"/tmp/ovs", "/x.sock", "", "", "/x.sock", "/var/lib/cni/networks"},
	} {
		s, d := agentPaths(c.rundir, c.socket, c.conf, c.data)
		if s != c.wantSocket || d != c.wantData {
			t.Errorf("agentPaths(%q, %q, %q, %q) = %q, %q; want %q, %q", c.rundir, c.socket, c.conf, c.data, s, d, c.wantSocket, c.wantData)
		}
	}
}
