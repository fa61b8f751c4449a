package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodeflow/testbed"
)

// TestUpstreamServicesConformance runs Kubernetes' own Services
// [Conformance] tests (the upstream e2e.test at the testbed's version)
// against the shared testbed, in two processes, as `testbed conformance
// --subset services --procs 2` does. The report is kept in
// $NODEFLOW_CONFORMANCE_OUT if that is set.
func TestUpstreamServicesConformance(t *testing.T) { runUpstream(t, "services") }

// TestUpstreamNetworkPolicy runs Kubernetes' own NetworkPolicy tests
// (`[sig-network] Netpol`: the 9-pod matrix, every policy case, probed with
// real traffic through the pods' Services) as `testbed conformance --subset
// netpol --procs 2` does; the report goes to
// $NODEFLOW_CONFORMANCE_OUT/netpol if that is set.
func TestUpstreamNetworkPolicy(t *testing.T) { runUpstream(t, "netpol") }

// runUpstream runs one subset of the upstream tests against the shared
// testbed and fails on any upstream failure.
func runUpstream(t *testing.T, subset string) {
	e := up(t)
	requireTool(t, "agnhost", testbed.DefaultAgnhost())
	requireTool(t, "coredns", testbed.DefaultCoreDNS())
	requireTool(t, "e2e.test", testbed.DefaultE2ETest())
	requireTool(t, "ginkgo", testbed.DefaultGinkgo())
	out := os.Getenv("NODEFLOW_CONFORMANCE_OUT")
	if out == "" {
		out = t.TempDir()
	} else if subset != "services" {
		out = filepath.Join(out, subset)
	}
	res, err := testbed.RunConformance(testbed.ConformanceOptions{
		E2ETest: testbed.DefaultE2ETest(), Ginkgo: testbed.DefaultGinkgo(), Procs: 2, Kubeconfig: e.state.Kubeconfig, NumNodes: 2,
		Focus: testbed.ConformanceSubsets[subset], Versions: testbed.DetectVersions(), OutDir: out, Timeout: 40 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d passed, %d failed, %d skipped in %s", subset, len(res.Passed), len(res.Failed), len(res.Skipped), res.RunTime.Round(time.Second))
	if len(res.Passed) == 0 {
		t.Errorf("no upstream test passed (see %s)", filepath.Join(out, "e2e.log"))
	}
	for _, f := range res.Failed {
		t.Errorf("FAILED %s:\n%s", f.Name, indent(f.Reason))
	}
}

func indent(s string) string {
	if len(s) > 2000 {
		s = s[:2000] + " …"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
