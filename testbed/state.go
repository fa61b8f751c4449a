package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// DefaultStateRoot is where testbeds keep their state directories.
const DefaultStateRoot = "/run/nodeflow/testbed"

// Phases of a testbed's life, as the supervisor records them.
const (
	PhaseStarting = "starting"
	PhaseReady    = "ready"
	PhaseFailed   = "failed"
	PhaseStopping = "stopping"
)

// State is what the supervisor records about a running testbed.
type State struct {
	Name  string `json:"name"`
	Dir   string `json:"dir"`
	Phase string `json:"phase"`
	// Error explains PhaseFailed.
	Error         string `json:"error,omitempty"`
	SupervisorPID int    `json:"supervisorPID"`
	// APIServer is the API server's URL on the host's loopback.
	APIServer string `json:"apiServer"`
	// Kubeconfig is the admin kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// UnidlerKubeconfig is a kubeconfig with a token of nodeflow's
	// unidler's ServiceAccount (deploy/rbac/unidler.yaml), for
	// `nodeflow unidler`.
	UnidlerKubeconfig string `json:"unidlerKubeconfig,omitempty"`
	// IPAMKubeconfig is a kubeconfig with a token of the virtual networks'
	// IPAM controller's ServiceAccount (deploy/rbac/ipam.yaml), for
	// `nodeflow ipam`.
	IPAMKubeconfig string `json:"ipamKubeconfig,omitempty"`
	BinDir         string `json:"binDir"`
	Nodeflow       string `json:"nodeflow"`
	// Agent tells whether `nodeflow agent` runs on the nodes, and if not why.
	Agent       bool   `json:"agent"`
	AgentReason string `json:"agentReason,omitempty"`
	// AgentEnv is the environment every node's agent gets besides its
	// node's own settings (its resolver configuration, the cluster's
	// address policies): what a test that starts an agent gives it too.
	AgentEnv []string `json:"agentEnv,omitempty"`
	// NetnsPrefix prefixes every network namespace the testbed creates.
	NetnsPrefix string    `json:"netnsPrefix"`
	Members     []Member  `json:"members"`
	Processes   []Process `json:"processes"`
	// DNSSocket is the control socket of the DNS server on the external
	// host (DNSClient), and DNSServers its addresses; empty without one.
	DNSSocket  string   `json:"dnsSocket,omitempty"`
	DNSServers []string `json:"dnsServers,omitempty"`
	// ExternalNetworks are the networks the external host answers for
	// (ExternalV4, ExternalV6).
	ExternalNetworks []string `json:"externalNetworks,omitempty"`
	// Timings records how long the phases of `up` took.
	Timings map[string]string `json:"timings,omitempty"`
}

// Member is one topology member as it runs.
type Member struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	Netns     string   `json:"netns"`
	Addresses []string `json:"addresses"`
	// OVSRundir is the node's OVS run directory ("" for hosts and bridges).
	OVSRundir string `json:"ovsRundir,omitempty"`
	// Dir is the node's state directory ("" for hosts and bridges).
	Dir string `json:"dir,omitempty"`
	// Kubeconfig is the agent's kubeconfig, usable inside the node's namespace.
	Kubeconfig string `json:"kubeconfig,omitempty"`
}

// Process is a long-running process of the testbed.
type Process struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

// StateFile is the path of the state file in dir.
func StateFile(dir string) string { return filepath.Join(dir, "state.json") }

// ReadState reads the state of the testbed in dir.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(StateFile(dir))
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("testbed: %s: %w", StateFile(dir), err)
	}
	return &s, nil
}

// write stores the state atomically.
func (s *State) write() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := StateFile(s.Dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("testbed: write state: %w", err)
	}
	return os.Rename(tmp, StateFile(s.Dir))
}

// Member returns the member named name.
func (s *State) Member(name string) (*Member, bool) {
	for i := range s.Members {
		if s.Members[i].Name == name {
			return &s.Members[i], true
		}
	}
	return nil, false
}

// Alive reports whether the supervisor process runs.
func (s *State) Alive() bool { return pidAlive(s.SupervisorPID) }

func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie counts as gone.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
		return false
	}
	return true
}

// List returns the names of the testbeds with a state directory under root.
func List(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(StateFile(filepath.Join(root, e.Name()))); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
