package netstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"nodeflow/host/cni"
)

// CNINetworkName is the name of the network in the CNI configuration the
// agent writes.
const CNINetworkName = "nodeflow"

// CNIConfig is what the agent's CNI configuration says.
type CNIConfig struct {
	// ConfDir receives 10-nodeflow.conf; "" writes nothing.
	ConfDir string
	// DataDir is the plugin's IPAM directory; the network's allocations
	// live in DataDir/CNINetworkName.
	DataDir      string
	OVSDB        string
	DatapathType string
	MTU          int
	Subnets      []netip.Prefix
	// Reserved are addresses the IPAM must never hand to a pod (mp0's);
	// ReservedFor names what holds them ("mp0").
	Reserved    []netip.Addr
	ReservedFor string
}

// WriteCNIConfig reserves c.Reserved in the IPAM store and writes the CNI
// configuration, each only when it differs from what is there. It reports
// whether it changed anything.
func WriteCNIConfig(c CNIConfig) (bool, error) {
	if c.ConfDir == "" {
		return false, nil
	}
	changed := false
	store := filepath.Join(c.DataDir, CNINetworkName)
	if err := os.MkdirAll(store, 0o755); err != nil {
		return false, fmt.Errorf("hostnet: cni ipam dir %s: %w", store, err)
	}
	for _, a := range c.Reserved {
		path := filepath.Join(store, a.String())
		b, err := os.ReadFile(path)
		if err == nil {
			if !bytes.HasPrefix(b, []byte("nodeflow-agent\n")) {
				return changed, fmt.Errorf("hostnet: cni ipam: %s (reserved for %s) is allocated to %q", a, c.ReservedFor, bytes.TrimSpace(b))
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return changed, fmt.Errorf("hostnet: cni ipam: %w", err)
		}
		// Written under a temporary name and linked into place, as the
		// plugin does, so that a concurrent allocation cannot interleave.
		tmp := filepath.Join(store, ".tmp-agent-"+a.String())
		if err := os.WriteFile(tmp, []byte("nodeflow-agent\n"+c.ReservedFor+"\n"), 0o644); err != nil {
			return changed, fmt.Errorf("hostnet: cni ipam: %w", err)
		}
		err = os.Link(tmp, path)
		_ = os.Remove(tmp)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return changed, fmt.Errorf("hostnet: cni ipam: reserve %s: %w", a, err)
		}
		changed = true
	}
	var subnets []string
	for _, p := range c.Subnets {
		subnets = append(subnets, p.String())
	}
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": CNINetworkName, "type": cni.PluginType,
		"ovsdb": c.OVSDB, "datapathType": c.DatapathType, "mtu": c.MTU,
		"ipam": map[string]any{"subnets": subnets, "dataDir": c.DataDir},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return changed, err
	}
	b = append(b, '\n')
	path := filepath.Join(c.ConfDir, "10-nodeflow.conf")
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return changed, nil
	}
	if err := os.MkdirAll(c.ConfDir, 0o755); err != nil {
		return changed, fmt.Errorf("hostnet: cni conf dir: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return changed, fmt.Errorf("hostnet: cni conf: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return changed, fmt.Errorf("hostnet: cni conf: %w", err)
	}
	return true, nil
}
