package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/testbed"
)

// release is one row of docs/releases.md.
type release struct {
	version, commit string
	pipeline        int
}

var releaseRow = regexp.MustCompile(`^\| (v[0-9][^ |]*) \| ([0-9a-f]{40}) \| ([0-9]+) \|`)

// lastRelease reads the last release of docs/releases.md.
func lastRelease(t *testing.T) release {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "docs", "releases.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last release
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := releaseRow.FindStringSubmatch(sc.Text()); m != nil {
			last = release{version: m[1], commit: m[2]}
			fmt.Sscan(m[3], &last.pipeline)
		}
	}
	if last.commit == "" {
		t.Fatal("docs/releases.md lists no release")
	}
	return last
}

// repoRoot is the repository's top directory (the tests run in
// testbed/e2e).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildRelease builds nodeflow from the commit of r, from the repository's
// history (git archive), stamped with its version.
func buildRelease(t *testing.T, r release) string {
	t.Helper()
	root := repoRoot(t)
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", r.commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archiveErr strings.Builder
	archive.Stderr = &archiveErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("release %s: git archive %s (the test needs the repository's history): %v\n%s", r.version, r.commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("release %s: untar: %v", r.version, err)
	}
	bin := filepath.Join(t.TempDir(), "nodeflow-"+r.version)
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+r.version+" -X main.commit="+r.commit, "-o", bin, "./cmd/nodeflow")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("release %s: build: %v\n%s", r.version, err, out)
	}
	return bin
}

// noteRE finds the note action of a dump-flows line, in ofp-print's
// dotted hex.
var noteRE = regexp.MustCompile(`note:([0-9a-f.]+)`)

// versionNote reads the version note of m's br0 with ovs-ofctl.
func versionNote(t *testing.T, m *testbed.Member) reconcile.Note {
	t.Helper()
	out := ofctl(t, m, "dump-flows", "br0", fmt.Sprintf("table=%d", plan.VersionTable))
	hexNote := noteRE.FindStringSubmatch(out)
	if hexNote == nil {
		t.Fatalf("%s: br0 has no version note:\n%s", m.Name, out)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(hexNote[1], ".", ""))
	if err != nil {
		t.Fatalf("%s: br0's version note %q: %v", m.Name, hexNote[1], err)
	}
	n, ok := reconcile.ParseNote(strings.TrimRight(string(b), "\x00"))
	if !ok {
		t.Fatalf("%s: br0's version note %q", m.Name, b)
	}
	return n
}

// TestUpgradeZeroLoss rolls every node's agent back to the last release
// (docs/releases.md, built from its commit) one node at a time, as the
// DaemonSet's rolling update does, and forward again to this build, under
// continuous traffic through a dual-stack Service from pods on both nodes:
// no request may fail (a kept-alive connection made again is logged). When the
// release has another pipeline version, both directions cross it (the
// version notes on br0 show each). The agents it leaves are this build's,
// started by the test.
//
// Its file sorts before zy_namespace_ids_test.go, whose 5,000 namespaces
// stay to the end: v0.2.0 builds its first flows before its informers'
// handlers have taken in every namespace, and among thousands of them its
// start-up deletes and re-adds pods' flows and loses packets (fixed since,
// docs/benchmarks.md, "A restart that changes nothing"). This build's own
// restart among them is checked by TestNamespaceIDs.
func TestUpgradeZeroLoss(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	rel := lastRelease(t)
	old := buildRelease(t, rel)
	ags := newAgents(t, e)
	// A test before may have left a node without its agent.
	for _, n := range []string{"node1", "node2"} {
		ags.ensure(n)
	}
	ns := createNamespace(t, e, "e2e-upgrade")
	clients, vips := serviceUnderTraffic(t, e, ns)
	var nodes []*testbed.Member
	for i := range e.state.Members {
		if m := &e.state.Members[i]; m.Kubeconfig != "" {
			nodes = append(nodes, m)
		}
	}
	current := agentVersion(t, e.state.Nodeflow)
	t.Cleanup(func() {
		// Whatever happened, the nodes keep an agent of this build.
		for _, m := range nodes {
			if n := versionNote(t, m); n.Pipeline != plan.PipelineVersion || n.Agent != current {
				ags.stop(m.Name)
			}
			ags.ensure(m.Name)
		}
	})
	for _, m := range nodes {
		if n := versionNote(t, m); n.Pipeline != plan.PipelineVersion {
			t.Fatalf("%s before: pipeline %d, want %d", m.Name, n.Pipeline, plan.PipelineVersion)
		}
	}

	settled(t, e) // nothing torn down under the traffic but by the roll
	traffic := startServiceTraffic(t, clients, vips)
	traffic.watchNodes(nodes)
	roll := func(to string, bin, version string, pipeline int) {
		for _, m := range nodes {
			start := time.Now()
			t.Logf("%s: %s: stopping the agent at %s", m.Name, to, start.Format("15:04:05.000"))
			ags.stop(m.Name)
			startLastingAgentBinary(t, e, m, bin)
			eventually(t, 60*time.Second, m.Name+" agent "+to+" ready", func(ctx context.Context) error {
				if err := agentReady(ctx, m); err != nil {
					return err
				}
				// Pipeline 1 wrote no agent version.
				if n := versionNote(t, m); n.Pipeline != pipeline || (pipeline > 1 && n.Agent != version) {
					return fmt.Errorf("version note %+v", n)
				}
				return nil
			})
			t.Logf("%s: %s, ready with pipeline %d in %s (at %s)", m.Name, to, pipeline, time.Since(start).Round(time.Millisecond), time.Now().Format("15:04:05.000"))
			traffic.settle(t, m.Name+" "+to)
		}
	}
	roll("rolled back to "+rel.version, old, rel.version, rel.pipeline)
	if rel.pipeline == plan.PipelineVersion {
		// A release of the same pipeline writes "agent=" too.
		t.Logf("release %s has this build's pipeline %d: no pipeline change crossed", rel.version, rel.pipeline)
	}
	roll("upgraded to this build", e.state.Nodeflow, current, plan.PipelineVersion)
	traffic.finish(t, "rolled back to "+rel.version+" and upgraded again")
	if rel.pipeline != plan.PipelineVersion {
		from, to := fmt.Sprintf("from=%d ", rel.pipeline), fmt.Sprintf("to=%d", plan.PipelineVersion)
		for _, m := range nodes {
			b, err := os.ReadFile(filepath.Join(m.Dir, "agent-e2e.log"))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, l := range strings.Split(string(b), "\n") {
				found = found || strings.Contains(l, "pipeline upgrade") && strings.Contains(l, from) && strings.Contains(l, to)
			}
			if !found {
				t.Errorf("%s: the agent logged no pipeline upgrade %s%s", m.Name, from, to)
			}
		}
	}
	for _, m := range nodes {
		checkMetrics(t, m)
	}
}

// agentVersion is the version a nodeflow binary writes into its notes.
func agentVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		t.Fatalf("%s version: %q", bin, out)
	}
	return f[1]
}
