// Package config reads the node agent's configuration file: a
// versioned object, as kube-proxy reads its KubeProxyConfiguration, whose
// fields are the agent's flags. Shipped in a ConfigMap, it gives every node
// the same settings; a flag given on the command line (or through its
// environment variable) still wins over the file.
//
//	apiVersion: nodeflow.io/v1alpha1
//	kind: AgentConfiguration
//	clusterCIDRs: [10.244.0.0/16, fd00:10:244::/56]
//	serviceCIDRs: [10.96.0.0/16, fd00:10:96::/112]
//	mtu: 1400
//	unidleHoldTime: 60s
//
// The agent's own fields are AgentConfiguration's; each feature declares
// its own (Field) in the feature list, which gives them to Parse, so that
// adding a feature does not touch this package. A field the agent does not
// know, or a value it cannot use, is an error that names the file and the
// field: the agent does not start on a configuration it would have to
// guess at.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The file's apiVersion and kind.
const (
	APIVersion = "nodeflow.io/v1alpha1"
	Kind       = "AgentConfiguration"
)

// AgentConfiguration is the file. Every field but apiVersion and kind is
// optional and sets the agent flag named in its comment. These are the
// agent's own fields; the features' fields are those the feature list
// declares (Field), given to Parse.
type AgentConfiguration struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	Kubeconfig         *string  `json:"kubeconfig,omitempty"`         // --kubeconfig
	KubeAPIQPS         *float64 `json:"kubeAPIQPS,omitempty"`         // --kube-api-qps
	KubeAPIBurst       *int     `json:"kubeAPIBurst,omitempty"`       // --kube-api-burst
	NodeName           *string  `json:"nodeName,omitempty"`           // --node-name
	OVSRundir          *string  `json:"ovsRundir,omitempty"`          // --ovs-rundir
	PodBridge          *string  `json:"podBridge,omitempty"`          // --pod-bridge
	GatewayBridge      *string  `json:"gatewayBridge,omitempty"`      // --gateway-bridge
	Uplink             *string  `json:"uplink,omitempty"`             // --uplink
	DatapathType       *string  `json:"datapathType,omitempty"`       // --datapath-type: auto, system or netdev
	ClusterCIDRs       []string `json:"clusterCIDRs,omitempty"`       // --cluster-cidr
	ServiceCIDRs       []string `json:"serviceCIDRs,omitempty"`       // --service-cidr
	MasqueradeSubnetV4 *string  `json:"masqueradeSubnetV4,omitempty"` // --masquerade-subnet-v4
	MasqueradeSubnetV6 *string  `json:"masqueradeSubnetV6,omitempty"` // --masquerade-subnet-v6
	MTU                *int     `json:"mtu,omitempty"`                // --mtu
	HealthAddr         *string  `json:"healthAddr,omitempty"`         // --health-addr
	Socket             *string  `json:"socket,omitempty"`             // --socket
	CNIConfDir         *string  `json:"cniConfDir,omitempty"`         // --cni-conf-dir
	CNIDataDir         *string  `json:"cniDataDir,omitempty"`         // --cni-data-dir
	HostCheckInterval  *string  `json:"hostCheckInterval,omitempty"`  // --host-check-interval, a Go duration
	ProcSysNet         *string  `json:"procSysNet,omitempty"`         // --proc-sys-net
	GCPercent          *int     `json:"gcPercent,omitempty"`          // --gc-percent: the Go collector's target when GOGC is unset
	GCStartupFloor     *int     `json:"gcStartupFloor,omitempty"`     // --gc-startup-floor: MiB of Go memory before the start-up's first collection
	NamespaceBudget    *int     `json:"namespaceBudget,omitempty"`    // --namespace-budget: flows and group buckets per namespace's Services on a node (0: none)

	// NodePortAddresses: --nodeport-addresses, CIDRs or "primary".
	NodePortAddresses []string `json:"nodePortAddresses,omitempty"`

	// features are the settings of the features' fields (Field), in the
	// order the fields are declared.
	features []Setting
}

// Setting is one flag the file sets.
type Setting struct {
	// Flag is the flag's name, without dashes.
	Flag string
	// Field is the file's field, for messages.
	Field string
	// Value is the flag's value as the command line would give it (a
	// list is comma-separated).
	Value string
}

// Load reads and checks the file at path, whose features' fields are
// fields.
func Load(path string, fields []Field) (*AgentConfiguration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent configuration: %w", err)
	}
	c, err := Parse(b, fields)
	if err != nil {
		return nil, fmt.Errorf("agent configuration %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and checks a file's content (YAML or JSON): the agent's
// own fields, and the features' fields. An unknown field, a field of the
// wrong type or a value the agent cannot use is an error naming the
// field.
func Parse(b []byte, fields []Field) (*AgentConfiguration, error) {
	t, err := fileType(fields)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	// Case-sensitive and strict: "clusterCidrs" is not clusterCIDRs, and
	// a field given twice is an error. The file is decoded as one object,
	// the agent's fields and the features' side by side.
	v := reflect.New(t)
	strict, err := sigsjson.UnmarshalStrict(j, v.Interface())
	if err != nil {
		return nil, decodeError(err)
	}
	if err := errors.Join(strict...); err != nil {
		return nil, decodeError(err)
	}
	var c AgentConfiguration
	own := reflect.ValueOf(&c).Elem()
	for i := range own.NumField() {
		if own.Type().Field(i).IsExported() {
			own.Field(i).Set(v.Elem().Field(i))
		}
	}
	if c.APIVersion != APIVersion || c.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s %s", c.APIVersion, c.Kind, APIVersion, Kind)
	}
	errs := []error{c.check()}
	for i, f := range fields {
		errs = append(errs, f.settings("", v.Elem().Field(own.NumField()+i), &c.features))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeError rewords the JSON decoder's errors with the field's name.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: %s given, want %s", te.Field, te.Value, te.Type)
	}
	return errors.New(strings.ReplaceAll(err.Error(), "json: ", ""))
}

// field is a string field of the file and its name, for checks in the
// file's order.
type field struct {
	name string
	v    *string
}

// check checks the values a flag would refuse, with the field named.
func (c *AgentConfiguration) check() error {
	var errs []error
	prefixes := func(field string, ss []string) {
		errs = append(errs, checkList(field, ss, CIDR))
	}
	prefixes("clusterCIDRs", c.ClusterCIDRs)
	prefixes("serviceCIDRs", c.ServiceCIDRs)
	if !(len(c.NodePortAddresses) == 1 && c.NodePortAddresses[0] == "primary") {
		prefixes("nodePortAddresses", c.NodePortAddresses)
	}
	for _, f := range []struct {
		field, family string
		v             *string
	}{{"masqueradeSubnetV4", "IPv4", c.MasqueradeSubnetV4}, {"masqueradeSubnetV6", "IPv6", c.MasqueradeSubnetV6}} {
		if f.v == nil {
			continue
		}
		if p, err := netip.ParsePrefix(*f.v); err != nil || p.Addr().Is4() != (f.family == "IPv4") {
			errs = append(errs, fmt.Errorf("%s: %q is not an %s CIDR", f.field, *f.v, f.family))
		}
	}
	if c.HostCheckInterval != nil {
		errs = append(errs, checkValue("hostCheckInterval", *c.HostCheckInterval, PositiveDuration))
	}
	if c.DatapathType != nil && *c.DatapathType != "auto" && *c.DatapathType != "system" && *c.DatapathType != "netdev" {
		errs = append(errs, fmt.Errorf("datapathType: %q is not auto, system or netdev", *c.DatapathType))
	}
	if c.MTU != nil && (*c.MTU < 576 || *c.MTU > 9000) {
		errs = append(errs, fmt.Errorf("mtu: %d is not between 576 and 9000", *c.MTU))
	}
	if c.GCPercent != nil && (*c.GCPercent < 0 || *c.GCPercent > 1000) {
		errs = append(errs, fmt.Errorf("gcPercent: %d is not between 0 (Go's default) and 1000", *c.GCPercent))
	}
	if c.GCStartupFloor != nil && (*c.GCStartupFloor < 0 || *c.GCStartupFloor > 1<<20) {
		errs = append(errs, fmt.Errorf("gcStartupFloor: %d is not between 0 and 1048576 (MiB)", *c.GCStartupFloor))
	}
	if c.NamespaceBudget != nil && *c.NamespaceBudget < 0 {
		errs = append(errs, fmt.Errorf("namespaceBudget: %d is negative (0 is no budget)", *c.NamespaceBudget))
	}
	for _, f := range []field{{"podBridge", c.PodBridge}, {"gatewayBridge", c.GatewayBridge}, {"uplink", c.Uplink}, {"ovsRundir", c.OVSRundir}} {
		if f.v != nil && *f.v == "" {
			errs = append(errs, fmt.Errorf("%s: empty", f.name))
		}
	}
	return errors.Join(errs...)
}

// Settings lists the flags the file sets: the agent's own fields', in
// their order, then the features' fields', in the order they are
// declared.
func (c *AgentConfiguration) Settings() []Setting {
	var out []Setting
	str := func(flag, field string, v *string) {
		if v != nil {
			out = append(out, Setting{Flag: flag, Field: field, Value: *v})
		}
	}
	list := func(flag, field string, v []string) {
		if v != nil {
			out = append(out, Setting{Flag: flag, Field: field, Value: strings.Join(v, ",")})
		}
	}
	str("kubeconfig", "kubeconfig", c.Kubeconfig)
	if c.KubeAPIQPS != nil {
		out = append(out, Setting{Flag: "kube-api-qps", Field: "kubeAPIQPS", Value: strconv.FormatFloat(*c.KubeAPIQPS, 'g', -1, 64)})
	}
	if c.KubeAPIBurst != nil {
		out = append(out, Setting{Flag: "kube-api-burst", Field: "kubeAPIBurst", Value: strconv.Itoa(*c.KubeAPIBurst)})
	}
	str("node-name", "nodeName", c.NodeName)
	str("ovs-rundir", "ovsRundir", c.OVSRundir)
	str("pod-bridge", "podBridge", c.PodBridge)
	str("gateway-bridge", "gatewayBridge", c.GatewayBridge)
	str("uplink", "uplink", c.Uplink)
	str("datapath-type", "datapathType", c.DatapathType)
	list("cluster-cidr", "clusterCIDRs", c.ClusterCIDRs)
	list("service-cidr", "serviceCIDRs", c.ServiceCIDRs)
	str("masquerade-subnet-v4", "masqueradeSubnetV4", c.MasqueradeSubnetV4)
	str("masquerade-subnet-v6", "masqueradeSubnetV6", c.MasqueradeSubnetV6)
	if c.MTU != nil {
		out = append(out, Setting{Flag: "mtu", Field: "mtu", Value: strconv.Itoa(*c.MTU)})
	}
	str("health-addr", "healthAddr", c.HealthAddr)
	str("socket", "socket", c.Socket)
	str("cni-conf-dir", "cniConfDir", c.CNIConfDir)
	str("cni-data-dir", "cniDataDir", c.CNIDataDir)
	str("host-check-interval", "hostCheckInterval", c.HostCheckInterval)
	str("proc-sys-net", "procSysNet", c.ProcSysNet)
	if c.GCPercent != nil {
		out = append(out, Setting{Flag: "gc-percent", Field: "gcPercent", Value: strconv.Itoa(*c.GCPercent)})
	}
	if c.GCStartupFloor != nil {
		out = append(out, Setting{Flag: "gc-startup-floor", Field: "gcStartupFloor", Value: strconv.Itoa(*c.GCStartupFloor)})
	}
	list("nodeport-addresses", "nodePortAddresses", c.NodePortAddresses)
	if c.NamespaceBudget != nil {
		out = append(out, Setting{Flag: "namespace-budget", Field: "namespaceBudget", Value: strconv.Itoa(*c.NamespaceBudget)})
	}
	return append(out, c.features...)
}
