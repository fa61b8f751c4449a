package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"nodeflow/agent/config"
	"nodeflow/agent/features"
	"nodeflow/agent/features/egressfirewallfeature"
)

// Every field of the configuration file sets a flag the agent has: the
// agent's own fields and the features'.
func TestConfigFileFlagsExist(t *testing.T) {
	flags := map[string]bool{}
	for _, f := range agentCommand().Flags {
		for _, n := range f.Names() {
			flags[n] = true
		}
	}
	s := "x"
	mtu := 1400
	qps := 50.0
	c := config.AgentConfiguration{Kubeconfig: &s, NodeName: &s, OVSRundir: &s, PodBridge: &s, GatewayBridge: &s, Uplink: &s,
		DatapathType: &s, ClusterCIDRs: []string{s}, ServiceCIDRs: []string{s}, MasqueradeSubnetV4: &s, MasqueradeSubnetV6: &s, MTU: &mtu,
		HealthAddr: &s, Socket: &s, CNIConfDir: &s, CNIDataDir: &s, HostCheckInterval: &s, KubeAPIQPS: &qps, KubeAPIBurst: &mtu}
	settings := c.Settings()
	if len(settings) != 19 {
		t.Errorf("%d settings from a file with these fields, want 19", len(settings))
	}
	var walk func(prefix string, fs []config.Field)
	walk = func(prefix string, fs []config.Field) {
		for _, f := range fs {
			if f.Type == config.Object {
				walk(prefix+f.Name+".", f.Fields)
				continue
			}
			settings = append(settings, config.Setting{Flag: f.Flag, Field: prefix + f.Name})
		}
	}
	walk("", features.FileFields())
	if len(settings) != 19+16 {
		t.Errorf("%d fields, want the agent's 19 and the features' 16", len(settings))
	}
	for _, st := range settings {
		if !flags[st.Flag] {
			t.Errorf("field %s sets --%s, which the agent does not have", st.Field, st.Flag)
		}
	}
}

// The file sets what the command line and the environment leave; they win.
func TestConfigFilePrecedence(t *testing.T) {
	t.Setenv("NODEFLOW_UPLINK", "ethenv")
	got := map[string]string{}
	config := "apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\nmtu: 1450\npodBridge: brfile\n" +
		"uplink: ethfile\nserviceCIDRs: [10.1.0.0/16, \"fd00:1::/112\"]\nclusterDNSServices: []\ntrustedDNS: [169.254.20.10]\n"
	runWithConfigFile(t, agentCommand(), config, func(c *cli.Context) error {
		for _, f := range []string{"pod-bridge", "uplink", "gateway-bridge"} {
			got[f] = c.String(f)
		}
		got["mtu"] = strconv.Itoa(c.Int("mtu"))
		got["service-cidr"] = strings.Join(c.StringSlice("service-cidr"), ",")
		svcs, err := egressfirewallfeature.ParseClusterDNSServices(c.StringSlice("cluster-dns-service"))
		if err != nil {
			return err
		}
		got["cluster-dns-service"] = fmt.Sprint(svcs)
		got["trusted-dns"] = strings.Join(c.StringSlice("trusted-dns"), ",")
		return nil
	}, "--pod-bridge", "brflag")
	for flag, want := range map[string]string{
		"mtu": "1450", "pod-bridge": "brflag", "uplink": "ethenv", "gateway-bridge": "breth0", "service-cidr": "10.1.0.0/16,fd00:1::/112",
		// An empty list in the file replaces the default: no cluster DNS
		// Service is trusted.
		"cluster-dns-service": "[]", "trusted-dns": "169.254.20.10",
	} {
		if got[flag] != want {
			t.Errorf("--%s = %q, want %q", flag, got[flag], want)
		}
	}
}

// A bad file stops the agent with the file and the field named.
func TestConfigFileBad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: nodeflow.io/v1alpha1\nkind: AgentConfiguration\nmtus: 1450\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := agentCommand()
	cmd.Action = func(c *cli.Context) error { return applyConfigFile(c) }
	app := &cli.App{Commands: []*cli.Command{cmd}}
	err := app.Run([]string{"nodeflow", "agent", "--config", p})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `unknown field "mtus"`) {
		t.Errorf("%v, want the file and the unknown field named", err)
	}
}

// The version line names the stamped version and commit.
func TestVersionLine(t *testing.T) {
	v, c := version, commit
	t.Cleanup(func() { version, commit = v, c })
	version, commit = "v1.2.3", "0123abcd"
	if got := versionLine(); !strings.HasPrefix(got, "nodeflow v1.2.3 (commit 0123abcd") || !strings.Contains(got, "go1") {
		t.Errorf("version line %q", got)
	}
}

// install-cni puts an executable copy of a file in place, replacing what
// was there, and leaves no temporary file behind.
func TestInstallFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("new plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(bin, "nodeflow")
	if err := os.WriteFile(dst, []byte("old plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := installFile(src, dst); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	fi, _ := os.Stat(dst)
	if err != nil || string(b) != "new plugin" || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed %q mode %v, %v", b, fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(bin); len(ents) != 1 {
		t.Errorf("%d files in the bin directory, want 1", len(ents))
	}
}

// runWithConfigFile writes config to a file and runs cmd with --config
// naming it, then args; cmd's action reads the configuration file, as the
// commands do, then calls read.
func runWithConfigFile(t *testing.T, cmd *cli.Command, config string, read func(c *cli.Context) error, args ...string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Action = func(c *cli.Context) error {
		if err := applyConfigFile(c); err != nil {
			return err
		}
		return read(c)
	}
	app := &cli.App{Commands: []*cli.Command{cmd}}
	if err := app.Run(append([]string{"nodeflow", cmd.Name, "--config", p}, args...)); err != nil {
		t.Fatal(err)
	}
}
