package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodeflow/agent"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// readyz asks the agent serving /readyz at addr in m's namespace, and
// returns the status code and the body.
func readyz(ctx context.Context, m *testbed.Member, addr string) (int, string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		return nsutil.Dial(ctx, m.Netns, network, a, time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// TestSecondAgentWaits starts a second agent on node1 beside the one that
// runs there, as an agent run by hand beside the DaemonSet's, or a new pod
// beside one that has not exited: it waits for the OVSDB lock, not ready,
// and leaves the switch alone, while traffic through a Service from pods
// on both nodes goes on. When the first agent stops, the second takes over
// and is ready. No request fails.
func TestSecondAgentWaits(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ags := newAgents(t, e)
	for _, n := range []string{"node1", "node2"} {
		ags.ensure(n)
	}
	t.Cleanup(func() { ags.ensure("node1") }) // after the second agent's own clean-up
	m, _ := e.state.Member("node1")
	ns := createNamespace(t, e, "e2e-lock")
	clients, vips := serviceUnderTraffic(t, e, ns)
	settled(t, e)
	traffic := startServiceTraffic(t, clients, vips)

	const secondAddr = "127.0.0.1:9477"
	startAgentEnv(t, e, m, "NODEFLOW_HEALTH_ADDR="+secondAddr, "NODEFLOW_SOCKET="+filepath.Join(t.TempDir(), "second.sock"))
	eventually(t, 30*time.Second, "the second agent waiting for the lock", func(ctx context.Context) error {
		code, body, err := readyz(ctx, m, secondAddr)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "OVSDB lock "+agent.AgentLock) {
			return fmt.Errorf("readyz: %d %q", code, body)
		}
		return nil
	})
	traffic.settle(t, "the second agent started")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agentReady(ctx, m); err != nil {
		t.Fatalf("the first agent, beside the waiting one: %v", err)
	}
	if code, body, err := readyz(ctx, m, secondAddr); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("the second agent, while the first runs: %d %q %v", code, body, err)
	}

	start := time.Now()
	ags.stop("node1")
	eventually(t, 60*time.Second, "the second agent took over", func(ctx context.Context) error {
		code, body, err := readyz(ctx, m, secondAddr)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("readyz: %d %q", code, body)
		}
		return nil
	})
	t.Logf("the second agent was ready %s after the first stopped", time.Since(start).Round(time.Millisecond))
	traffic.settle(t, "the second agent took over")
	traffic.finish(t, "a second agent waited, then took over")
}
