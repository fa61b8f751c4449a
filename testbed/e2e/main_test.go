// Package e2e holds the testbed's end-to-end scenarios. They build the
// testbed and nodeflow binaries, bring up one testbed (default topology) for
// the whole run with `testbed up`, and take it down with `testbed down` in
// the last test, which asserts that nothing is left on the machine.
//
// They skip when the machine cannot run a testbed (not root, no Open
// vSwitch, no control-plane binaries: run `make testbed-deps`), and fail
// instead when NODEFLOW_REQUIRE_OVS is set, as `make test` and `make e2e` set it.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/testbed"
	"nodeflow/testbed/ovs"
)

// env is the shared testbed of a test run.
type env struct {
	binDir     string // built testbed and nodeflow binaries
	name       string // testbed name
	stateRoot  string
	state      *testbed.State
	client     kubernetes.Interface
	upDuration time.Duration
}

var (
	skipReason string
	setupOnce  sync.Once
	setupErr   error
	shared     *env
	buildOnce  sync.Once
	buildDir   string
	buildErr   error
)

func TestMain(m *testing.M) {
	switch {
	case os.Geteuid() != 0:
		skipReason = "needs root for network namespaces"
	case ovs.Check() != nil:
		skipReason = ovs.Check().Error()
	case testbed.CheckBinaries(testbed.DefaultBinDir()) != nil:
		skipReason = testbed.CheckBinaries(testbed.DefaultBinDir()).Error()
	}
	code := m.Run()
	stopLasting()
	if shared != nil && shared.state != nil {
		// The last test takes the testbed down; this is for runs that
		// skipped it (-run) or failed before it.
		if _, err := os.Stat(shared.state.Dir); err == nil {
			if _, err := testbed.Down(shared.state.Dir, false); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: testbed down:", err)
				code = 1
			}
		}
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// requirePrereqs skips or fails t when the machine cannot run a testbed.
func requirePrereqs(t testing.TB) {
	t.Helper()
	if skipReason == "" {
		return
	}
	if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
		t.Fatalf("testbed unavailable and NODEFLOW_REQUIRE_OVS is set: %s", skipReason)
	}
	t.Skipf("testbed unavailable: %s", skipReason)
}

// binaries builds bin/testbed and bin/nodeflow from this tree, once.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "nfe2e-bin-")
		if buildErr != nil {
			return
		}
		// `go test` puts its toolchain's bin directory first on PATH.
		cmd := exec.Command("go", "build", "-o", buildDir+"/", "nodeflow/cmd/testbed", "nodeflow/cmd/nodeflow")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// testbedCmd runs the built testbed binary.
func testbedCmd(t testing.TB, e *env, args ...string) (string, error) {
	t.Helper()
	full := append([]string{"--state-root", e.stateRoot, "--name", e.name}, args...)
	cmd := exec.Command(filepath.Join(e.binDir, "testbed"), full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// up brings the shared testbed up on first use.
func up(t testing.TB) *env {
	t.Helper()
	requirePrereqs(t)
	setupOnce.Do(func() {
		e := &env{binDir: binaries(t), name: fmt.Sprintf("e2e%d", os.Getpid()%100000), stateRoot: testbed.DefaultStateRoot}
		shared = e
		start := time.Now()
		cmd := exec.Command(filepath.Join(e.binDir, "testbed"), "--state-root", e.stateRoot, "up", "-t", writeTopology(t, e.name))
		out, err := cmd.CombinedOutput()
		e.upDuration = time.Since(start)
		if st, rerr := testbed.ReadState(filepath.Join(e.stateRoot, e.name)); rerr == nil {
			e.state = st
		}
		if err != nil {
			setupErr = fmt.Errorf("testbed up: %v\n%s", err, out)
			return
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", e.state.Kubeconfig)
		if err != nil {
			setupErr = err
			return
		}
		if e.client, err = kubernetes.NewForConfig(cfg); err != nil {
			setupErr = err
		}
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

// writeTopology writes the default topology renamed to name, so that the
// test run's testbed does not collide with one a developer has up.
func writeTopology(t testing.TB, name string) string {
	t.Helper()
	src, err := os.ReadFile("../topology/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(src), "name: nodeflow", "name: "+name, 1)
	p := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// terminate stops a process the test started: SIGTERM, and SIGKILL if it
// has not exited 10 seconds later. It waits for the process.
func terminate(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// adminConfig is a client configuration of the testbed's API server as
// admin; qps, unless 0, raises the client-side rate limit (burst twice
// that) for bulk requests.
func adminConfig(t testing.TB, e *env, qps float32) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.state.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if qps != 0 {
		cfg.QPS, cfg.Burst = qps, int(2*qps)
	}
	return cfg
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		if last = cond(ctx); last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s: %v", what, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Processes a test started that outlive it (an agent or ovs-vswitchd that
// replaced the testbed's own), stopped before the testbed goes down.
var (
	lastingMu sync.Mutex
	lasting   []*exec.Cmd
)

// keepRunning records a started cmd as lasting and reaps it when it exits
// (then calls done), so that a stopped process is gone.
func keepRunning(cmd *exec.Cmd, done func()) {
	go func() {
		_ = cmd.Wait()
		if done != nil {
			done()
		}
	}()
	lastingMu.Lock()
	lasting = append(lasting, cmd)
	lastingMu.Unlock()
}

// stopLasting stops the lasting processes that still run.
func stopLasting() {
	lastingMu.Lock()
	defer lastingMu.Unlock()
	for _, c := range lasting {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range lasting {
		for c.Process.Signal(syscall.Signal(0)) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // waiting for the exit, bounded
		}
		_ = c.Process.Kill()
	}
	lasting = nil
}
