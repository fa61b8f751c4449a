package cni

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// PluginType is the plugin's name in a network configuration's "type".
const PluginType = "nodeflow"

// Defaults for optional configuration fields.
const (
	DefaultBridge  = "br0"
	DefaultMTU     = 1400
	DefaultDataDir = "/var/lib/cni/networks"
	// DefaultOVSRundir is where a packaged Open vSwitch keeps db.sock.
	DefaultOVSRundir = "/var/run/openvswitch"
)

// NetConf is the plugin's network configuration, read from stdin.
//
//	{
//	  "cniVersion": "1.0.0",
//	  "name": "nodeflow",
//	  "type": "nodeflow",
//	  "bridge": "br0",                       optional, default br0
//	  "ovsdb": "unix:/var/run/openvswitch/db.sock",
//	                                         optional, default $OVS_RUNDIR/db.sock
//	  "datapathType": "netdev",              optional, used only if the plugin creates the bridge
//	  "mtu": 1400,                           optional
//	  "ipam": {
//	    "subnets": ["10.244.1.0/24", "fd00:10:244:1::/64"],
//	                                         the node's podCIDRs, at most one per family
//	    "gateways": ["10.244.1.1"],          optional; default: the first address of each subnet
//	    "dataDir": "/var/lib/cni/networks"   optional; allocations live in dataDir/<name>
//	  }
//	}
type NetConf struct {
	CNIVersion       string               `json:"cniVersion"`
	Name             string               `json:"name"`
	Type             string               `json:"type"`
	Bridge           string               `json:"bridge,omitempty"`
	OVSDB            string               `json:"ovsdb,omitempty"`
	DatapathType     string               `json:"datapathType,omitempty"`
	MTU              int                  `json:"mtu,omitempty"`
	IPAM             IPAMConf             `json:"ipam"`
	RawPrevResult    map[string]any       `json:"prevResult,omitempty"`
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`

	// PrevResult is RawPrevResult decoded (CHECK and DEL), or nil.
	PrevResult *current.Result `json:"-"`
	// Ranges are the parsed IPAM subnets with their gateways, IPv4 first.
	Ranges []Range `json:"-"`
}

// IPAMConf is the "ipam" section of NetConf. The plugin does its own address
// management; "type" must be empty or "nodeflow".
type IPAMConf struct {
	Type     string   `json:"type,omitempty"`
	Subnets  []string `json:"subnets"`
	Gateways []string `json:"gateways,omitempty"`
	DataDir  string   `json:"dataDir,omitempty"`
}

// Range is one pod subnet and its gateway address.
type Range struct {
	Subnet  netip.Prefix
	Gateway netip.Addr
}

// Is4 reports whether the range is IPv4.
func (r Range) Is4() bool { return r.Subnet.Addr().Is4() }

// ParseConfig decodes and validates the network configuration, filling in
// defaults. Errors are *types.Error with code ErrDecodingFailure or
// ErrInvalidNetworkConfig.
func ParseConfig(data []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "cni: decode network configuration", err.Error())
	}
	if err := c.complete(); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "cni: network configuration: "+err.Error(), "")
	}
	if c.RawPrevResult != nil {
		res, err := parsePrevResult(c.CNIVersion, c.RawPrevResult)
		if err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "cni: network configuration: prevResult", err.Error())
		}
		c.PrevResult = res
	}
	return &c, nil
}

func (c *NetConf) complete() error {
	if c.Name == "" {
		return fmt.Errorf("name: missing")
	}
	if strings.ContainsAny(c.Name, "/\x00") || c.Name == "." || c.Name == ".." {
		return fmt.Errorf("name: %q is not usable as a directory name", c.Name)
	}
	if c.Type != "" && c.Type != PluginType {
		return fmt.Errorf("type: %q is not %q", c.Type, PluginType)
	}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if c.OVSDB == "" {
		rundir := os.Getenv("OVS_RUNDIR")
		if rundir == "" {
			rundir = DefaultOVSRundir
		}
		c.OVSDB = "unix:" + filepath.Join(rundir, "db.sock")
	}
	if !strings.HasPrefix(c.OVSDB, "unix:") && !strings.HasPrefix(c.OVSDB, "tcp:") {
		return fmt.Errorf("ovsdb: %q is not unix:PATH or tcp:HOST:PORT", c.OVSDB)
	}
	switch c.DatapathType {
	case "", "system", "netdev":
	default:
		return fmt.Errorf("datapathType: %q is not system or netdev", c.DatapathType)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < 576 || c.MTU > 65535 {
		return fmt.Errorf("mtu: %d is outside 576..65535", c.MTU)
	}
	if c.IPAM.Type != "" && c.IPAM.Type != PluginType {
		return fmt.Errorf("ipam: type: %q is not supported; the plugin allocates addresses itself (leave it empty or %q)", c.IPAM.Type, PluginType)
	}
	if c.IPAM.DataDir == "" {
		c.IPAM.DataDir = DefaultDataDir
	}
	if len(c.IPAM.Subnets) == 0 {
		return fmt.Errorf("ipam: subnets: missing (the node's podCIDRs)")
	}
	if len(c.IPAM.Gateways) > len(c.IPAM.Subnets) {
		return fmt.Errorf("ipam: gateways: %d given for %d subnets", len(c.IPAM.Gateways), len(c.IPAM.Subnets))
	}
	c.Ranges = nil
	seen := map[bool]bool{}
	for i, s := range c.IPAM.Subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("ipam: subnets[%d]: %w", i, err)
		}
		if p != p.Masked() {
			return fmt.Errorf("ipam: subnets[%d]: %s has host bits set (did you mean %s?)", i, s, p.Masked())
		}
		p4 := p.Addr().Is4()
		if seen[p4] {
			return fmt.Errorf("ipam: subnets[%d]: a second %s subnet; give at most one per family", i, family(p4))
		}
		seen[p4] = true
		if hostBits(p) < 2 {
			return fmt.Errorf("ipam: subnets[%d]: %s has no room for a gateway and a pod", i, s)
		}
		r := Range{Subnet: p, Gateway: p.Addr().Next()}
		if i < len(c.IPAM.Gateways) && c.IPAM.Gateways[i] != "" {
			gw, err := netip.ParseAddr(c.IPAM.Gateways[i])
			if err != nil {
				return fmt.Errorf("ipam: gateways[%d]: %w", i, err)
			}
			if !p.Contains(gw) || gw == p.Addr() {
				return fmt.Errorf("ipam: gateways[%d]: %s is not a host address of %s", i, gw, p)
			}
			r.Gateway = gw
		}
		c.Ranges = append(c.Ranges, r)
	}
	if len(c.Ranges) == 2 && !c.Ranges[0].Is4() {
		c.Ranges[0], c.Ranges[1] = c.Ranges[1], c.Ranges[0]
	}
	return nil
}

// hostBits is the number of host bits in p.
func hostBits(p netip.Prefix) int { return p.Addr().BitLen() - p.Bits() }

func family(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}

// parsePrevResult converts a prevResult of any supported version to 1.0.
func parsePrevResult(confVersion string, raw map[string]any) (*current.Result, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	v := confVersion
	if v == "" {
		v = "0.1.0"
	}
	res, err := version.NewResult(v, b)
	if err != nil {
		return nil, err
	}
	return current.NewResultFromResult(res)
}

// K8sArgs are the Kubernetes fields a runtime passes in CNI_ARGS
// ("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=name;..."). Other keys are ignored.
type K8sArgs struct {
	PodNamespace string
	PodName      string
	PodUID       string
	// InfraContainerID is K8S_POD_INFRA_CONTAINER_ID.
	InfraContainerID string
}

// ParseK8sArgs decodes CNI_ARGS. Every element must be KEY=VALUE.
func ParseK8sArgs(s string) (K8sArgs, error) {
	var a K8sArgs
	if s == "" {
		return a, nil
	}
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return a, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("cni: CNI_ARGS: %q is not KEY=VALUE", kv), "")
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			a.PodNamespace = v
		case "K8S_POD_NAME":
			a.PodName = v
		case "K8S_POD_UID":
			a.PodUID = v
		case "K8S_POD_INFRA_CONTAINER_ID":
			a.InfraContainerID = v
		}
	}
	return a, nil
}
