package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"nodeflow/datapath/plan"
)

// The reject fairness benchmark's sizes: connections from tenant B's pod
// per measurement, and how long one waits to be refused. The previous
// design leaves most of them unanswered, so it gets fewer.
const (
	fairBenchConns       = 100
	fairBenchSharedConns = 40
	fairBenchTimeout     = 2 * time.Second
	fairBenchSpacing     = 20 * time.Millisecond
)

// rejectFairnessGoal is the goal: another pod's refusals, p99,
// while one pod floods.
const rejectFairnessGoal = 10 * time.Millisecond

var rejectFairnessBench scenario

// BenchmarkRejectFairness measures how long tenant B's connections to its
// Service without endpoints take to be refused (TCP RST) from a pod on
// node1, one every 20 ms at most, while tenant A's pod on the same node floods
// SYNs (synFloodRate a second) at its own Service without endpoints:
// with the per-source meters (the agent as it runs), then with the
// previous design, one meter per category for the node
// (NODEFLOW_PACKET_IN_METERS=shared, node1's agent replaced), then with
// the per-source meters again; and once without a flood, for reference.
// A connection not refused within fairBenchTimeout counts as that long.
// It reports milliseconds, the ratio of the p99s (per-source / shared) and
// the p99's ratio to the 10 ms goal. It runs once whatever b.N says.
func BenchmarkRejectFairness(b *testing.B) { rejectFairnessBench.report(b, runRejectFairnessBench) }

func runRejectFairnessBench(b *testing.B, e *env) map[string]float64 {
	r := newFloodRig(b, e, "e2e-fair-bench-a", "e2e-fair-bench-b")
	res := map[string]float64{}
	measure := func(name string, n int) []time.Duration {
		times, late, sent := r.refusalsDuringFlood(b, n, fairBenchTimeout, fairBenchSpacing)
		report(res, name, times)
		res[name+"-late"] = float64(len(late))
		b.Logf("%s: %d SYNs flooded; %d connections refused in p50 %s, p99 %s; %d not refused within %s",
			name, sent, n, percentile(times, 50).Round(time.Microsecond), percentile(times, 99).Round(time.Microsecond),
			len(late), refusedPromptly)
		return times
	}

	var quiet []time.Duration
	for range fairBenchConns {
		took, err := r.refusal(context.Background(), fairBenchTimeout)
		if err != nil {
			b.Fatalf("without a flood: %v", err)
		}
		quiet = append(quiet, took)
	}
	report(res, "quiet", quiet)
	b.Logf("without a flood: refused in p50 %s, p99 %s", percentile(quiet, 50).Round(time.Microsecond), percentile(quiet, 99).Round(time.Microsecond))

	first := measure("per-source", fairBenchConns)
	r.useDesign(b, "shared")
	shared := measure("shared", fairBenchSharedConns)
	r.useDesign(b, "per-source")
	second := measure("per-source-again", fairBenchConns)

	perSource := append(first, second...)
	report(res, "per-source-both", perSource)
	p99 := percentile(perSource, 99)
	res["per-source-p99-ratio-to-shared"] = p99.Seconds() / percentile(shared, 99).Seconds()
	res["per-source-p99-ratio-to-10ms-goal"] = p99.Seconds() / rejectFairnessGoal.Seconds()
	return res
}

// useDesign replaces node1's agent with one that installs the punt stage
// design ("per-source", the default, or "shared"), and waits until br0
// holds its meters and B's connections are refused again.
func (r *floodRig) useDesign(t testing.TB, design string) {
	t.Helper()
	var env []string
	want, _ := plan.SourceMeter(plan.PacketInReject, uint32(r.podB.port))
	if design == "shared" {
		env = append(env, "NODEFLOW_PACKET_IN_METERS=shared")
		want, _ = plan.SourceMeter(plan.PacketInReject, plan.SourceShared)
	}
	replaceAgent(t, r.e, r.node, env...)
	eventually(t, 90*time.Second, "node1's agent with the "+design+" meters", func(ctx context.Context) error {
		if err := agentReady(ctx, r.node); err != nil {
			return err
		}
		if out := ofctl(t, r.node, "dump-meters", "br0"); !strings.Contains(out, "meter="+strconv.FormatUint(uint64(want), 10)+" ") {
			return fmt.Errorf("no meter %d in br0", want)
		}
		_, err := r.refusal(ctx, 2*time.Second)
		return err
	})
}
