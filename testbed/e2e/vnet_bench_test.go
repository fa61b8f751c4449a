package e2e

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/internal/vnetbench"
)

// logVNetAgents logs what each node's agent holds of the virtual networks:
// its informers, the objects in their caches, and its memory.
func logVNetAgents(b *testing.B, e *env) {
	for _, name := range []string{"node1", "node2"} {
		m := member(b, e, name)
		text, err := agentMetrics(m)
		if err != nil {
			b.Logf("%s: metrics: %v", name, err)
			continue
		}
		var lines []string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "nodeflow_vnet_") || strings.HasPrefix(l, "process_resident_memory_bytes") || strings.HasPrefix(l, "go_memstats_heap_inuse_bytes") {
				lines = append(lines, l)
			}
		}
		b.Logf("%s's agent:\n  %s", name, strings.Join(lines, "\n  "))
	}
}

// BenchmarkVNetAttachments is the seed's throughput driver on the testbed
// (`nodeflow vnet-bench`): NODEFLOW_BENCH_VNET_ATTACHMENTS attachments
// (default 1,000) over 100 VNIs and the testbed's two nodes plus eight
// Node objects with no agent, with one IPAM controller running under its
// ServiceAccount's roles. NODEFLOW_BENCH_VNET_AGENTS=0 leaves the
// connection agents out of the wait; NODEFLOW_BENCH_VNET_WORKERS sets the
// IPAM controller's --workers (default 16), NODEFLOW_BENCH_VNET_FAKE_NODES
// the Node objects with no agent (default 8). The controller's client-side
// rate limit is raised out of the way (its default, 200 requests a second,
// caps it at 100 attachments a second).
//
//	NODEFLOW_REQUIRE_OVS=1 go test ./testbed/e2e/ -run '^$' -bench VNetAttachments -benchtime 1x -v
func BenchmarkVNetAttachments(b *testing.B) {
	e := up(b)
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("NODEFLOW_BENCH_VNET_ATTACHMENTS")); err == nil && v > 0 {
		n = v
	}
	workers := "16"
	if v := os.Getenv("NODEFLOW_BENCH_VNET_WORKERS"); v != "" {
		workers = v
	}
	fake := 8
	if v, err := strconv.Atoi(os.Getenv("NODEFLOW_BENCH_VNET_FAKE_NODES")); err == nil && v >= 0 {
		fake = v
	}
	startController(b, e, "ipam", e.state.IPAMKubeconfig, "ipam-bench", "--leader-elect=false", "--workers", workers,
		"--kube-api-qps", "5000", "--kube-api-burst", "10000")
	d := vnetClient(b, e)
	for i := 0; i < b.N; i++ {
		res, err := vnetbench.Run(context.Background(), vnetbench.Options{
			Dynamic: d, Kube: e.client, Namespace: "vnet-bench", Attachments: n, VNIs: 100,
			SubnetCIDR: "10.240.0.0/16", Nodes: []string{"node1", "node2"}, FakeNodes: fake,
			NoAgents: os.Getenv("NODEFLOW_BENCH_VNET_AGENTS") == "0", Concurrency: 16, Timeout: 30 * time.Minute,
			Log: logrus.StandardLogger(), Ready: func() { logVNetAgents(b, e) },
		})
		if err != nil {
			b.Fatal(err)
		}
		var out strings.Builder
		res.Print(&out)
		b.Logf("\n%s", out.String())
		b.ReportMetric(res.AssignRate, "assigned/s")
		b.ReportMetric(float64(res.AssignLatency[1].Microseconds())/1000, "assign-p99-ms")
		b.ReportMetric(res.PerAttachment(), "requests/attachment")
		eventually(b, 2*time.Minute, "the bench namespace gone", func(ctx context.Context) error {
			_, err := e.client.CoreV1().Namespaces().Get(ctx, "vnet-bench", metav1.GetOptions{})
			if err == nil {
				return errors.New("still there")
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		})
	}
}
