package main

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyPackages are packages the binary must not link, and why.
var heavyPackages = map[string]string{
	// Two 2.5 MiB tables of pointers that the garbage collector scans on
	// every cycle: 5.2 MiB resident in every agent (docs/benchmarks.md).
	// The packet package reads and builds the agent's frames; tests may
	// use gopacket as their oracle.
	"github.com/gopacket/gopacket/layers": "5.2 MiB resident from its enum tables; use nodeflow/lib/packet",
}

// TestBinaryLeavesOutHeavyPackages: the agent's binary links none of
// heavyPackages.
func TestBinaryLeavesOutHeavyPackages(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not installed: the binary's packages cannot be listed")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps lists %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		if why, ok := heavyPackages[d]; ok {
			t.Errorf("the binary links %s: %s", d, why)
		}
	}
}
