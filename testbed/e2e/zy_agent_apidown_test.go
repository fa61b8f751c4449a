package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/testbed"
)

// brokenKubeconfigs writes three kubeconfigs the agent cannot use, made
// from m's: one with a typo (a tab where YAML wants spaces), one whose
// token the API server refuses, one whose server does not answer.
func brokenKubeconfigs(t *testing.T, m *testbed.Member) (typo, badToken, noServer string) {
	t.Helper()
	dir := t.TempDir()
	orig, err := os.ReadFile(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	typo = filepath.Join(dir, "typo.kubeconfig")
	broken := strings.Replace(string(orig), "\nclusters:\n", "\nclusters:\n\t", 1)
	if broken == string(orig) {
		t.Fatalf("%s has no clusters: line to break", m.Kubeconfig)
	}
	if err := os.WriteFile(typo, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Token = "not-the-agent-s-token"
	}
	badToken = filepath.Join(dir, "bad-token.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, badToken); err != nil {
		t.Fatal(err)
	}
	cfg, _ = clientcmd.LoadFromFile(m.Kubeconfig)
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:1" // nothing listens there
	}
	noServer = filepath.Join(dir, "no-server.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, noServer); err != nil {
		t.Fatal(err)
	}
	return typo, badToken, noServer
}

// checkBeforeTaking runs agents that cannot use their kubeconfig on m, a
// node without nodeflow (as the testbed recorded it before its agent first
// started: before): each leaves the node exactly as it was, links,
// addresses, routes, sysctls, bridges and CNI configuration, and says what
// is wrong. A kubeconfig with a typo stops the agent at once; credentials
// the API server refuses, or an API server that does not answer, keep it
// waiting, not ready, /readyz saying why. Then the agent with its own
// kubeconfig takes the node.
func checkBeforeTaking(t *testing.T, e *env, m *testbed.Member, before *testbed.NodeSnapshot) {
	typo, badToken, noServer := brokenKubeconfigs(t, m)
	unchanged := func(when string) {
		t.Helper()
		if diff := before.Diff(snapshot(t, m)); len(diff) > 0 {
			t.Fatalf("%s: %s changed (- before, + now):\n%s", when, m.Name, strings.Join(diff, "\n"))
		}
	}
	unchanged("before the agents")

	t.Run("kubeconfig-with-a-typo", func(t *testing.T) {
		var out bytes.Buffer
		cmd := agentCommand(e, m, nil)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(cmd.Env, "KUBECONFIG="+typo)
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("the agent exited well with a broken kubeconfig:\n%s", out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("the agent did not stop within 30 s on a kubeconfig with a typo:\n%s", out.String())
		}
		t.Logf("the agent stopped after %s:\n%s", time.Since(start).Round(time.Millisecond), lastLines(out.String(), 3))
		if !strings.Contains(out.String(), "kubeconfig "+typo) || !strings.Contains(out.String(), "yaml") {
			t.Errorf("the agent's last words do not name the kubeconfig and its problem:\n%s", out.String())
		}
		unchanged("after an agent with a kubeconfig with a typo")
	})

	for _, tc := range []struct{ name, kubeconfig, says string }{
		{"credentials-refused", badToken, "does not accept the agent's credentials from kubeconfig " + badToken},
		{"api-server-unreachable", noServer, "cannot reach the API server at https://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			var mu sync.Mutex
			cmd := agentCommand(e, m, nil)
			cmd.Stdout, cmd.Stderr = lockedWriter{&mu, &out}, lockedWriter{&mu, &out}
			cmd.Env = append(cmd.Env, "KUBECONFIG="+tc.kubeconfig)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var exited atomic.Bool
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); exited.Store(true); close(done) }()
			defer func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
			}()
			eventually(t, 30*time.Second, "/readyz says what the agent waits for", func(ctx context.Context) error {
				if exited.Load() {
					mu.Lock()
					defer mu.Unlock()
					return fmt.Errorf("the agent exited instead of waiting:\n%s", out.String())
				}
				code, body, err := agentHealth(ctx, m, "/readyz")
				if err != nil || code != 503 || !strings.Contains(body, "waiting before touching the node's network") || !strings.Contains(body, tc.says) {
					return fmt.Errorf("%d %q %v", code, body, err)
				}
				return nil
			})
			if code, body, err := agentHealth(context.Background(), m, "/healthz"); code != 200 {
				t.Errorf("/healthz while waiting: %d %q %v (waiting is alive)", code, body, err)
			}
			// Over a few of its attempts (1 s, then 2 s apart), the node
			// stays as it was.
			for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
				unchanged("while the agent waits")
				time.Sleep(200 * time.Millisecond) // the invariant's probe interval
			}
			mu.Lock()
			log := out.String()
			mu.Unlock()
			if !strings.Contains(log, "waiting for the API server before touching the node's network") || !strings.Contains(log, tc.says) {
				t.Errorf("the agent's log does not say what it waits for:\n%s", log)
			}
			t.Logf("the agent waits:\n%s", lastLines(log, 2))
		})
		unchanged("after an agent that waited for the API")
	}

	t.Run("the-agent-takes-the-node", func(t *testing.T) {
		start := time.Now()
		startAgent(t, e, m)
		eventually(t, 90*time.Second, "agent ready on "+m.Name, func(ctx context.Context) error { return agentReady(ctx, m) })
		t.Logf("ready %s after it started", time.Since(start).Round(time.Millisecond))
		l3, err := gatewayL3(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range m.Addresses {
			if !strings.Contains(l3, "addr "+a+"/") {
				t.Errorf("breth0 lacks %s:\n%s", a, l3)
			}
		}
		// The flow breth0 switched with while the agent read the cluster
		// (it had none) is the pipeline's now, with the pipeline's cookie.
		out := ofctl(t, m, "dump-flows", "breth0", "table=0")
		found := false
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "priority=0 actions=NORMAL") {
				found = true
				if strings.Contains(l, "cookie=0x0,") {
					t.Errorf("breth0's first flow is nobody's: %s", l)
				}
			}
		}
		if !found {
			t.Errorf("breth0 has no table-0 NORMAL miss flow:\n%s", out)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestAgentRestartWithoutAPI restarts node1's agent while the API server
// cannot be reached (its kubeconfig points where nothing answers): the new
// agent waits, not ready, and tears nothing down; the flows the agent
// before it left keep the node's pods reachable from the other node the
// whole time, and the node keeps its addresses. Then the agent with its
// own kubeconfig takes over.
func TestAgentRestartWithoutAPI(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	m := member(t, e, "node1")
	on, off := crossNodePods(t, e, "e2e-restart-noapi", m.Name)
	l3Before, err := gatewayL3(m)
	if err != nil {
		t.Fatal(err)
	}
	_, _, noServer := brokenKubeconfigs(t, m)

	replaceAgent(t, e, m, "KUBECONFIG="+noServer)
	t.Cleanup(func() {
		if t.Failed() {
			// The node's next tests need an agent that works.
			replaceAgent(t, e, m)
		}
	})
	eventually(t, 30*time.Second, "the new agent waits for the API server", func(ctx context.Context) error {
		code, body, err := agentHealth(ctx, m, "/readyz")
		if err != nil || code != 503 || !strings.Contains(body, "cannot reach the API server") {
			return fmt.Errorf("%d %q %v", code, body, err)
		}
		return nil
	})
	// While it waits: traffic across the nodes, new connections every
	// 100 ms for 5 s, and the node's addresses where they were.
	n := 0
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := bothWays(ctx, on, off)
		cancel()
		if err != nil {
			t.Fatalf("while the agent waits for the API server: %v", err)
		}
		if now, err := gatewayL3(m); err != nil || now != l3Before {
			t.Fatalf("breth0 changed while the agent waits: %v\n%s\nwas\n%s", err, now, l3Before)
		}
		time.Sleep(100 * time.Millisecond) // the traffic's pace
	}
	t.Logf("%d round trips both ways while the agent waited for the API server", n)

	replaceAgent(t, e, m)
	eventually(t, 60*time.Second, "the agent with its own kubeconfig ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	eventually(t, 10*time.Second, "traffic after it took over", func(ctx context.Context) error { return bothWays(ctx, on, off) })
}
