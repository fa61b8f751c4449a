package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/agent"
	"nodeflow/agent/config"
	"nodeflow/agent/features/egressfirewallfeature"
	"nodeflow/agent/features/hostportfeature"
	"nodeflow/agent/features/idlingfeature"
	"nodeflow/agent/features/networkpolicyfeature"
	"nodeflow/agent/features/nodefeature"
	"nodeflow/agent/features/servicefeature"
	"nodeflow/agent/features/vnetfeature"
	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/lib/memlimit"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

func init() {
	commands = append(commands, agentCommand())
}

// agentCommand is `nodeflow agent`: the node agent.
func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the node agent: own br0 and breth0, configure the host side, keep the flows",
		Flags: []cli.Flag{
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
			&cli.BoolFlag{Name: "services", Value: true, EnvVars: []string{"NODEFLOW_SERVICES"},
				Usage: "run the service proxy (in place of kube-proxy): Services and EndpointSlices load-balanced on br0"},
			&cli.BoolFlag{Name: "unidle", Value: true, EnvVars: []string{"NODEFLOW_UNIDLE"},
				Usage: "catch the first packets of idled services, ask for pods (NeedPods events) and re-inject the packets once they exist"},
			&cli.StringFlag{Name: "proxy-healthz-addr", Value: servicefeature.DefaultHealthzAddr, EnvVars: []string{"NODEFLOW_PROXY_HEALTHZ_ADDR"},
				Usage: "`ADDR` of kube-proxy's /healthz and /livez, which load balancers probe (empty disables)"},
			&cli.StringFlag{Name: "proxy-metrics-addr", Value: servicefeature.DefaultMetricsAddr, EnvVars: []string{"NODEFLOW_PROXY_METRICS_ADDR"},
				Usage: "`ADDR` of kube-proxy's /proxyMode and /metrics (empty disables)"},
			&cli.DurationFlag{Name: "unidle-hold-time", Value: idlingfeature.DefaultHoldTime, EnvVars: []string{"NODEFLOW_UNIDLE_HOLD_TIME"},
				Usage: "how long a packet to an idled service is held before it is rejected"},
			&cli.BoolFlag{Name: "egress-firewall", Value: true, EnvVars: []string{"NODEFLOW_EGRESS_FIREWALL"},
				Usage: "enforce EgressFirewall (k8s.ovn.org/v1) and EgressNetworkPolicy (network.openshift.io/v1) on br0"},
			&cli.BoolFlag{Name: "host-ports", Value: true, EnvVars: []string{"NODEFLOW_HOST_PORTS"},
				Usage: "serve the hostPorts of this node's pods (on br0, breth0 and, for the host's own connections, nftables)"},
			&cli.BoolFlag{Name: "network-policy", Value: true, EnvVars: []string{"NODEFLOW_NETWORK_POLICY"},
				Usage: "enforce NetworkPolicy (networking.k8s.io/v1) on br0: tables 45 and 65"},
			&cli.Float64Flag{Name: "kube-api-qps", Value: agent.DefaultKubeAPIQPS, EnvVars: []string{"NODEFLOW_KUBE_API_QPS"}, Usage: "client-side rate limit of API requests per second"},
			&cli.IntFlag{Name: "kube-api-burst", Value: agent.DefaultKubeAPIBurst, EnvVars: []string{"NODEFLOW_KUBE_API_BURST"}, Usage: "client-side burst of API requests"},
			&cli.BoolFlag{Name: "virtual-networks", Value: true, EnvVars: []string{"NODEFLOW_VIRTUAL_NETWORKS"},
				Usage: "run the virtual networks' connection agent (vnet.nodeflow.io): an interface per NetworkAttachment of this node, and their VNIs on br0; it waits for the CRDs when they are not installed"},
			&cli.StringFlag{Name: "resolv-conf", Value: "/etc/resolv.conf", EnvVars: []string{"NODEFLOW_RESOLV_CONF"}, Usage: "resolver configuration `FILE` whose nameservers the egress firewall asks for dnsNames"},
			&cli.StringFlag{Name: "proc-sys-net", Value: netstack.ProcSysNet, EnvVars: []string{"NODEFLOW_PROC_SYS_NET"},
				Usage: "`DIR` where the host's /proc/sys/net is mounted writable (a container without privileges has /proc/sys read-only)"},
			&cli.DurationFlag{Name: "host-check-interval", Value: 30 * time.Second, EnvVars: []string{"NODEFLOW_HOST_CHECK_INTERVAL"}, Usage: "how often the host side is re-checked"},
			&cli.StringSliceFlag{Name: "external-ip-allowed-cidr", EnvVars: []string{"NODEFLOW_EXTERNAL_IP_ALLOWED_CIDRS"},
				Usage: "`CIDR`s a Service's spec.externalIPs may take addresses from (default: none, so no external IP is programmed); addresses of the cluster (service and pod networks, Nodes) are refused whatever this allows"},
			&cli.StringSliceFlag{Name: "external-ip-rejected-cidr", EnvVars: []string{"NODEFLOW_EXTERNAL_IP_REJECTED_CIDRS"},
				Usage: "`CIDR`s refused to spec.externalIPs even inside --external-ip-allowed-cidr"},
			&cli.StringSliceFlag{Name: "load-balancer-ip-allowed-cidr", EnvVars: []string{"NODEFLOW_LOAD_BALANCER_IP_ALLOWED_CIDRS"},
				Usage: "`CIDR`s a Service's status.loadBalancer.ingress may take addresses from (default: none); cluster addresses are refused whatever this allows"},
			&cli.StringSliceFlag{Name: "load-balancer-ip-rejected-cidr", EnvVars: []string{"NODEFLOW_LOAD_BALANCER_IP_REJECTED_CIDRS"},
				Usage: "`CIDR`s refused to status.loadBalancer.ingress even inside --load-balancer-ip-allowed-cidr"},
			&cli.StringSliceFlag{Name: "nodeport-addresses", EnvVars: []string{"NODEFLOW_NODEPORT_ADDRESSES"},
				Usage: "`CIDR`s of the node addresses NodePorts answer on, or \"primary\" (the default): the node IPs, as kube-proxy's --nodeport-addresses"},
			&cli.StringFlag{Name: "packet-in-meters", Value: "per-source", EnvVars: []string{"NODEFLOW_PACKET_IN_METERS"}, Hidden: true,
				Usage: "per-source, or shared: one meter per packet-in category for the whole node, the previous design, for the benchmark that compares them"},
			&cli.StringSliceFlag{Name: "cluster-dns-service", Value: cli.NewStringSlice(egressfirewallfeature.DefaultClusterDNSService.String()), EnvVars: []string{"NODEFLOW_CLUSTER_DNS_SERVICES"},
				Usage: "`NAMESPACE/NAME` of a cluster DNS Service whose answers to pods the egress firewall learns dnsName addresses from (through its ClusterIPs and its endpoints, answered by a pod of its namespace); repeat or comma-separate; an empty value trusts none"},
			&cli.StringSliceFlag{Name: "trusted-dns", EnvVars: []string{"NODEFLOW_TRUSTED_DNS"},
				Usage: "`ADDRESS` or prefix of a resolver outside the pod and service networks (a node-local DNS cache's 169.254.20.10, say) whose answers that reach pods from the host or the gateway the egress firewall learns from, besides --resolv-conf's nameservers"},
			&cli.IntFlag{Name: "namespace-budget", EnvVars: []string{"NODEFLOW_NAMESPACE_BUDGET"},
				Usage: "the flows and group buckets each namespace's Services may have on this node; the newest Service past it is not programmed (a Warning event on it) until there is room (0: no budget)"},
		},
		Action: runAgent,
	}
}

func parsePrefixes(flag string, ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		for _, part := range strings.Split(s, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			p, err := netip.ParsePrefix(part)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", flag, err)
			}
			out = append(out, p)
		}
	}
	return out, nil
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

func runAgent(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("agent: unexpected argument %q", c.Args().First())
	}
	if err := applyConfigFile(c); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	netstack.ProcSysNet = c.String("proc-sys-net")
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
			return fmt.Errorf("agent: --node-name: %w", err)
		}
		cfg.NodeName = h
	}
	var err error
	if cfg.ClusterCIDRs, err = parsePrefixes("cluster-cidr", c.StringSlice("cluster-cidr")); err != nil {
		return err
	}
	if cfg.ServiceCIDRs, err = parsePrefixes("service-cidr", c.StringSlice("service-cidr")); err != nil {
		return err
	}
	if np := c.StringSlice("nodeport-addresses"); !(len(np) == 1 && strings.TrimSpace(np[0]) == "primary") {
		if cfg.NodePortAddresses, err = parsePrefixes("nodeport-addresses", np); err != nil {
			return err
		}
	}
	var policies [4][]netip.Prefix
	for i, flag := range []string{"external-ip-allowed-cidr", "external-ip-rejected-cidr", "load-balancer-ip-allowed-cidr", "load-balancer-ip-rejected-cidr"} {
		if policies[i], err = parsePrefixes(flag, c.StringSlice(flag)); err != nil {
			return err
		}
	}
	var v4, v6 netip.Prefix
	if s := c.String("masquerade-subnet-v4"); s != "" {
		if v4, err = netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("--masquerade-subnet-v4: %w", err)
		}
	}
	if s := c.String("masquerade-subnet-v6"); s != "" {
		if v6, err = netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("--masquerade-subnet-v6: %w", err)
		}
	}
	if cfg.Masquerade, err = conntrack.NewPlan(v4, v6); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	clusterDNS, err := egressfirewallfeature.ParseClusterDNSServices(c.StringSlice("cluster-dns-service"))
	if err != nil {
		return fmt.Errorf("agent: --cluster-dns-service: %w", err)
	}
	trustedDNS, err := egressfirewallfeature.ParseTrustedDNS(c.StringSlice("trusted-dns"))
	if err != nil {
		return fmt.Errorf("agent: --trusted-dns: %w", err)
	}
	if err := egressfirewallfeature.CheckTrustedDNS(trustedDNS, cfg.ClusterCIDRs, cfg.ServiceCIDRs); err != nil {
		return fmt.Errorf("agent: --trusted-dns: %w", err)
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
	// The features, in the order they are wired.
	var sharedMeters bool
	switch m := c.String("packet-in-meters"); m {
	case "per-source":
	case "shared":
		sharedMeters = true
		logrus.Warn("--packet-in-meters=shared: one packet-in meter per category for the whole node, so one pod's flood starves the others")
	default:
		return fmt.Errorf("agent: --packet-in-meters: %q is not per-source or shared", m)
	}
	a.Use(nodefeature.New(nodefeature.Options{
		CNIConfDir: cfg.CNIConfDir, CNIDataDir: cfg.CNIDataDir, DatapathType: cfg.DatapathType,
		MgmtPortName: agent.MgmtPortName, HostCheckInterval: cfg.HostCheckInterval,
		SharedPacketInMeters: sharedMeters,
	}))
	if c.Bool("services") {
		opts := servicefeature.Options{HealthzAddr: c.String("proxy-healthz-addr"), MetricsAddr: c.String("proxy-metrics-addr"),
			ExternalIPs: service.CIDRPolicy{Allowed: policies[0], Rejected: policies[1]},
			IngressIPs:  service.CIDRPolicy{Allowed: policies[2], Rejected: policies[3]}}
		var svcProxy *servicefeature.Proxy
		var idle *idlingfeature.Unidler
		if c.Bool("unidle") {
			// The unidling feature takes the idled ports over; what it held
			// past its hold time is rejected as the proxy rejects.
			idle = idlingfeature.New(idlingfeature.Options{HoldTime: c.Duration("unidle-hold-time"),
				Reject: func(p *openflow.PacketIn) bool { return svcProxy.Reject(p) }})
			opts.Idle = idle
		}
		svcProxy = servicefeature.New(opts)
		a.Use(svcProxy)
		if idle != nil {
			a.Use(idle)
		}
	} else {
		// No service proxy: no DNAT of the host's traffic to services.
		servicefeature.RemoveHostNAT(logrus.StandardLogger())
	}
	if c.Bool("host-ports") {
		a.Use(hostportfeature.New(hostportfeature.Options{ReservedPorts: reservedPorts(c.String("health-addr"), c.String("proxy-healthz-addr"), c.String("proxy-metrics-addr"))}))
	}
	if c.Bool("network-policy") {
		a.Use(networkpolicyfeature.New(networkpolicyfeature.Options{}))
	}
	if c.Bool("egress-firewall") {
		a.Use(egressfirewallfeature.New(egressfirewallfeature.Options{ResolvConf: c.String("resolv-conf"),
			ClusterDNSServices: clusterDNS, TrustedDNS: trustedDNS}))
	}
	if c.Bool("virtual-networks") {
		a.Use(vnetfeature.New(vnetfeature.Options{ProcSysNet: netstack.ProcSysNet}))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx)
}

// reservedPorts returns the TCP ports no hostPort may take: the kubelet's
// API and the ports of the agent's listeners (addrs, "host:port"; empty
// ones are off).
func reservedPorts(addrs ...string) []uint16 {
	out := []uint16{hostportfeature.KubeletPort}
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(port, 10, 16); err == nil && n > 0 && !slices.Contains(out, uint16(n)) {
			out = append(out, uint16(n))
		}
	}
	return out
}

// applyConfigFile sets, from the --config file, every flag that neither
// the command line nor its environment variable set.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	ac, err := config.Load(path)
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
