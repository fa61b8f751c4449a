package testbed

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A Ginkgo JSON report in the shape e2e.test writes (--ginkgo.json-report).
const ginkgoJSON = `[{
 "SuiteDescription": "Kubernetes e2e suite", "RunTime": 90000000000,
 "SpecReports": [
  {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
  {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeText": "should serve a basic endpoint from pods [Conformance]",
   "LeafNodeType": "It", "State": "passed", "RunTime": 8000000000},
  {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeText": "should be able to create a functioning NodePort service [Conformance]",
   "LeafNodeType": "It", "State": "failed", "RunTime": 30000000000,
   "Failure": {"Message": "service is not reachable within 2m0s timeout on endpoint 172.30.0.11:31000", "Location": {"FileName": "service.go", "LineNumber": 1300}}},
  {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeText": "should work after restarting kube-proxy [Disruptive]",
   "LeafNodeType": "It", "State": "skipped"},
  {"ContainerHierarchyTexts": ["[sig-network] Networking"], "LeafNodeText": "should function for node-pod communication: sctp [Feature:SCTPConnectivity]",
   "LeafNodeType": "It", "State": "skipped"},
  {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeText": "should have session affinity timeout work [Conformance]",
   "LeafNodeType": "It", "State": "skipped", "Failure": {"Message": "Requires at least 2 nodes (not 1)"}},
  {"ContainerHierarchyTexts": ["[sig-storage] CSI"], "LeafNodeText": "should mount", "LeafNodeType": "It", "State": "skipped"}
 ]}]`

func TestReadConformanceReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte(ginkgoJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	o := ConformanceOptions{Focus: ConformanceSubsets["sig-network"]}
	res, err := readConformanceReport(path, o.Focus, o.skipRegexp())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Passed) != 1 || len(res.Failed) != 1 || len(res.Skipped) != 1 {
		t.Fatalf("passed %v, failed %v, skipped %v; want one each (the suite node, the left-out and the unfocused tests not counted)",
			res.Passed, res.Failed, res.Skipped)
	}
	if f := res.Failed[0]; !strings.Contains(f.Name, "functioning NodePort") || !strings.Contains(f.Reason, "not reachable") || f.RunTime != 30*time.Second {
		t.Errorf("failure %+v", f)
	}
	if s := res.Skipped[0]; !strings.Contains(s.Reason, "at least 2 nodes") {
		t.Errorf("skipped %+v: want the test's own reason", s)
	}
	var b strings.Builder
	res.WriteMarkdown(&b, o)
	for _, want := range []string{"**1 passed, 1 failed, 1 skipped**", "## Failed (1)", "not reachable within", "should serve a basic endpoint"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := readConformanceReport(filepath.Join(t.TempDir(), "missing.json"), o.Focus, o.skipRegexp()); err == nil {
		t.Error("a missing report: no error")
	}
}

func TestSkipsFollowTheDatapath(t *testing.T) {
	const large = "[sig-network] Networking Granular Checks: Services should be able to handle large requests: udp"
	for v, skipped := range map[string]bool{"3.1.0": true, "3.1.7": false, "3.5.0": false} {
		re := regexp.MustCompile(ConformanceOptions{Versions: Versions{OVS: v}}.skipRegexp())
		if re.MatchString(large) != skipped {
			t.Errorf("Open vSwitch %s: large UDP test skipped %v, want %v", v, !skipped, skipped)
		}
	}
	if v := VswitchdVersion(); v != "" && !regexp.MustCompile(`^\d+\.\d+\.\d+`).MatchString(v) {
		t.Errorf("VswitchdVersion() = %q, not a version", v)
	}
}

func TestIperfSkip(t *testing.T) {
	const name = "[sig-network] Networking IPerf2 [Feature:Networking-Performance] should run iperf2"
	for v, skipped := range map[string]bool{"2.1.8": true, "2.2.0": false, "2.2.1": false, "3.0.0": false, "": true} {
		re := regexp.MustCompile(ConformanceOptions{Versions: Versions{OVS: "3.5.0", Iperf: v}}.skipRegexp())
		if re.MatchString(name) != skipped {
			t.Errorf("iperf %q: skipped %v, want %v", v, re.MatchString(name), skipped)
		}
	}
	if v := iperfVersion(); v != "" && !atLeast(v, 2, 0, 0) {
		t.Errorf("iperfVersion() = %q", v)
	}
}
