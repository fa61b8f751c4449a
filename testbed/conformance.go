package testbed

import (
	"encoding/json"
	"fmt"
	"io"
	"nodeflow/datapath/conntrack"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Conformance runs Kubernetes' own e2e tests (the upstream e2e.test,
// testbed/tools/build.sh e2e.test) against a testbed and reports them:
// passed, failed, skipped, each failure with its reason.

// ConformanceSubsets are the named selections of `testbed conformance`.
var ConformanceSubsets = map[string]string{
	// services is the Services [Conformance] subset that `make test` runs.
	"services": `\[sig-network\] Services .*\[Conformance\]`,
	// conformance is every [sig-network] [Conformance] test.
	"conformance": `\[sig-network\].*\[Conformance\]`,
	// netpol is the NetworkPolicy tests, which `make test` runs too.
	"netpol": `\[sig-network\] Netpol`,
	// sig-network is all of [sig-network].
	"sig-network": `\[sig-network\]`,
	// zones is the tests that want more nodes than the default testbed's
	// two: the topology-aware routing tests (three zones of two nodes),
	// and the health-check node port test (three nodes). They run on
	// testbed/topology/zones.yaml.
	"zones": `\[sig-network\] (Traffic Distribution|Topology Hints) |HealthCheckNodePort correctly when ExternalTrafficPolicy changes`,
}

// ConformanceSkip is a set of upstream tests the testbed does not run, and
// why: what they need is not something the testbed can give (docs/conformance.md).
type ConformanceSkip struct {
	Pattern, Reason string
}

// ConformanceSkips are the tests left out of every run.
var ConformanceSkips = []ConformanceSkip{
	{`\[Disruptive\]`, "restarts or cuts off nodes, the kubelet or the control plane over SSH or a cloud API; the testbed's nodes are network namespaces of one supervisor, with no SSH and no provider"},
	{`\[Flaky\]`, "marked flaky upstream and left out of every upstream conformance job"},
	{`LoadBalancer|ESIPP`, "needs a cloud load balancer, which the testbed has no provider for"},
	{`\[Feature:SCTPConnectivity\]`, "needs SCTP in the kernel, which the test machines' kernels lack (no sctp module)"},
	{`\[Feature:Ingress\]`, "needs an Ingress controller of a cloud provider (GCE)"},
	{`\[Feature:KubeProxy[^\]]*\]|\[sig-network\] KubeProxy `, "tests kube-proxy itself (its DaemonSet migration, its conntrack accounting, the kernel conntrack timeouts it sets), which nodeflow replaces: nodeflow tracks connections in OVS's conntrack, not the kernel's"},
	{`\[Feature:Networking-(IPv4|IPv6|DNS)\]|Forward PTR lookup`, "reaches the Internet (8.8.8.8, Google's IPv6 resolver, google.com, the reverse name of 8.8.8.8 through the Internet's DNS); the testbed's networks have no route out (its external hosts stand in for the Internet)"},
}

// OldDatapathSkips are the tests left out when the node's Open vSwitch
// userspace datapath lacks the fix that gives an IP datagram's later
// fragments their connection's ports (conntrack.FragmentPortsFixed): each
// sends a UDP datagram larger than the MTU through a Service, whose later
// fragments such a datapath cannot match to the service. Open vSwitch's
// bug, not nodeflow's: nodeflow's flows match the connection's ports, and
// pass these tests on a datapath with the fix.
var OldDatapathSkips = []ConformanceSkip{
	{`Granular Checks: Services should be able to handle large requests: udp|should function for service endpoints using hostNetwork`,
		"sends a UDP datagram larger than the MTU through a Service: this Open vSwitch's userspace datapath gives its later fragments no ports (fixed in 2.17.12, 3.0.8, 3.1.7, 3.2.5, 3.3.4, 3.4.2, 3.5.0)"},
}

// OldIperfSkips are the tests left out when the nodes' iperf is older than
// 2.2.0: the upstream test parses the 17 CSV fields of iperf 2.2's
// enhanced report, which the upstream agnhost image ships and older iperf
// does not print (Debian 12 has 2.1.8). The testbed runs the image's
// programs from the node's packages and cannot fetch another iperf.
var OldIperfSkips = []ConformanceSkip{
	{`IPerf2.* should run iperf2`, "parses iperf 2.2's 17-field CSV report; the nodes' iperf is older (Debian 12: 2.1.8) and the testbed cannot fetch the image's"},
}

// Versions are the versions of the node software some upstream tests
// depend on.
type Versions struct {
	// OVS is ovs-vswitchd's ("3.1.0"), Iperf iperf's ("2.1.8"); "" when
	// unknown.
	OVS, Iperf string
}

// DetectVersions asks ovs-vswitchd and iperf for their versions.
func DetectVersions() Versions {
	return Versions{OVS: VswitchdVersion(), Iperf: iperfVersion()}
}

// Skips returns the tests left out of a run against nodes with versions
// v: ConformanceSkips, and OldDatapathSkips and OldIperfSkips when those
// versions need them.
func Skips(v Versions) []ConformanceSkip {
	out := slices.Clone(ConformanceSkips)
	if !conntrack.FragmentPortsFixed(v.OVS) {
		out = append(out, OldDatapathSkips...)
	}
	if !atLeast(v.Iperf, 2, 2, 0) {
		out = append(out, OldIperfSkips...)
	}
	return out
}

// atLeast reports whether version ("2.1.8") is at least major.minor.patch;
// an unparsable one is not.
func atLeast(version string, major, minor, patch int) bool {
	v, ok := conntrack.ParseVersion(version)
	return ok && conntrack.CompareVersion(v, [3]int{major, minor, patch}) >= 0
}

// VswitchdVersion returns the version ovs-vswitchd --version prints
// ("3.1.0"), or "" when it cannot tell.
func VswitchdVersion() string {
	out, err := exec.Command("ovs-vswitchd", "--version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(out), "\n")
	fields := strings.Fields(first)
	if len(fields) == 0 {
		return ""
	}
	return fields[len(fields)-1]
}

// iperfVersion returns the version `iperf -v` prints ("iperf version
// 2.1.8 (12 August 2022) pthreads"), or "".
func iperfVersion() string {
	out, _ := exec.Command("iperf", "-v").CombinedOutput()
	f := strings.Fields(string(out))
	if len(f) >= 3 && f[0] == "iperf" && f[1] == "version" {
		return f[2]
	}
	return ""
}

// ConformanceOptions configure RunConformance.
type ConformanceOptions struct {
	// E2ETest is the e2e.test binary.
	E2ETest string
	// Ginkgo is the ginkgo runner (testbed/tools/build.sh ginkgo); with
	// Procs above 1 it runs the tests in that many processes ([Serial]
	// tests alone, at the end).
	Ginkgo string
	Procs  int
	// Kubeconfig is the cluster's admin kubeconfig.
	Kubeconfig string
	// NumNodes is the number of Kubernetes nodes (the tests that need
	// several nodes skip themselves without it).
	NumNodes int
	// Focus selects the tests (a regular expression on the full name).
	Focus string
	// Versions are the nodes' software versions, which decide some skips
	// (Skips).
	Versions Versions
	// Skip leaves out tests besides Skips ("" for none).
	Skip string
	// OutDir receives e2e.log, report.json and report.md.
	OutDir string
	// Timeout bounds the run (zero: 3 hours).
	Timeout time.Duration
	// Log receives e2e.test's progress as it runs (nil: only e2e.log).
	Log io.Writer
}

// ConformanceResult is a run's outcome.
type ConformanceResult struct {
	Passed, Failed, Skipped []ConformanceSpec
	RunTime                 time.Duration
}

// ConformanceSpec is one test of a run.
type ConformanceSpec struct {
	Name    string
	RunTime time.Duration
	// Reason is a failure's message, or why a test skipped itself.
	Reason string
}

// skipRegexp is the run's skip expression.
func (o ConformanceOptions) skipRegexp() string {
	var parts []string
	for _, s := range Skips(o.Versions) {
		parts = append(parts, s.Pattern)
	}
	if o.Skip != "" {
		parts = append(parts, o.Skip)
	}
	return strings.Join(parts, "|")
}

// RunConformance runs e2e.test with the options and writes the report. It
// returns the result; a run with failures is not an error.
func RunConformance(o ConformanceOptions) (*ConformanceResult, error) {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Hour
	}
	report := filepath.Join(o.OutDir, "report.json")
	_ = os.Remove(report)
	logf, err := os.Create(filepath.Join(o.OutDir, "e2e.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	e2eFlags := []string{"--kubeconfig", o.Kubeconfig, "--provider", "skeleton", "--report-dir", o.OutDir}
	if o.NumNodes > 0 {
		e2eFlags = append(e2eFlags, "--num-nodes", strconv.Itoa(o.NumNodes))
	}
	ginkgoFlags := []string{"focus", o.Focus, "skip", o.skipRegexp(), "timeout", o.Timeout.String(), "json-report", report}
	var cmd *exec.Cmd
	if o.Procs > 1 && o.Ginkgo != "" {
		args := []string{"--procs", strconv.Itoa(o.Procs), "--no-color", "--silence-skips", "--output-dir", o.OutDir}
		for i := 0; i < len(ginkgoFlags); i += 2 {
			args = append(args, "--"+ginkgoFlags[i], ginkgoFlags[i+1])
		}
		args[len(args)-1] = filepath.Base(report) // ginkgo writes it in --output-dir
		cmd = exec.Command(o.Ginkgo, append(append(args, o.E2ETest, "--"), e2eFlags...)...)
	} else {
		args := append([]string(nil), e2eFlags...)
		for i := 0; i < len(ginkgoFlags); i += 2 {
			args = append(args, "--ginkgo."+ginkgoFlags[i], ginkgoFlags[i+1])
		}
		cmd = exec.Command(o.E2ETest, append(args, "--ginkgo.no-color", "--ginkgo.silence-skips")...)
	}
	cmd.Dir = o.OutDir
	var out io.Writer = logf
	if o.Log != nil {
		out = io.MultiWriter(logf, o.Log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	runErr := cmd.Run()
	res, err := readConformanceReport(report, o.Focus, o.skipRegexp())
	if err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("e2e.test: %v (see %s): %w", runErr, logf.Name(), err)
		}
		return nil, err
	}
	md, err := os.Create(filepath.Join(o.OutDir, "report.md"))
	if err != nil {
		return nil, err
	}
	defer md.Close()
	res.WriteMarkdown(md, o)
	return res, nil
}

// ginkgoReport is the part of Ginkgo's JSON report that the report reads.
type ginkgoReport struct {
	RunTime     time.Duration
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		RunTime                 time.Duration
		Failure                 *struct {
			Message  string
			Location struct {
				FileName   string
				LineNumber int
			}
		}
	}
}

// readConformanceReport reads Ginkgo's JSON report: the tests that focus
// selects and skip does not, by outcome.
func readConformanceReport(path, focus, skip string) (*ConformanceResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("conformance report: %w", err)
	}
	var reports []ginkgoReport
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("conformance report %s: %w", path, err)
	}
	fre, err := regexp.Compile(focus)
	if err != nil {
		return nil, fmt.Errorf("focus %q: %w", focus, err)
	}
	sre, err := regexp.Compile(skip)
	if err != nil {
		return nil, fmt.Errorf("skip %q: %w", skip, err)
	}
	res := &ConformanceResult{}
	for _, r := range reports {
		res.RunTime += r.RunTime
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "" && s.LeafNodeType != "It" {
				continue // suite set-up and tear-down nodes
			}
			name := strings.TrimSpace(strings.Join(append(append([]string(nil), s.ContainerHierarchyTexts...), s.LeafNodeText), " "))
			if !fre.MatchString(name) || sre.MatchString(name) {
				continue
			}
			spec := ConformanceSpec{Name: name, RunTime: s.RunTime}
			if s.Failure != nil {
				spec.Reason = strings.TrimSpace(s.Failure.Message)
			}
			switch s.State {
			case "passed":
				res.Passed = append(res.Passed, spec)
			case "skipped", "pending":
				res.Skipped = append(res.Skipped, spec)
			default: // failed, panicked, timedout, interrupted, aborted
				if spec.Reason == "" {
					spec.Reason = s.State
				}
				res.Failed = append(res.Failed, spec)
			}
		}
	}
	for _, l := range [][]ConformanceSpec{res.Passed, res.Failed, res.Skipped} {
		sort.Slice(l, func(i, j int) bool { return l[i].Name < l[j].Name })
	}
	return res, nil
}

// WriteMarkdown writes the run's report.
func (r *ConformanceResult) WriteMarkdown(w io.Writer, o ConformanceOptions) {
	fmt.Fprintf(w, "# Conformance run, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- focus: `%s`\n- left out: every test matching `%s` (docs/conformance.md says why)\n", o.Focus, o.skipRegexp())
	fmt.Fprintf(w, "- **%d passed, %d failed, %d skipped**, in %s\n\n", len(r.Passed), len(r.Failed), len(r.Skipped), r.RunTime.Round(time.Second))
	section := func(title string, specs []ConformanceSpec, reasons bool) {
		if len(specs) == 0 {
			return
		}
		fmt.Fprintf(w, "## %s (%d)\n\n", title, len(specs))
		for _, s := range specs {
			fmt.Fprintf(w, "- %s (%s)\n", s.Name, s.RunTime.Round(100*time.Millisecond))
			if reasons && s.Reason != "" {
				msg := s.Reason
				if len(msg) > 600 {
					msg = msg[:600] + " …"
				}
				fmt.Fprintf(w, "  ```\n  %s\n  ```\n", strings.ReplaceAll(msg, "\n", "\n  "))
			}
		}
		fmt.Fprintln(w)
	}
	section("Failed", r.Failed, true)
	section("Skipped by the test itself", r.Skipped, true)
	section("Passed", r.Passed, false)
}
