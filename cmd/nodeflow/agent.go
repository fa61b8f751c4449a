package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/agent"
	"nodeflow/agent/config"
	"nodeflow/agent/features"
	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/lib/memlimit"
)

func init() {
	commands = append(commands, agentCommand())
}

// agentCommand is `nodeflow agent`: the node agent.
func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the node agent: own br0 and breth0, configure the host side, keep the flows",
		// The agent's own flags, then each feature's, in the list's order.
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", EnvVars: []string{"NODEFLOW_CONFIG"},
				Usage: "read the settings from `FILE`, an " + config.Kind + " (" + config.APIVersion + "); flags and their environment variables win over it"},
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "kubeconfig `PATH` (default: in-cluster)"},
			&cli.StringFlag{Name: "node-name", EnvVars: []string{"NODEFLOW_NODE_NAME", "NODE_NAME"}, Usage: "this node's name (default: the hostname)"},
			&cli.StringFlag{Name: "ovs-rundir", Value: "/var/run/openvswitch", EnvVars: []string{"NODEFLOW_OVS_RUNDIR", "OVS_RUNDIR"}, Usage: "`DIR` of db.sock and the bridges' .mgmt sockets"},
			&cli.StringFlag{Name: "pod-bridge", Value: "br0", EnvVars: []string{"NODEFLOW_POD_BRIDGE"}, Usage: "the pod bridge"},
			&cli.StringFlag{Name: "gateway-bridge", Value: "breth0", EnvVars: []string{"NODEFLOW_GATEWAY_BRIDGE"}, Usage: "the shared gateway bridge"},
			&cli.StringFlag{Name: "uplink", Value: "eth0", EnvVars: []string{"NODEFLOW_UPLINK"}, Usage: "the node's uplink interface, moved into the gateway bridge"},
			&cli.StringFlag{Name: "datapath-type", Value: "auto", EnvVars: []string{"NODEFLOW_DATAPATH_TYPE"},
				Usage: "system, netdev, or auto: system when the kernel has the openvswitch module, else netdev"},
			&cli.StringSliceFlag{Name: "cluster-cidr", Value: cli.NewStringSlice("10.244.0.0/16", "fd00:10:244::/56"), EnvVars: []string{"NODEFLOW_CLUSTER_CIDRS"}, Usage: "pod networks, one per family"},
			&cli.StringSliceFlag{Name: "service-cidr", Value: cli.NewStringSlice("10.96.0.0/16", "fd00:10:96::/112"), EnvVars: []string{"NODEFLOW_SERVICE_CIDRS"}, Usage: "service networks, one per family"},
			&cli.StringFlag{Name: "masquerade-subnet-v4", Value: conntrack.DefaultMasqueradeV4.String(), EnvVars: []string{"NODEFLOW_MASQUERADE_SUBNET_V4"}, Usage: "IPv4 masquerade subnet"},
			&cli.StringFlag{Name: "masquerade-subnet-v6", Value: conntrack.DefaultMasqueradeV6.String(), EnvVars: []string{"NODEFLOW_MASQUERADE_SUBNET_V6"}, Usage: "IPv6 masquerade subnet"},
			&cli.IntFlag{Name: "mtu", Value: 1400, EnvVars: []string{"NODEFLOW_MTU"}, Usage: "MTU of the pod network"},
			&cli.IntFlag{Name: "gc-percent", Value: memlimit.DefaultGCPercent, EnvVars: []string{"NODEFLOW_GC_PERCENT"},
				Usage: "the Go garbage collector's target when GOGC is not set: heap growth between collections, in % of the live heap (Go's default is 100; lower keeps less memory resident for more CPU; 0 keeps Go's); half of it until both bridges are first reconciled"},
			&cli.IntFlag{Name: "gc-startup-floor", Value: memlimit.DefaultStartupFloorMiB, EnvVars: []string{"NODEFLOW_GC_STARTUP_FLOOR"},
				Usage: "`MiB` of Go memory the start-up may use before the collector first runs; above it the collector runs at half --gc-percent (0: from the start; GOGC set: no floor)"},
			&cli.StringFlag{Name: "health-addr", Value: "127.0.0.1:9476", EnvVars: []string{"NODEFLOW_HEALTH_ADDR"}, Usage: "`ADDR` of /healthz, /readyz and /metrics (empty disables)"},
			&cli.StringFlag{Name: "socket", EnvVars: []string{"NODEFLOW_SOCKET"},
				Usage: "introspection socket `PATH` for `nodeflow flows` (default: " + reconcile.DefaultSocket + ", or nodeflow.sock in a non-default --ovs-rundir; \"none\" disables)"},
			&cli.StringFlag{Name: "cni-conf-dir", EnvVars: []string{"NODEFLOW_CNI_CONF_DIR"}, Usage: "`DIR` to write the pod network's CNI configuration to (empty: none)"},
			&cli.StringFlag{Name: "cni-data-dir", EnvVars: []string{"NODEFLOW_CNI_DATA_DIR"},
				Usage: "the CNI plugin's IPAM `DIR`, where mp0's address is reserved (default: " + cni.DefaultDataDir + ", or ipam/ beside a --cni-conf-dir outside /etc/cni)"},
			&cli.Float64Flag{Name: "kube-api-qps", Value: agent.DefaultKubeAPIQPS, EnvVars: []string{"NODEFLOW_KUBE_API_QPS"}, Usage: "client-side rate limit of API requests per second"},
			&cli.IntFlag{Name: "kube-api-burst", Value: agent.DefaultKubeAPIBurst, EnvVars: []string{"NODEFLOW_KUBE_API_BURST"}, Usage: "client-side burst of API requests"},
			&cli.StringFlag{Name: "proc-sys-net", Value: netstack.ProcSysNet, EnvVars: []string{"NODEFLOW_PROC_SYS_NET"},
				Usage: "`DIR` where the host's /proc/sys/net is mounted writable (a container without privileges has /proc/sys read-only)"},
			&cli.DurationFlag{Name: "host-check-interval", Value: 30 * time.Second, EnvVars: []string{"NODEFLOW_HOST_CHECK_INTERVAL"}, Usage: "how often the host side is re-checked"},
			&cli.StringSliceFlag{Name: "nodeport-addresses", EnvVars: []string{"NODEFLOW_NODEPORT_ADDRESSES"},
				Usage: "`CIDR`s of the node addresses NodePorts answer on, or \"primary\" (the default): the node IPs, as kube-proxy's --nodeport-addresses"},
			&cli.IntFlag{Name: "namespace-budget", EnvVars: []string{"NODEFLOW_NAMESPACE_BUDGET"},
				Usage: "the flows and group buckets each namespace's Services may have on this node; the newest Service past it is not programmed (a Warning event on it) until there is room (0: no budget)"},
		}, features.CLIFlags()...),
		Action: runAgent,
	}
}

// datapathType resolves "auto".
func datapathType(s string) string {
	if s != "auto" {
		return s
	}
	if _, err := os.Stat("/sys/module/openvswitch"); err == nil {
		return "system"
	}
	return "netdev"
}

// agentPrologue is what the agent and its cleanup do first: refuse
// arguments, read the configuration file under the flags, and point
// netstack at --proc-sys-net.
func agentPrologue(c *cli.Context, command string) error {
	if err := noArgs(c, command); err != nil {
		return err
	}
	if err := applyConfigFile(c); err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	netstack.ProcSysNet = c.String("proc-sys-net")
	return nil
}

func runAgent(c *cli.Context) error {
	if err := agentPrologue(c, "agent"); err != nil {
		return err
	}
	cfg, err := agentConfig(c)
	if err != nil {
		return err
	}
	fs, turnOff, err := features.Build(features.Env{Flags: c, ClusterCIDRs: cfg.ClusterCIDRs, ServiceCIDRs: cfg.ServiceCIDRs,
		CNIConfDir: cfg.CNIConfDir, CNIDataDir: cfg.CNIDataDir, DatapathType: cfg.DatapathType, MgmtPortName: agent.MgmtPortName,
		HostCheckInterval: cfg.HostCheckInterval, ProcSysNet: netstack.ProcSysNet, Log: logrus.StandardLogger()})
	if err != nil {
		return err
	}
	if n, what := memlimit.Apply(); n > 0 {
		logrus.WithField("bytes", n).Info(what)
	} else {
		logrus.Debug(what)
	}
	if f := c.Int("gc-startup-floor"); f < 0 || f > 1<<20 {
		return fmt.Errorf("--gc-startup-floor: %d MiB is not between 0 and 1048576", f)
	}
	startupDone, gcNote := memlimit.Startup(c.Int("gc-percent"), int64(c.Int("gc-startup-floor"))<<20)
	logrus.Debug(gcNote)
	a, err := agent.New(cfg, logrus.StandardLogger())
	if err != nil {
		return err
	}
	go func() {
		<-a.Reconciled()
		startupDone()
	}()
	// The features, in the order they are wired; those turned off take
	// back what they keep on the node without flows.
	turnOff()
	for _, f := range fs {
		a.Use(f)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx)
}

// agentConfig reads the agent's own settings from its flags.
func agentConfig(c *cli.Context) (agent.Config, error) {
	cfg := agent.Config{
		Kubeconfig: c.String("kubeconfig"), KubeAPIQPS: float32(c.Float64("kube-api-qps")), KubeAPIBurst: c.Int("kube-api-burst"), NodeName: c.String("node-name"), Version: version, OVSRundir: c.String("ovs-rundir"),
		PodBridge: c.String("pod-bridge"), GatewayBridge: c.String("gateway-bridge"), Uplink: c.String("uplink"),
		DatapathType: datapathType(c.String("datapath-type")), MTU: c.Int("mtu"), HealthAddr: c.String("health-addr"),
		IntrospectSocket: c.String("socket"), CNIConfDir: c.String("cni-conf-dir"), CNIDataDir: c.String("cni-data-dir"), HostCheckInterval: c.Duration("host-check-interval"),
		NamespaceBudget: c.Int("namespace-budget"),
	}
	cfg.IntrospectSocket, cfg.CNIDataDir = agentPaths(cfg.OVSRundir, cfg.IntrospectSocket, cfg.CNIConfDir, cfg.CNIDataDir)
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("agent: --node-name: %w", err)
		}
		cfg.NodeName = h
	}
	var err error
	if cfg.ClusterCIDRs, err = features.ParsePrefixes("cluster-cidr", c.StringSlice("cluster-cidr")); err != nil {
		return cfg, err
	}
	if cfg.ServiceCIDRs, err = features.ParsePrefixes("service-cidr", c.StringSlice("service-cidr")); err != nil {
		return cfg, err
	}
	if np := c.StringSlice("nodeport-addresses"); !(len(np) == 1 && strings.TrimSpace(np[0]) == "primary") {
		if cfg.NodePortAddresses, err = features.ParsePrefixes("nodeport-addresses", np); err != nil {
			return cfg, err
		}
	}
	var v4, v6 netip.Prefix
	if s := c.String("masquerade-subnet-v4"); s != "" {
		if v4, err = netip.ParsePrefix(s); err != nil {
			return cfg, fmt.Errorf("--masquerade-subnet-v4: %w", err)
		}
	}
	if s := c.String("masquerade-subnet-v6"); s != "" {
		if v6, err = netip.ParsePrefix(s); err != nil {
			return cfg, fmt.Errorf("--masquerade-subnet-v6: %w", err)
		}
	}
	if cfg.Masquerade, err = conntrack.NewPlan(v4, v6); err != nil {
		return cfg, fmt.Errorf("agent: %w", err)
	}
	return cfg, nil
}

// applyConfigFile sets, from the --config file, every flag that neither
// the command line nor its environment variable set.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	ac, err := config.Load(path, features.FileFields())
	if err != nil {
		return err
	}
	for _, s := range ac.Settings() {
		if c.IsSet(s.Flag) {
			continue
		}
		if err := c.Set(s.Flag, s.Value); err != nil {
			return fmt.Errorf("agent configuration %s: %s: %w", path, s.Field, err)
		}
	}
	return nil
}

// agentPaths derives what the agent's flags leave to it, for the agent and
// for cleanup alike: the introspection socket (socket; "none" means none,
// "" the default, or nodeflow.sock in a run directory that is not a
// packaged Open vSwitch's) and the CNI data directory (dataDir; ""
// is cni.DefaultDataDir, or ipam/ beside a confDir outside /etc/cni).
func agentPaths(ovsRundir, socket, confDir, dataDir string) (string, string) {
	switch socket {
	case "none":
		socket = ""
	case "":
		socket = reconcile.DefaultSocket
		if ovsRundir != "/var/run/openvswitch" && ovsRundir != "/run/openvswitch" {
			socket = filepath.Join(ovsRundir, "nodeflow.sock")
		}
	}
	if dataDir == "" {
		dataDir = cni.DefaultDataDir
		if confDir != "" && !strings.HasPrefix(confDir, "/etc/cni") {
			dataDir = filepath.Join(filepath.Dir(confDir), "ipam")
		}
	}
	return socket, dataDir
}
