// Package features is the one list of the node agent's features. Each
// entry says which flags turn the feature on and tune it, which fields of
// the configuration file set them, how it is built from them, and what it
// leaves on a node besides the bridges (its nftables tables, its network
// interfaces and namespaces). The agent's command (cmd/nodeflow) takes
// its flags and file fields and builds the features from this list, and
// `nodeflow cleanup` takes from it what to remove: adding a feature
// touches its own folders and this list.
//
// The seam (agent/feature) knows none of the features; this package is
// where they are named, above them.
package features

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/agent/cleanup"
	"nodeflow/agent/config"
	"nodeflow/agent/feature"
	"nodeflow/agent/features/egressfirewallfeature"
	"nodeflow/agent/features/hostportfeature"
	"nodeflow/agent/features/idlingfeature"
	"nodeflow/agent/features/networkpolicyfeature"
	"nodeflow/agent/features/nodefeature"
	"nodeflow/agent/features/servicefeature"
	"nodeflow/agent/features/vnetfeature"
	"nodeflow/host/nat"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// Flags are the agent's flags' values, as a *cli.Context gives them.
type Flags interface {
	Bool(name string) bool
	String(name string) string
	StringSlice(name string) []string
	Duration(name string) time.Duration
}

// Env is what the features are built from: the agent's flags, and the
// agent's settings they share.
type Env struct {
	Flags Flags
	// ClusterCIDRs and ServiceCIDRs, one per family.
	ClusterCIDRs, ServiceCIDRs []netip.Prefix
	// CNIConfDir, CNIDataDir: where the pod network's CNI configuration
	// and its IPAM store go.
	CNIConfDir, CNIDataDir string
	// DatapathType is the bridges' datapath type, "system" or "netdev".
	DatapathType string
	// MgmtPortName is mp0's name.
	MgmtPortName string
	// HostCheckInterval is how often the host side is re-checked.
	HostCheckInterval time.Duration
	// ProcSysNet is where /proc/sys/net is writable.
	ProcSysNet string
	// Log hears what the features' construction has to say.
	Log logrus.FieldLogger
}

// Spec is one entry of the list.
type Spec struct {
	// Name names the entry ("services").
	Name string
	// Flags are its flags, added to the agent's (and, hidden, to
	// cleanup's, so that both read the same configuration).
	Flags []cli.Flag
	// File are the fields of the agent's configuration file that set its
	// flags.
	File []config.Field
	// New builds its features from env, in the order the agent wires
	// them; none when its flags turn it off. A bad flag is an error that
	// names it.
	New func(env Env) ([]feature.Feature, error)
	// Off, when set, undoes on the node what the feature keeps there
	// without flows, when its flags turn it off.
	Off func(log logrus.FieldLogger)
	// NFTables are the nftables tables it creates (one per family), which
	// cleanup deletes.
	NFTables []string
	// Links, when set, are the network interfaces and namespaces it keeps
	// on the node, which cleanup removes after the pod bridge.
	Links cleanup.Links
}

// All is the list, in the order the agent wires the features: node
// networking first, since every other feature's flows sit on its
// pipeline.
var All = []Spec{node, services, hostPorts, networkPolicy, egressFirewall, virtualNetworks}

// CLIFlags returns every entry's flags, in the list's order.
func CLIFlags() []cli.Flag {
	var out []cli.Flag
	for _, s := range All {
		out = append(out, s.Flags...)
	}
	return out
}

// FileFields returns every entry's fields of the configuration file, in
// the list's order.
func FileFields() []config.Field {
	var out []config.Field
	for _, s := range All {
		out = append(out, s.File...)
	}
	return out
}

// Links returns the network interfaces and namespaces a feature keeps on
// the node (one entry declares them at most: cleanup's steps are named
// for the virtual networks'); nil when none does.
func Links() cleanup.Links {
	for _, s := range All {
		if s.Links != nil {
			return s.Links
		}
	}
	return nil
}

// NFTables returns every nftables table a feature creates.
func NFTables() []string {
	var out []string
	for _, s := range All {
		out = append(out, s.NFTables...)
	}
	return out
}

// Build builds the features env's flags turn on, in the list's order. It
// does nothing to the node: turnOff, called once the agent's settings
// are known to be good, calls Off of the features the flags turn off.
func Build(env Env) (fs []feature.Feature, turnOff func(), err error) {
	var off []Spec
	for _, s := range All {
		built, err := s.New(env)
		if err != nil {
			return nil, nil, fmt.Errorf("agent: %w", err)
		}
		if len(built) == 0 && s.Off != nil {
			off = append(off, s)
		}
		fs = append(fs, built...)
	}
	return fs, func() {
		for _, s := range off {
			s.Off(env.Log)
		}
	}, nil
}

var node = Spec{
	Name: "node",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "packet-in-meters", Value: "per-source", EnvVars: []string{"NODEFLOW_PACKET_IN_METERS"}, Hidden: true,
			Usage: "per-source, or shared: one meter per packet-in category for the whole node, the previous design, for the benchmark that compares them"},
	},
	New: func(env Env) ([]feature.Feature, error) {
		var shared bool
		switch m := env.Flags.String("packet-in-meters"); m {
		case "per-source":
		case "shared":
			shared = true
			env.Log.Warn("--packet-in-meters=shared: one packet-in meter per category for the whole node, so one pod's flood starves the others")
		default:
			return nil, fmt.Errorf("--packet-in-meters: %q is not per-source or shared", m)
		}
		return []feature.Feature{nodefeature.New(nodefeature.Options{
			CNIConfDir: env.CNIConfDir, CNIDataDir: env.CNIDataDir, DatapathType: env.DatapathType,
			MgmtPortName: env.MgmtPortName, HostCheckInterval: env.HostCheckInterval,
			SharedPacketInMeters: shared,
		})}, nil
	},
}

var services = Spec{
	Name: "services",
	Flags: []cli.Flag{
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
		&cli.StringSliceFlag{Name: "external-ip-allowed-cidr", EnvVars: []string{"NODEFLOW_EXTERNAL_IP_ALLOWED_CIDRS"},
			Usage: "`CIDR`s a Service's spec.externalIPs may take addresses from (default: none, so no external IP is programmed); addresses of the cluster (service and pod networks, Nodes) are refused whatever this allows"},
		&cli.StringSliceFlag{Name: "external-ip-rejected-cidr", EnvVars: []string{"NODEFLOW_EXTERNAL_IP_REJECTED_CIDRS"},
			Usage: "`CIDR`s refused to spec.externalIPs even inside --external-ip-allowed-cidr"},
		&cli.StringSliceFlag{Name: "load-balancer-ip-allowed-cidr", EnvVars: []string{"NODEFLOW_LOAD_BALANCER_IP_ALLOWED_CIDRS"},
			Usage: "`CIDR`s a Service's status.loadBalancer.ingress may take addresses from (default: none); cluster addresses are refused whatever this allows"},
		&cli.StringSliceFlag{Name: "load-balancer-ip-rejected-cidr", EnvVars: []string{"NODEFLOW_LOAD_BALANCER_IP_REJECTED_CIDRS"},
			Usage: "`CIDR`s refused to status.loadBalancer.ingress even inside --load-balancer-ip-allowed-cidr"},
	},
	// externalIPs and loadBalancerIPs are the policies for the addresses
	// Services name in spec.externalIPs and status.loadBalancer.ingress.
	File: []config.Field{
		{Name: "services", Flag: "services", Type: config.Bool},
		{Name: "unidle", Flag: "unidle", Type: config.Bool},
		{Name: "proxyHealthzAddr", Flag: "proxy-healthz-addr", Type: config.String},
		{Name: "proxyMetricsAddr", Flag: "proxy-metrics-addr", Type: config.String},
		{Name: "unidleHoldTime", Flag: "unidle-hold-time", Type: config.String, Check: config.PositiveDuration},
		{Name: "externalIPs", Type: config.Object, Fields: []config.Field{
			{Name: "allowedCIDRs", Flag: "external-ip-allowed-cidr", Type: config.List, Check: config.CIDR},
			{Name: "rejectedCIDRs", Flag: "external-ip-rejected-cidr", Type: config.List, Check: config.CIDR},
		}},
		{Name: "loadBalancerIPs", Type: config.Object, Fields: []config.Field{
			{Name: "allowedCIDRs", Flag: "load-balancer-ip-allowed-cidr", Type: config.List, Check: config.CIDR},
			{Name: "rejectedCIDRs", Flag: "load-balancer-ip-rejected-cidr", Type: config.List, Check: config.CIDR},
		}},
	},
	New: func(env Env) ([]feature.Feature, error) {
		var policies [4][]netip.Prefix
		for i, flag := range []string{"external-ip-allowed-cidr", "external-ip-rejected-cidr", "load-balancer-ip-allowed-cidr", "load-balancer-ip-rejected-cidr"} {
			var err error
			if policies[i], err = ParsePrefixes(flag, env.Flags.StringSlice(flag)); err != nil {
				return nil, err
			}
		}
		if !env.Flags.Bool("services") {
			return nil, nil
		}
		opts := servicefeature.Options{HealthzAddr: env.Flags.String("proxy-healthz-addr"), MetricsAddr: env.Flags.String("proxy-metrics-addr"),
			ExternalIPs: service.CIDRPolicy{Allowed: policies[0], Rejected: policies[1]},
			IngressIPs:  service.CIDRPolicy{Allowed: policies[2], Rejected: policies[3]}}
		var svcProxy *servicefeature.Proxy
		var idle *idlingfeature.Unidler
		if env.Flags.Bool("unidle") {
			// The unidling feature takes the idled ports over; what it held
			// past its hold time is rejected as the proxy rejects.
			idle = idlingfeature.New(idlingfeature.Options{HoldTime: env.Flags.Duration("unidle-hold-time"),
				Reject: func(p *openflow.PacketIn) bool { return svcProxy.Reject(p) }})
			opts.Idle = idle
		}
		svcProxy = servicefeature.New(opts)
		if idle == nil {
			return []feature.Feature{svcProxy}, nil
		}
		return []feature.Feature{svcProxy, idle}, nil
	},
	// No service proxy: no DNAT of the host's traffic to services.
	Off:      servicefeature.RemoveHostNAT,
	NFTables: []string{nat.DefaultTable},
}

var hostPorts = Spec{
	Name: "host-ports",
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "host-ports", Value: true, EnvVars: []string{"NODEFLOW_HOST_PORTS"},
			Usage: "serve the hostPorts of this node's pods (on br0, breth0 and, for the host's own connections, nftables)"},
	},
	File: []config.Field{{Name: "hostPorts", Flag: "host-ports", Type: config.Bool}},
	New: func(env Env) ([]feature.Feature, error) {
		if !env.Flags.Bool("host-ports") {
			return nil, nil
		}
		return []feature.Feature{hostportfeature.New(hostportfeature.Options{
			ReservedPorts: ReservedPorts(env.Flags.String("health-addr"), env.Flags.String("proxy-healthz-addr"), env.Flags.String("proxy-metrics-addr"))})}, nil
	},
	NFTables: []string{nat.HostPortsTable},
}

var networkPolicy = Spec{
	Name: "network-policy",
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "network-policy", Value: true, EnvVars: []string{"NODEFLOW_NETWORK_POLICY"},
			Usage: "enforce NetworkPolicy (networking.k8s.io/v1) on br0: tables 45 and 65"},
	},
	File: []config.Field{{Name: "networkPolicy", Flag: "network-policy", Type: config.Bool}},
	New: func(env Env) ([]feature.Feature, error) {
		if !env.Flags.Bool("network-policy") {
			return nil, nil
		}
		return []feature.Feature{networkpolicyfeature.New(networkpolicyfeature.Options{})}, nil
	},
}

var egressFirewall = Spec{
	Name: "egress-firewall",
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "egress-firewall", Value: true, EnvVars: []string{"NODEFLOW_EGRESS_FIREWALL"},
			Usage: "enforce EgressFirewall (k8s.ovn.org/v1) and EgressNetworkPolicy (network.openshift.io/v1) on br0"},
		&cli.StringFlag{Name: "resolv-conf", Value: "/etc/resolv.conf", EnvVars: []string{"NODEFLOW_RESOLV_CONF"}, Usage: "resolver configuration `FILE` whose nameservers the egress firewall asks for dnsNames"},
		&cli.StringSliceFlag{Name: "cluster-dns-service", Value: cli.NewStringSlice(egressfirewallfeature.DefaultClusterDNSService.String()), EnvVars: []string{"NODEFLOW_CLUSTER_DNS_SERVICES"},
			Usage: "`NAMESPACE/NAME` of a cluster DNS Service whose answers to pods the egress firewall learns dnsName addresses from (through its ClusterIPs and its endpoints, answered by a pod of its namespace); repeat or comma-separate; an empty value trusts none"},
		&cli.StringSliceFlag{Name: "trusted-dns", EnvVars: []string{"NODEFLOW_TRUSTED_DNS"},
			Usage: "`ADDRESS` or prefix of a resolver outside the pod and service networks (a node-local DNS cache's 169.254.20.10, say) whose answers that reach pods from the host or the gateway the egress firewall learns from, besides --resolv-conf's nameservers"},
	},
	File: []config.Field{
		{Name: "egressFirewall", Flag: "egress-firewall", Type: config.Bool},
		{Name: "resolvConf", Flag: "resolv-conf", Type: config.String},
		// An empty list trusts no cluster DNS Service.
		{Name: "clusterDNSServices", Flag: "cluster-dns-service", Type: config.List, Check: func(s string) string {
			if ns, name, ok := strings.Cut(s, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
				return "is not namespace/name"
			}
			return ""
		}},
		{Name: "trustedDNS", Flag: "trusted-dns", Type: config.List, Check: func(s string) string {
			if _, err := netip.ParseAddr(s); err != nil && config.CIDR(s) != "" {
				return "is not an address or a CIDR"
			}
			return ""
		}},
	},
	New: func(env Env) ([]feature.Feature, error) {
		clusterDNS, err := egressfirewallfeature.ParseClusterDNSServices(env.Flags.StringSlice("cluster-dns-service"))
		if err != nil {
			return nil, fmt.Errorf("--cluster-dns-service: %w", err)
		}
		trustedDNS, err := egressfirewallfeature.ParseTrustedDNS(env.Flags.StringSlice("trusted-dns"))
		if err != nil {
			return nil, fmt.Errorf("--trusted-dns: %w", err)
		}
		if err := egressfirewallfeature.CheckTrustedDNS(trustedDNS, env.ClusterCIDRs, env.ServiceCIDRs); err != nil {
			return nil, fmt.Errorf("--trusted-dns: %w", err)
		}
		if !env.Flags.Bool("egress-firewall") {
			return nil, nil
		}
		return []feature.Feature{egressfirewallfeature.New(egressfirewallfeature.Options{ResolvConf: env.Flags.String("resolv-conf"),
			ClusterDNSServices: clusterDNS, TrustedDNS: trustedDNS})}, nil
	},
}

var virtualNetworks = Spec{
	Name: "virtual-networks",
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "virtual-networks", Value: true, EnvVars: []string{"NODEFLOW_VIRTUAL_NETWORKS"},
			Usage: "run the virtual networks' connection agent (vnet.nodeflow.io): an interface per NetworkAttachment of this node, and their VNIs on br0; it waits for the CRDs when they are not installed"},
	},
	File: []config.Field{{Name: "virtualNetworks", Flag: "virtual-networks", Type: config.Bool}},
	// The attachments' veths, and their namespaces in the directory `ip
	// netns` uses.
	Links: &vnetfeature.Links{NetnsDir: vnetfeature.DefaultNetnsDir},
	New: func(env Env) ([]feature.Feature, error) {
		if !env.Flags.Bool("virtual-networks") {
			return nil, nil
		}
		return []feature.Feature{vnetfeature.New(vnetfeature.Options{ProcSysNet: env.ProcSysNet})}, nil
	},
}

// ParsePrefixes parses the CIDRs of a list flag (repeated, or
// comma-separated), naming the flag in its error.
func ParsePrefixes(flag string, ss []string) ([]netip.Prefix, error) {
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

// ReservedPorts returns the TCP ports no hostPort may take: the kubelet's
// API and the ports of the agent's listeners (addrs, "host:port"; empty
// ones are off).
func ReservedPorts(addrs ...string) []uint16 {
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
