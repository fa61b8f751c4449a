package e2e

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"nodeflow/internal/kubeclient"
	"nodeflow/lib/openflow"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// The Services benchmark's load: N selectorless ClusterIP Services of one
// TCP port, each with one EndpointSlice of endpointsPerService endpoints in
// node2's pod CIDR (remote endpoints for node1, where it measures).
const (
	endpointsPerService = 10
	benchSvcPort        = 80
	benchTargetPort     = 8080
	// benchManagedBy keeps the endpoint-slice controllers away from the
	// benchmark's slices.
	benchManagedBy = "bench.nodeflow.io"
	// kubeProxyAddr is the address of kube-proxy's interface in its
	// network namespace, and of its Node object.
	kubeProxyAddr = "172.31.255.1"
)

var svcScale scenario

// BenchmarkServices10k creates NODEFLOW_BENCH_SERVICES (default 10,000)
// Services of 10 endpoints each through the testbed's kube-apiserver and
// measures, for the nodeflow agent on node1: the time from the first create
// until every group is in br0 (checked against OVS), its RSS before and
// after, and then NODEFLOW_BENCH_CHANGES (default 100) changes of one
// Service's endpoints, one at a time: the latency from the API write until
// the new bucket is in OVS (polled over an OpenFlow connection of its own,
// each change then confirmed with ovs-ofctl dump-groups), from the API
// server's answer until then, and as the agent's
// network_programming_duration_seconds histogram gives it, and the agent's
// CPU time for the changes; NODEFLOW_BENCH_OFCTL_CHANGES (default 20) more
// changes are timed by forking ovs-ofctl, as the benchmark did before.
// Then it runs kube-proxy (nftables mode,
// built on demand by testbed/tools/build.sh kube-proxy) in a network
// namespace of its own against the same API server and load, measures its
// first full sync, RSS, and the same changes, and reports the ratios
// nodeflow / kube-proxy. NODEFLOW_BENCH_KUBEPROXY=0 leaves kube-proxy out;
// NODEFLOW_BENCH_COLD_STARTS=n runs the agent's cold start n times, and
// NODEFLOW_BENCH_STREAM_COLD_STARTS=n (default 1) n more with client-go's
// streamed initial lists, the reference for the agent's plain lists;
// NODEFLOW_BENCH_COLD_ENV="K=V ..." runs NODEFLOW_BENCH_COLD_ENV_STARTS
// (default 3) cold starts with that environment first (a setting against
// the default, in one run).
//
// It takes minutes at 10,000 Services; run it alone, once:
//
//	NODEFLOW_REQUIRE_OVS=1 go test -count=1 -run '^$' -bench Services10k -benchtime 1x -timeout 60m -v ./testbed/e2e
func BenchmarkServices10k(b *testing.B) { svcScale.report(b, runServicesScale) }

func envInt(b testing.TB, name string, def int) int {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a count", name, s)
	}
	return n
}

// runServicesScale runs the whole scenario and returns the metrics to
// report, by unit.
func runServicesScale(b *testing.B, e *env) map[string]float64 {
	n := envInt(b, "NODEFLOW_BENCH_SERVICES", 10000)
	changes := envInt(b, "NODEFLOW_BENCH_CHANGES", 100)
	withKubeProxy := os.Getenv("NODEFLOW_BENCH_KUBEPROXY") != "0"
	if n < 1 || changes < 1 {
		b.Fatal("NODEFLOW_BENCH_SERVICES and NODEFLOW_BENCH_CHANGES must be at least 1")
	}
	res := map[string]float64{"services": float64(n)}
	b.StopTimer()

	// Build kube-proxy first: minutes when cold, and nothing to measure yet.
	var kubeProxy string
	if withKubeProxy {
		kubeProxy = buildKubeProxy(b)
	}

	m, _ := e.state.Member("node1")
	agentPID := nodeAgentPID(b, e, m)
	client := fastClient(b, e)
	ctx := context.Background()

	ns := fmt.Sprintf("bench-svc-%d", os.Getpid()%100000)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	remote := podPrefix(b, client, "node2")

	// Before: the agent's services, br0's groups and buckets, RSS.
	am := scrapeAgent(b, m)
	ports0 := am.value("nodeflow_service_ports", "")
	groups0, buckets0 := countGroups(b, m)
	rss0 := mustRSS(b, agentPID)
	b.Logf("before: agent pid %d, %d service ports, %d groups (%d buckets), RSS %d KiB", agentPID, int(ports0), groups0, buckets0, rss0)

	// Create the Services and their EndpointSlices.
	cpuCreate := cpuTicks(b, agentPID, false)
	start := time.Now()
	createServices(b, client, ns, n, remote)
	created := time.Since(start)
	b.Logf("created %d Services and EndpointSlices in %s (%.0f objects/s)", n, created.Round(time.Millisecond), float64(2*n)/created.Seconds())
	eventually(b, 30*time.Minute, "agent holds every service port", func(ctx context.Context) error {
		if v := scrapeAgent(b, m).value("nodeflow_service_ports", ""); v < ports0+float64(n) {
			return fmt.Errorf("%d of %d service ports", int(v-ports0), n)
		}
		return nil
	})
	eventually(b, 30*time.Minute, "every group and bucket in br0", func(ctx context.Context) error {
		g, bk := countGroups(b, m)
		if g < groups0+n || bk < buckets0+n*endpointsPerService {
			return fmt.Errorf("br0 holds %d of %d new groups, %d of %d new buckets", g-groups0, n, bk-buckets0, n*endpointsPerService)
		}
		return nil
	})
	programmed := time.Since(start)
	rss1 := mustRSS(b, agentPID)
	saveProfile(b, m, "created-heap.prof", "heap")()
	res["s-nodeflow-cpu-create"] = ticksToMs(cpuTicks(b, agentPID, false)-cpuCreate) / 1000
	flows := countFlows(b, m)
	b.Logf("nodeflow: all %d services in OVS %s after the first create (%s after the last); agent CPU %.1f s; RSS %d KiB (+%d; %s), br0 %d flows; %s",
		n, programmed.Round(time.Millisecond), (programmed - created).Round(time.Millisecond), res["s-nodeflow-cpu-create"], rss1, rss1-rss0, rssParts(agentPID), flows, goMemory(m))
	res["s-create-api"] = created.Seconds()
	res["s-nodeflow-all-in-ovs"] = programmed.Seconds()
	res["s-nodeflow-after-last-create"] = (programmed - created).Seconds()
	res["MiB-nodeflow-RSS"] = float64(rss1) / 1024
	res["KiB-nodeflow-per-svc"] = float64(rss1-rss0) / float64(n)
	res["br0-flows"] = float64(flows)

	// Cold starts with the Services present, as kube-proxy's below: stop
	// the agent, empty br0 of flows and groups, start a new agent and wait
	// for every group again. NODEFLOW_BENCH_COLD_STARTS (default 1) repeats
	// it; the results are the median run's.
	// NODEFLOW_BENCH_COLD_ENV="K=V ..." first runs
	// NODEFLOW_BENCH_COLD_ENV_STARTS (default 3) cold starts with that
	// environment added, to compare a setting with the default in one run.
	groups, buckets := groups0+n, buckets0+n*endpointsPerService
	if extra := strings.Fields(os.Getenv("NODEFLOW_BENCH_COLD_ENV")); len(extra) > 0 {
		if v, peak, ok := agentColdStarts(b, e, m, &agentPID, envInt(b, "NODEFLOW_BENCH_COLD_ENV_STARTS", 3), n, groups, buckets, false, extra...); ok {
			res["s-nodeflow-cold-start-env"] = v.all.Seconds()
			res["s-nodeflow-cpu-cold-start-env"] = v.cpu.Seconds()
			res["MiB-nodeflow-RSS-cold-peak-env"] = peak
		}
	}
	cold, peak, _ := agentColdStarts(b, e, m, &agentPID, max(envInt(b, "NODEFLOW_BENCH_COLD_STARTS", 1), 1), n, groups, buckets, true)
	res["s-nodeflow-cpu-cold-start"] = cold.cpu.Seconds()
	res["s-nodeflow-cold-start"] = cold.all.Seconds()
	res["MiB-nodeflow-RSS-cold"] = float64(cold.rss) / 1024
	res["MiB-nodeflow-RSS-cold-peak"] = peak
	// The reference: the same cold start with client-go's streamed initial
	// lists (one watch event per object), which the agent turns off
	// (kubeclient.ListsFirst). NODEFLOW_BENCH_STREAM_COLD_STARTS, default 1.
	if stream, peak, ok := agentColdStarts(b, e, m, &agentPID, envInt(b, "NODEFLOW_BENCH_STREAM_COLD_STARTS", 1), n, groups, buckets, false, kubeclient.WatchListEnv+"=true"); ok {
		res["s-nodeflow-cold-start-stream"] = stream.all.Seconds()
		res["MiB-nodeflow-RSS-cold-peak-stream"] = peak
		res["cold-start-lists/stream"] = cold.all.Seconds() / stream.all.Seconds()
	}
	idle := idleWindow(b)
	idleScrape0 := scrapeAgent(b, m)
	idleAudits0 := idleScrape0.histogram("nodeflow_sync_duration_seconds", `kind="audit"`)
	idleParts0 := idleScrape0.histogram("nodeflow_sync_duration_seconds", `kind="audit-part"`)
	idleProfile := saveProfile(b, m, "idle-cpu.prof", fmt.Sprintf("profile?seconds=%d", max(1, int(idle.Seconds())-1)))
	res["ms-nodeflow-idle-cpu-per-min"] = idleCPU(b, agentPID, false, idle)
	idleProfile()
	idleScrape := scrapeAgent(b, m)
	idleAudits := idleScrape.histogram("nodeflow_sync_duration_seconds", `kind="audit"`).minus(idleAudits0)
	idleParts := idleScrape.histogram("nodeflow_sync_duration_seconds", `kind="audit-part"`).minus(idleParts0)
	b.Logf("nodeflow: idle with %d services: %.0f ms of CPU a minute; %v whole audits of both bridges (mean %.0f ms); %v audit parts (mean %.1f ms, p99 %.1f ms)", n, res["ms-nodeflow-idle-cpu-per-min"],
		idleAudits.count, idleAudits.sum/math.Max(idleAudits.count, 1)*1000, idleParts.count, idleParts.sum/math.Max(idleParts.count, 1)*1000, idleParts.quantile(0.99)*1000)

	// One Service's endpoints, changed one at a time.
	target := "svc-00000"
	gid := groupOf(b, m, endpointAddr(remote, 0, 0, n))
	scrape0 := scrapeAgent(b, m)
	hist0 := scrape0.histogram("kubeproxy_network_programming_duration_seconds", "")
	pass0 := scrape0.histogram("nodeflow_sync_duration_seconds", `bridge="br0",kind="incremental"`)
	audit0 := scrape0.histogram("nodeflow_sync_duration_seconds", `bridge="br0",kind="audit"`)
	parts0 := scrape0.histogram("nodeflow_sync_duration_seconds", `bridge="br0",kind="audit-part"`)
	changesProfile := saveProfile(b, m, "changes-cpu.prof", "profile?seconds=5")
	cpu0 := cpuTicks(b, agentPID, false)
	vswitchd := ovsPID(m)
	if vswitchd == 0 {
		b.Fatalf("%s: ovs-vswitchd not found", m.Name)
	}
	agentMaj0, ovsMaj0, machineMaj0 := majorFaults(b, agentPID), majorFaults(b, vswitchd), machineMajorFaults(b)
	// The agent's metrics are read once, after the changes: a scrape costs
	// the agent CPU (its flow counts walk every owner), which would count
	// in the changes' CPU time.
	// Each change is timed by asking br0 for the group over an OpenFlow
	// connection of the benchmark's own, every millisecond: forking
	// ovs-ofctl takes about 16 ms and most of a core here, which both
	// delays the sighting and slows the agent and the switch it watches
	// (the figures before this method, and the ofctl-poll ones below).
	// ovs-ofctl, the independent oracle, then confirms each change, outside
	// the timed window.
	poll := newFlowPoller(b, m.OVSRundir)
	// A watch of the bench's own on the changed slice splits the latency
	// at the moment the API server delivers the event: the API server's
	// part (the write and the watch's delivery) before it, the agent's
	// (decoding, the proxy's sync, the bundle) after. The agent's own watch
	// is served by the same watch cache at about the same moment.
	arrivals := watchSliceAddrs(b, client, ns, target+"-1")
	nfLat, nfWrites, nfStarts := changeEndpoints(b, client, ns, target, remote, changes, 0, time.Millisecond, 0, func(ctx context.Context, k int, ip netip.Addr) (time.Time, error) {
		ok, err := poll.groupHasDNAT(ctx, gid, ip)
		if err != nil {
			return time.Time{}, err
		}
		if !ok {
			return time.Time{}, fmt.Errorf("group %d has no bucket for %s", gid, ip)
		}
		at := time.Now()
		if !groupHas(b, m, gid, ip) {
			b.Fatalf("change %d: the group has a bucket for %s over OpenFlow, but not in ovs-ofctl dump-groups", k, ip)
		}
		return at, nil
	})
	eventually(b, time.Minute, "the agent counts every change", func(ctx context.Context) error {
		h := scrapeAgent(b, m).histogram("kubeproxy_network_programming_duration_seconds", "")
		if h.count < hist0.count+float64(changes) {
			return fmt.Errorf("histogram holds %v of %d changes", h.count-hist0.count, changes)
		}
		return nil
	})
	cpu1 := cpuTicks(b, agentPID, false)
	agentMaj1, ovsMaj1, machineMaj1 := majorFaults(b, agentPID), majorFaults(b, vswitchd), machineMajorFaults(b)
	scrape1 := scrapeAgent(b, m)
	hist1 := scrape1.histogram("kubeproxy_network_programming_duration_seconds", "")
	delta := hist1.minus(hist0)
	passes := scrape1.histogram("nodeflow_sync_duration_seconds", `bridge="br0",kind="incremental"`).minus(pass0)
	audits := scrape1.histogram("nodeflow_sync_duration_seconds", `bridge="br0",kind="audit"`).minus(audit0)
	parts := scrape1.histogram("nodeflow_sync_duration_seconds", `bridge="br0",kind="audit-part"`).minus(parts0)
	b.Logf("nodeflow: br0 passes during the changes: %v incremental (p50 %.1f ms, p99 %.1f ms), %v whole audits (mean %.0f ms), %v audit parts (mean %.1f ms, p99 %.1f ms)",
		passes.count, passes.quantile(0.5)*1000, passes.quantile(0.99)*1000, audits.count, audits.sum/math.Max(audits.count, 1)*1000,
		parts.count, parts.sum/math.Max(parts.count, 1)*1000, parts.quantile(0.99)*1000)
	changesProfile()
	res["ms-nodeflow-p50"] = percentile(nfLat, 50).Seconds() * 1000
	res["ms-nodeflow-p99"] = percentile(nfLat, 99).Seconds() * 1000
	res["ms-nodeflow-metric-p50"] = delta.quantile(0.50) * 1000
	res["ms-nodeflow-metric-p99"] = delta.quantile(0.99) * 1000
	res["ms-nodeflow-cpu-changes"] = ticksToMs(cpu1 - cpu0)
	res["ms-api-write-p50"] = percentile(nfWrites, 50).Seconds() * 1000
	res["ms-api-write-p99"] = percentile(nfWrites, 99).Seconds() * 1000
	// From the API server's answer to the bucket in OVS: the watch's
	// delivery and the agent's work, without the write itself.
	sinceWrite := make([]time.Duration, len(nfLat))
	for i := range nfLat {
		sinceWrite[i] = nfLat[i] - nfWrites[i]
	}
	res["ms-after-write-p50"] = percentile(sinceWrite, 50).Seconds() * 1000
	res["ms-after-write-p99"] = percentile(sinceWrite, 99).Seconds() * 1000
	seen := arrivals()
	var delivered, agentPart []time.Duration
	for k := range nfLat {
		// The changes cycle through 20 addresses: change k's event is
		// the first one with its address after its write started.
		i := slices.IndexFunc(seen, func(a sliceArrival) bool { return a.addr == changeAddr(remote, k) && !a.at.Before(nfStarts[k]) })
		if i < 0 {
			b.Fatalf("change %d (%s): the bench's watch never saw it", k, changeAddr(remote, k))
		}
		at := seen[i].at
		delivered = append(delivered, at.Sub(nfStarts[k]))
		agentPart = append(agentPart, nfLat[k]-at.Sub(nfStarts[k]))
	}
	res["ms-api-event-p50"] = percentile(delivered, 50).Seconds() * 1000
	res["ms-api-event-p99"] = percentile(delivered, 99).Seconds() * 1000
	res["ms-event-to-ovs-p50"] = percentile(agentPart, 50).Seconds() * 1000
	res["ms-event-to-ovs-p99"] = percentile(agentPart, 99).Seconds() * 1000
	b.Logf("nodeflow: split at the watch event: API write started to the event at a watcher p50 %s p99 %s; the event to the bucket in OVS p50 %s p99 %s max %s",
		percentile(delivered, 50), percentile(delivered, 99), percentile(agentPart, 50), percentile(agentPart, 99), percentile(agentPart, 100))
	b.Logf("nodeflow: %d changes: API write to bucket in OVS p50 %s p99 %s max %s (the write's answer alone p50 %s p99 %s; from the answer to OVS p50 %s p99 %s); agent histogram p50 %.1f ms p99 %.1f ms (mean %.1f ms over %v); agent CPU %.0f ms",
		changes, percentile(nfLat, 50), percentile(nfLat, 99), percentile(nfLat, 100), percentile(nfWrites, 50), percentile(nfWrites, 99), percentile(sinceWrite, 50), percentile(sinceWrite, 99),
		delta.quantile(0.5)*1000, delta.quantile(0.99)*1000, delta.sum/math.Max(delta.count, 1)*1000, delta.count, ticksToMs(cpu1-cpu0))
	// A machine that drops binaries' pages from memory (proactive
	// reclaim) makes the agent and the switch read them back from disk
	// during the changes: these counts tell whether the latency above
	// includes that.
	b.Logf("nodeflow: major page faults during the changes: agent %d, node1's ovs-vswitchd %d, the machine %d",
		agentMaj1-agentMaj0, ovsMaj1-ovsMaj0, machineMaj1-machineMaj0)
	// The same changes timed the way this benchmark did before, by forking
	// ovs-ofctl dump-groups every 2 ms, for the figures before it
	// (NODEFLOW_BENCH_OFCTL_CHANGES, default 20; their addresses follow
	// kube-proxy's).
	if n := envInt(b, "NODEFLOW_BENCH_OFCTL_CHANGES", 20); n > 0 {
		olat, _, _ := changeEndpoints(b, client, ns, target, remote, n, 2*changes, 2*time.Millisecond, 0, func(ctx context.Context, k int, ip netip.Addr) (time.Time, error) {
			if !groupHas(b, m, gid, ip) {
				return time.Time{}, fmt.Errorf("group %d has no bucket for %s", gid, ip)
			}
			return time.Now(), nil
		})
		res["ms-nodeflow-ofctl-poll-p50"] = percentile(olat, 50).Seconds() * 1000
		res["ms-nodeflow-ofctl-poll-p99"] = percentile(olat, 99).Seconds() * 1000
		b.Logf("nodeflow: %d more changes timed by forking ovs-ofctl: API write to bucket in OVS p50 %s p99 %s", n, percentile(olat, 50), percentile(olat, 99))
	}

	if !withKubeProxy {
		return res
	}
	kp := runKubeProxy(b, e, client, kubeProxy, ns, n)
	res["s-kubeproxy-first-sync-from-start"] = kp.firstFromStart.Seconds()
	res["s-kubeproxy-first-full-sync"] = kp.firstFull
	res["s-kubeproxy-cpu-first-sync"] = kp.cpuFirst
	res["MiB-kubeproxy-RSS"] = float64(kp.rss) / 1024
	res["ms-kubeproxy-idle-cpu-per-min"] = idleCPU(b, kp.pid, true, idle)
	b.Logf("kube-proxy: idle with %d services: %.0f ms of CPU a minute (with its nft children)", n, res["ms-kubeproxy-idle-cpu-per-min"])
	hk0 := kp.scrape(b).histogram("kubeproxy_network_programming_duration_seconds", `ip_family="IPv4"`)
	pk0 := kp.scrape(b).histogram("kubeproxy_sync_partial_proxy_rules_duration_seconds", `ip_family="IPv4"`)
	kcpu0 := cpuTicks(b, kp.pid, true)
	fails0 := kp.scrape(b).value("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "")
	// Listing one chain of kube-proxy's table costs seconds of kernel time
	// at 10,000 Services (nft reads the whole table), which would slow
	// kube-proxy itself: the outside observation is its metrics endpoint
	// (the change counted once its nft transaction has succeeded), and
	// nftables is checked once, after the last change.
	var last netip.Addr
	// The changes are a second apart, kube-proxy's --min-sync-period: back to
	// back, each would wait for it after the previous sync. The latency ends
	// at the sync's own completion time (its last-sync timestamp), so the
	// polling can be slow.
	kpLat, _, _ := changeEndpoints(b, client, ns, target, remote, changes, changes, 100*time.Millisecond, time.Second, func(ctx context.Context, k int, ip netip.Addr) (time.Time, error) {
		last = ip
		// A busy kube-proxy may not answer at once: not an error.
		p, err := tryScrape(kp.netns, kp.metricsAddr)
		if err != nil {
			return time.Time{}, err
		}
		if h := p.histogram("kubeproxy_network_programming_duration_seconds", `ip_family="IPv4"`); h.count < hk0.count+float64(k+1) {
			return time.Time{}, fmt.Errorf("kube-proxy has programmed %v of %d changes", h.count-hk0.count, k+1)
		}
		ts := p.value("kubeproxy_sync_proxy_rules_last_timestamp_seconds", `ip_family="IPv4"`)
		return time.Unix(0, int64(ts*1e9)), nil
	})
	kcpu1 := cpuTicks(b, kp.pid, true)
	eventually(b, time.Minute, "the last change in nftables", func(ctx context.Context) error { return kp.chainHas(b, last) })
	if f := kp.scrape(b).value("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", ""); f != fails0 {
		b.Fatalf("kube-proxy's nftables syncs failed %v times", f-fails0)
	}
	after := kp.scrape(b)
	hk := after.histogram("kubeproxy_network_programming_duration_seconds", `ip_family="IPv4"`).minus(hk0)
	pk := after.histogram("kubeproxy_sync_partial_proxy_rules_duration_seconds", `ip_family="IPv4"`).minus(pk0)
	if r, err := rssKiB(kp.pid); err == nil && r > kp.rss {
		kp.rss = r
	}
	res["MiB-kubeproxy-RSS"] = float64(kp.rss) / 1024
	res["ms-kubeproxy-p50"] = percentile(kpLat, 50).Seconds() * 1000
	res["ms-kubeproxy-p99"] = percentile(kpLat, 99).Seconds() * 1000
	res["ms-kubeproxy-metric-p50"] = hk.quantile(0.50) * 1000
	res["ms-kubeproxy-metric-p99"] = hk.quantile(0.99) * 1000
	res["ms-kubeproxy-partial-sync-mean"] = pk.sum / math.Max(pk.count, 1) * 1000
	res["ms-kubeproxy-cpu-changes"] = ticksToMs(kcpu1 - kcpu0)
	b.Logf("kube-proxy: %d changes: API write to programmed (its metrics) p50 %s p99 %s max %s; its histogram p50 %.0f ms p99 %.0f ms (mean %.0f ms); %v partial syncs, mean %.0f ms; CPU (with nft children) %.0f ms; RSS %d KiB",
		changes, percentile(kpLat, 50), percentile(kpLat, 99), percentile(kpLat, 100), hk.quantile(0.5)*1000, hk.quantile(0.99)*1000,
		hk.sum/math.Max(hk.count, 1)*1000, pk.count, pk.sum/math.Max(pk.count, 1)*1000, ticksToMs(kcpu1-kcpu0), kp.rss)

	ratio := func(name, x, y string) {
		if res[y] > 0 {
			res["ratio-"+name] = res[x] / res[y]
		}
	}
	ratio("p50", "ms-nodeflow-p50", "ms-kubeproxy-p50")
	ratio("p99", "ms-nodeflow-p99", "ms-kubeproxy-p99")
	ratio("cpu", "ms-nodeflow-cpu-changes", "ms-kubeproxy-cpu-changes")
	ratio("rss", "MiB-nodeflow-RSS", "MiB-kubeproxy-RSS")
	ratio("cold-start", "s-nodeflow-cold-start", "s-kubeproxy-first-sync-from-start")
	ratio("cold-start-cpu", "s-nodeflow-cpu-cold-start", "s-kubeproxy-cpu-first-sync")
	ratio("idle-cpu", "ms-nodeflow-idle-cpu-per-min", "ms-kubeproxy-idle-cpu-per-min")
	return res
}

// fastClient is an admin client with a high rate limit, for bulk creates.
func fastClient(b testing.TB, e *env) kubernetes.Interface {
	b.Helper()
	cfg := adminConfig(b, e, 2000)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// nodeAgentPID returns the pid of the agent on m: the testbed's, or a new
// one when an earlier benchmark stopped it.
func nodeAgentPID(b *testing.B, e *env, m *testbed.Member) int {
	b.Helper()
	for _, p := range e.state.Processes {
		if p.Name == "agent "+m.Name && syscall.Kill(p.PID, 0) == nil {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID)); err == nil && !strings.Contains(string(st), ") Z ") {
				return p.PID
			}
		}
	}
	cmd := startAgent(b, e, m)
	eventually(b, 2*time.Minute, "agent ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	return cmd.Process.Pid
}

// stopAgent stops the agent with pid on m (SIGTERM) and waits for it to
// exit.
func stopAgent(b *testing.B, e *env, m *testbed.Member, pid int) {
	b.Helper()
	for _, p := range e.state.Processes {
		if p.Name == "agent "+m.Name && p.PID == pid {
			stopAgentProcess(b, e, m.Name)
			return
		}
	}
	// One of startAgent's: its cleanup reaps it.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	eventually(b, 15*time.Second, "agent exits", func(ctx context.Context) error {
		if pidRunning(pid) {
			return fmt.Errorf("pid %d still running", pid)
		}
		return nil
	})
}

// podPrefix returns node's IPv4 pod CIDR.
func podPrefix(b testing.TB, c kubernetes.Interface, node string) netip.Prefix {
	b.Helper()
	var p netip.Prefix
	eventually(b, time.Minute, "pod CIDR of "+node, func(ctx context.Context) error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range n.Spec.PodCIDRs {
			if q, err := netip.ParsePrefix(s); err == nil && q.Addr().Is4() {
				p = q
				return nil
			}
		}
		return fmt.Errorf("no IPv4 pod CIDR: %v", n.Spec.PodCIDRs)
	})
	return p
}

// endpointAddr is endpoint j of service i, in the /24 remote: services
// other than the first use hosts .10-.209; the first, whose endpoints the
// benchmark changes, .220-.229 and, for the changes, .230-.249, so that
// its addresses are its own.
func endpointAddr(remote netip.Prefix, i, j, n int) netip.Addr {
	a := remote.Masked().Addr().As4()
	if i == 0 {
		a[3] = byte(220 + j)
	} else {
		a[3] = byte(10 + (i*endpointsPerService+j)%200)
	}
	return netip.AddrFrom4(a)
}

// changeAddr is the address endpoint 0 of the first service takes in
// change k (never the one it had just before).
func changeAddr(remote netip.Prefix, k int) netip.Addr {
	a := remote.Masked().Addr().As4()
	a[3] = byte(230 + k%20)
	return netip.AddrFrom4(a)
}

func benchSlice(ns, svc string, i, n int, remote netip.Prefix) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc + "-1", Namespace: ns,
			Labels: map[string]string{discovery.LabelServiceName: svc, discovery.LabelManagedBy: benchManagedBy},
			Annotations: map[string]string{
				v1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano),
			},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(benchTargetPort)), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for j := 0; j < endpointsPerService; j++ {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{endpointAddr(remote, i, j, n).String()},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To("node2"),
		})
	}
	return s
}

// createServices creates n Services and their EndpointSlices with parallel
// writers.
func createServices(b testing.TB, c kubernetes.Interface, ns string, n int, remote netip.Prefix) {
	b.Helper()
	const writers = 16
	next := make(chan int)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range next {
				name := fmt.Sprintf("svc-%05d", i)
				svc := &v1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
					Spec: v1.ServiceSpec{
						Type:  v1.ServiceTypeClusterIP,
						Ports: []v1.ServicePort{{Name: "http", Port: benchSvcPort, TargetPort: intstr.FromInt32(benchTargetPort), Protocol: v1.ProtocolTCP}},
					},
				}
				if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create service %s: %w", name, err)
					return
				}
				if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, benchSlice(ns, name, i, n, remote), metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create endpointslice of %s: %w", name, err)
					return
				}
			}
		}()
	}
	failed := false
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case err := <-errs:
			b.Error(err)
			failed = true
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Error(err)
		failed = true
	}
	if failed {
		b.FailNow()
	}
}

// changeEndpoints changes endpoint 0 of svc's slice `changes` times, one at
// a time: after each API write it polls programmed every interval until it
// reports the time the change was in the datapath (in OVS, or in nftables
// by kube-proxy's account), then waits gap before the next change. It
// returns the latencies from each write to that time, and how long each
// write took the API server to answer, and when each write started.
func changeEndpoints(b testing.TB, c kubernetes.Interface, ns, svc string, remote netip.Prefix, changes, offset int, interval, gap time.Duration,
	programmed func(ctx context.Context, k int, ip netip.Addr) (time.Time, error)) (lat, writes []time.Duration, starts []time.Time) {
	b.Helper()
	ctx := context.Background()
	slice, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, svc+"-1", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for k := 0; k < changes; k++ {
		ip := changeAddr(remote, offset+k)
		slice.Endpoints[0].Addresses = []string{ip.String()}
		start := time.Now()
		starts = append(starts, start)
		slice.Annotations[v1.EndpointsLastChangeTriggerTime] = start.UTC().Format(time.RFC3339Nano)
		if slice, err = c.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		writes = append(writes, time.Since(start))
		var at time.Time
		pollFast(b, time.Minute, interval, fmt.Sprintf("change %d (%s) in the datapath", k, ip), func(ctx context.Context) error {
			var err error
			at, err = programmed(ctx, k, ip)
			return err
		})
		if at.Before(start) {
			b.Fatalf("change %d: programmed at %s, before its write at %s", k, at, start)
		}
		lat = append(lat, at.Sub(start))
		if gap > 0 {
			time.Sleep(gap) // spacing the changes, by design
		}
	}
	return lat, writes, starts
}

// sliceArrival is one version of a watched EndpointSlice: its first
// endpoint address, and when the watch delivered it.
type sliceArrival struct {
	addr netip.Addr
	at   time.Time
}

// watchSliceAddrs watches EndpointSlice ns/name and notes when each of its
// versions arrived. The returned func stops the watch and returns them, in
// order.
func watchSliceAddrs(b testing.TB, c kubernetes.Interface, ns, name string) func() []sliceArrival {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	var seen []sliceArrival
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			at := time.Now()
			sl, ok := ev.Object.(*discovery.EndpointSlice)
			if !ok || len(sl.Endpoints) == 0 || len(sl.Endpoints[0].Addresses) == 0 {
				continue
			}
			if ip, err := netip.ParseAddr(sl.Endpoints[0].Addresses[0]); err == nil {
				seen = append(seen, sliceArrival{addr: ip, at: at})
			}
		}
	}()
	return func() []sliceArrival {
		w.Stop()
		cancel()
		<-done
		return seen
	}
}

// pollFast is eventually with a given (short) interval, for latencies of
// milliseconds.
func pollFast(t testing.TB, timeout, interval time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		last := cond(ctx)
		if last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s: %v", what, timeout, last)
		case <-time.After(interval):
		}
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// idleWindow is how long the idle CPU of each proxy is measured:
// NODEFLOW_BENCH_IDLE seconds, default 60 (two of the agent's audits and of
// kube-proxy's periodic syncs).
func idleWindow(b testing.TB) time.Duration {
	return time.Duration(envInt(b, "NODEFLOW_BENCH_IDLE", 60)) * time.Second
}

// idleCPU measures the CPU time pid uses while nothing changes for d, in
// milliseconds a minute; 0 when d is 0.
func idleCPU(b testing.TB, pid int, children bool, d time.Duration) float64 {
	b.Helper()
	if d <= 0 {
		return 0
	}
	c0 := cpuTicks(b, pid, children)
	time.Sleep(d) // a measurement window, not a wait for a condition
	return ticksToMs(cpuTicks(b, pid, children)-c0) * float64(time.Minute) / float64(d)
}

func mustRSS(b testing.TB, pid int) int {
	b.Helper()
	kb, err := rssKiB(pid)
	if err != nil {
		b.Fatal(err)
	}
	return kb
}

// cpuTicks returns utime+stime of pid in clock ticks, with the CPU time of
// its waited-for children (cutime+cstime) when children is set.
func cpuTicks(b testing.TB, pid int, children bool) int {
	b.Helper()
	// utime and stime are fields 14 and 15, cutime and cstime 16 and 17.
	last := 15
	if children {
		last = 17
	}
	sum := 0
	for i := 14; i <= last; i++ {
		sum += statField(b, pid, i)
	}
	return sum
}

// statField returns field i (from 1, as proc(5) numbers them) of
// /proc/PID/stat.
func statField(b testing.TB, pid, i int) int {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// pid (comm) state ppid ...: fields after the comm's closing paren,
	// from field 3.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	v, err := strconv.Atoi(f[i-3])
	if err != nil {
		b.Fatalf("/proc/%d/stat field %d: %v", pid, i, err)
	}
	return v
}

// majorFaults returns the page faults of pid that had to read from disk
// (a page of a binary the kernel had dropped, say): field 12 of its stat.
func majorFaults(b testing.TB, pid int) int { return statField(b, pid, 12) }

// machineMajorFaults returns the same count for the whole machine
// (pgmajfault in /proc/vmstat).
func machineMajorFaults(b testing.TB) int {
	b.Helper()
	raw, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "pgmajfault "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				b.Fatalf("/proc/vmstat pgmajfault: %v", err)
			}
			return n
		}
	}
	b.Fatal("/proc/vmstat has no pgmajfault")
	return 0
}

// ovsPID returns the pid of m's ovs-vswitchd, or 0 when it cannot be
// found.
func ovsPID(m *testbed.Member) int {
	pidb, err := os.ReadFile(filepath.Join(m.OVSRundir, "ovs-vswitchd.pid"))
	var pid int
	if err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(pidb)))
	}
	if pid == 0 {
		// The sandbox may not write a pidfile: find the process by its
		// control socket on the command line.
		out, _ := exec.Command("pgrep", "-f", "ovs-vswitchd .*"+m.OVSRundir).Output()
		pid, _ = strconv.Atoi(strings.Fields(string(out) + " 0")[0])
	}
	return pid
}

// ticksToMs converts clock ticks (USER_HZ, 100 on Linux) to milliseconds.
func ticksToMs(t int) float64 { return float64(t) * 10 }

// ofctl runs ovs-ofctl against m's switch.
func ofctl(b testing.TB, m *testbed.Member, args ...string) string {
	b.Helper()
	cmd := exec.Command("ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("ovs-ofctl %s on %s: %v", strings.Join(args, " "), m.Name, err)
	}
	return string(out)
}

// countGroups counts br0's groups and their buckets in OVS.
func countGroups(b testing.TB, m *testbed.Member) (groups, buckets int) {
	b.Helper()
	out := ofctl(b, m, "dump-groups", "br0")
	return strings.Count(out, "group_id="), strings.Count(out, "bucket=")
}

var flowCountRE = regexp.MustCompile(`flow_count=(\d+)`)

// countFlows returns br0's number of flows.
func countFlows(b testing.TB, m *testbed.Member) int {
	b.Helper()
	out := ofctl(b, m, "dump-aggregate", "br0")
	mm := flowCountRE.FindStringSubmatch(out)
	if mm == nil {
		b.Fatalf("dump-aggregate: %q", out)
	}
	v, _ := strconv.Atoi(mm[1])
	return v
}

// goMemory summarises where the agent's memory is, from the Go runtime's
// metrics: live heap, heap held but free, heap returned to the system,
// stacks, and everything the runtime has mapped; the next GC's target.
func goMemory(m *testbed.Member) string {
	text, err := agentMetrics(m)
	if err != nil {
		return "go memory: " + err.Error()
	}
	v := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		if name, val, ok := strings.Cut(l, " "); ok && strings.HasPrefix(name, "go_memstats_") {
			v[name], _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
		}
	}
	mib := func(k string) float64 { return v["go_memstats_"+k] / (1 << 20) }
	return fmt.Sprintf("go memory MiB: heap in use %.0f, idle %.0f (released %.0f), stacks %.0f, runtime total %.0f, next GC %.0f",
		mib("heap_inuse_bytes"), mib("heap_idle_bytes"), mib("heap_released_bytes"), mib("stack_inuse_bytes"), mib("sys_bytes"), mib("next_gc_bytes"))
}

// bucketDNAT is how ovs-ofctl prints the DNAT to IPv4 endpoint ip in a
// bucket (the port follows).
func bucketDNAT(ip netip.Addr) string {
	return "nat(dst=" + ip.String() + ":"
}

var groupIDRE = regexp.MustCompile(`group_id=(\d+)`)

// groupOf returns the id of br0's group with a bucket for ip.
func groupOf(b testing.TB, m *testbed.Member, ip netip.Addr) int {
	b.Helper()
	for _, l := range strings.Split(ofctl(b, m, "dump-groups", "br0"), "\n") {
		if strings.Contains(l, bucketDNAT(ip)) {
			if mm := groupIDRE.FindStringSubmatch(l); mm != nil {
				id, _ := strconv.Atoi(mm[1])
				return id
			}
		}
	}
	b.Fatalf("no group in br0 on %s has a bucket for %s", m.Name, ip)
	return 0
}

// groupHas reports whether group gid of br0 has a bucket for ip.
func groupHas(b testing.TB, m *testbed.Member, gid int, ip netip.Addr) bool {
	b.Helper()
	return strings.Contains(ofctl(b, m, "dump-groups", "br0", strconv.Itoa(gid)), bucketDNAT(ip))
}

// promMetrics is one scrape of a Prometheus text endpoint: series line
// (name{labels}) to value.
type promMetrics map[string]float64

func scrapeURL(b testing.TB, netns, addr string) promMetrics {
	b.Helper()
	p, err := tryScrape(netns, addr)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// tryScrape is scrapeURL returning its error.
func tryScrape(netns, addr string) (promMetrics, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		return nsutil.Dial(ctx, netns, network, a, 5*time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s in %s: %w", addr, netns, err)
	}
	defer resp.Body.Close()
	out := promMetrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		out[l[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s in %s: %w", addr, netns, err)
	}
	return out, nil
}

// scrapeAgent scrapes the nodeflow agent on m.
func scrapeAgent(b testing.TB, m *testbed.Member) promMetrics {
	b.Helper()
	return scrapeURL(b, m.Netns, agentHealthAddr)
}

// series returns the series of name (exactly) whose labels contain sel.
func (p promMetrics) series(name, sel string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range p {
		base, labels, _ := strings.Cut(k, "{")
		if base == name && strings.Contains(labels, sel) {
			out[labels] = v
		}
	}
	return out
}

// value returns the sum of name's series whose labels contain sel.
func (p promMetrics) value(name, sel string) float64 {
	sum := 0.0
	for _, v := range p.series(name, sel) {
		sum += v
	}
	return sum
}

// hist is a Prometheus histogram: cumulative counts by upper bound.
type hist struct {
	les        []float64
	cum        []float64
	count, sum float64
}

var leRE = regexp.MustCompile(`le="([^"]+)"`)

func (p promMetrics) histogram(name, sel string) hist {
	var h hist
	type bk struct{ le, c float64 }
	var bks []bk
	for labels, v := range p.series(name+"_bucket", sel) {
		mm := leRE.FindStringSubmatch(labels)
		if mm == nil {
			continue
		}
		le, err := strconv.ParseFloat(mm[1], 64)
		if err != nil {
			continue
		}
		bks = append(bks, bk{le, v})
	}
	sort.Slice(bks, func(i, j int) bool { return bks[i].le < bks[j].le })
	for _, x := range bks {
		h.les = append(h.les, x.le)
		h.cum = append(h.cum, x.c)
	}
	h.count = p.value(name+"_count", sel)
	h.sum = p.value(name+"_sum", sel)
	return h
}

// minus returns the observations of h that o does not have (o is an
// earlier scrape of the same histogram).
func (h hist) minus(o hist) hist {
	d := hist{les: h.les, cum: slices.Clone(h.cum), count: h.count - o.count, sum: h.sum - o.sum}
	for i := range d.cum {
		if i < len(o.cum) {
			d.cum[i] -= o.cum[i]
		}
	}
	return d
}

// quantile interpolates linearly inside the bucket holding quantile q, as
// Prometheus's histogram_quantile does.
func (h hist) quantile(q float64) float64 {
	if h.count <= 0 || len(h.les) == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, le := range h.les {
		if h.cum[i] >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			in := h.cum[i] - below
			if in <= 0 {
				return le
			}
			return lower + (le-lower)*(rank-below)/in
		}
		lower, below = le, h.cum[i]
	}
	return lower
}

// buildKubeProxy builds (or finds cached) kube-proxy with the testbed's
// tool script and returns its path.
func buildKubeProxy(b testing.TB) string {
	b.Helper()
	cmd := exec.Command("sh", "../tools/build.sh", "kube-proxy")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("build kube-proxy: %v\n%s", err, stderr.String())
	}
	p := strings.TrimSpace(string(out))
	if _, err := os.Stat(p); err != nil {
		b.Fatalf("build kube-proxy: %v", err)
	}
	return p
}

// kubeProxy is a kube-proxy process in a network namespace of its own.
type kubeProxy struct {
	netns          string
	pid            int
	metricsAddr    string
	firstFromStart time.Duration
	firstFull      float64 // seconds, from its histogram
	rss            int     // KiB
	cpuFirst       float64 // CPU seconds from start to the first full sync, with nft's
	clusterIP      string
	chain          string // the changed service's nftables chain
}

// scrape reads kube-proxy's metrics, retrying for a minute: a busy
// kube-proxy at 10,000 Services can be slow to answer.
func (k *kubeProxy) scrape(b testing.TB) promMetrics {
	b.Helper()
	var p promMetrics
	eventually(b, time.Minute, "kube-proxy's metrics", func(ctx context.Context) error {
		var err error
		p, err = tryScrape(k.netns, k.metricsAddr)
		return err
	})
	return p
}

func (k *kubeProxy) nft(b testing.TB, args ...string) string {
	b.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", k.netns, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		b.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// chainHas reports whether the changed service's chain in kube-proxy's
// table sends traffic to endpoint ip.
func (k *kubeProxy) chainHas(b testing.TB, ip netip.Addr) error {
	out := k.nft(b, "list", "chain", "ip", "kube-proxy", k.chain)
	// kube-proxy 1.36 maps straight to the endpoints (`dnat ip to numgen
	// random mod 10 map { 0 : 10.244.1.5 . 8080, ... }`), or jumps to
	// per-endpoint chains (`...__10.244.1.5/8080`) when it needs them.
	if !strings.Contains(out, " "+ip.String()+" . ") && !strings.Contains(out, "__"+ip.String()+"/") {
		return fmt.Errorf("chain %s has no endpoint %s:\n%s", k.chain, ip, out)
	}
	return nil
}

// runKubeProxy starts kube-proxy in nftables mode in a fresh network
// namespace with an interface, a relay to the API server on its
// loopback and a Node object of its own, waits for its first full sync
// with the n Services present, and checks them in nftables.
func runKubeProxy(b testing.TB, e *env, c kubernetes.Interface, bin, ns string, n int) *kubeProxy {
	b.Helper()
	k := &kubeProxy{netns: fmt.Sprintf("nfkp%d", os.Getpid()%100000), metricsAddr: "127.0.0.1:10249"}
	nodeName := "kube-proxy-bench"
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", k.netns)
	b.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", k.netns).Run() })
	run("ip", "-n", k.netns, "link", "set", "lo", "up")
	// A veth pair inside the namespace stands for the node's uplink (this
	// kernel has no dummy interfaces).
	run("ip", "-n", k.netns, "link", "add", "kp0", "type", "veth", "peer", "name", "kp1")
	run("ip", "-n", k.netns, "addr", "add", kubeProxyAddr+"/24", "dev", "kp0")
	run("ip", "-n", k.netns, "link", "set", "kp1", "up")
	run("ip", "-n", k.netns, "link", "set", "kp0", "up")

	// The API server listens on the host's loopback: relay its port on
	// the namespace's loopback, so that the admin kubeconfig works there.
	u, err := url.Parse(e.state.APIServer)
	if err != nil {
		b.Fatal(err)
	}
	l, err := nsutil.Listen(k.netns, "tcp", "127.0.0.1:"+u.Port())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go relay(l, u.Host)

	// A Node object, so that kube-proxy finds its node IP at once instead
	// of waiting 30 s for it.
	ctx := context.Background()
	if _, err := c.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	eventually(b, 30*time.Second, "address of "+nodeName, func(ctx context.Context) error {
		cur, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: kubeProxyAddr}}
		_, err = c.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})

	logPath := filepath.Join(b.TempDir(), "kube-proxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", k.netns, bin,
		"--kubeconfig", e.state.Kubeconfig,
		"--proxy-mode", "nftables",
		"--hostname-override", nodeName,
		"--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56",
		"--metrics-bind-address", k.metricsAddr,
		"--healthz-bind-address", "127.0.0.1:10256",
		"--conntrack-max-per-core", "0",
		"--v", "2")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	k.pid = cmd.Process.Pid
	b.Cleanup(func() {
		terminate(cmd)
		logf.Close()
		if b.Failed() {
			out, _ := os.ReadFile(logPath)
			if len(out) > 20000 {
				out = out[len(out)-20000:]
			}
			b.Logf("kube-proxy log (tail):\n%s", out)
		}
	})
	var last float64
	eventually(b, 20*time.Minute, "kube-proxy's first full sync", func(ctx context.Context) error {
		if !pidRunning(k.pid) {
			b.Fatalf("kube-proxy exited; log in %s", logPath)
		}
		p, err := tryScrape(k.netns, k.metricsAddr)
		if err != nil {
			return err
		}
		if p.value("kubeproxy_sync_full_proxy_rules_duration_seconds_count", `ip_family="IPv4"`) < 1 {
			return fmt.Errorf("no full sync yet")
		}
		last = p.value("kubeproxy_sync_proxy_rules_last_timestamp_seconds", `ip_family="IPv4"`)
		k.firstFull = p.value("kubeproxy_sync_full_proxy_rules_duration_seconds_sum", `ip_family="IPv4"`)
		return nil
	})
	k.firstFromStart = time.Unix(0, int64(last*1e9)).Sub(start)
	k.rss = mustRSS(b, k.pid)
	k.cpuFirst = ticksToMs(cpuTicks(b, k.pid, true)) / 1000

	// Check with nftables itself: every Service's cluster IP in the
	// service-ips map, and find the changed service's chain.
	svc, err := c.CoreV1().Services(ns).Get(ctx, "svc-00000", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	k.clusterIP = svc.Spec.ClusterIP
	eventually(b, 5*time.Minute, "every service in kube-proxy's service-ips map", func(ctx context.Context) error {
		out := k.nft(b, "list", "map", "ip", "kube-proxy", "service-ips")
		if got := strings.Count(out, " : goto service-"); got < n {
			return fmt.Errorf("%d of %d services in service-ips", got, n)
		}
		for _, l := range strings.Split(out, ",") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, k.clusterIP+" . tcp . ") || strings.Contains(l, " "+k.clusterIP+" . tcp . ") {
				if i := strings.Index(l, "goto "); i >= 0 {
					k.chain = strings.Fields(l[i+5:])[0]
				}
			}
		}
		if k.chain == "" {
			return fmt.Errorf("no chain for %s in service-ips", k.clusterIP)
		}
		return nil
	})
	b.Logf("kube-proxy: first full sync %.2f s, done %s after process start; CPU %.1f s (with nft's); RSS %d KiB; chain of svc-00000: %s",
		k.firstFull, k.firstFromStart.Round(time.Millisecond), k.cpuFirst, k.rss, k.chain)
	return k
}

func pidRunning(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// relay accepts on l and relays each connection to target, until l closes.
func relay(l net.Listener, target string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// saveProfile fetches the agent's /debug/pprof/<what> in the background
// into file name of the directory NODEFLOW_BENCH_PPROF names (nothing when
// it is unset), for `go tool pprof`; the returned func waits for it.
func saveProfile(b testing.TB, m *testbed.Member, name, what string) (wait func()) {
	b.Helper()
	dir := os.Getenv("NODEFLOW_BENCH_PPROF")
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			return nsutil.Dial(ctx, m.Netns, network, a, 5*time.Second)
		}}
		defer tr.CloseIdleConnections()
		url := "http://" + agentHealthAddr + "/debug/pprof/" + what
		var resp *http.Response
		var err error
		// The agent may not listen yet.
		for deadline := time.Now().Add(10 * time.Second); ; {
			if resp, err = (&http.Client{Transport: tr, Timeout: time.Minute}).Get(url); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			b.Logf("profile %s: %v", what, err)
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
		if err != nil {
			b.Logf("profile %s: %v", what, err)
		}
	}()
	return func() { <-done }
}

// agentColdStarts runs count cold starts of the agent on m (coldStartAgent; the
// first keeps its profiles when profile is set), with env added to its
// environment, logs each, and returns the median one by time to all
// groups in OVS, the highest peak RSS in MiB, and false when count is 0.
// *pid follows the agent that runs.
func agentColdStarts(b *testing.B, e *env, m *testbed.Member, pid *int, count, services, groups, buckets int, profile bool, env ...string) (coldStart, float64, bool) {
	b.Helper()
	with := ""
	if len(env) > 0 {
		with = " and " + strings.Join(env, " ")
	}
	var runs []coldStart
	for i := range count {
		c := coldStartAgent(b, e, m, *pid, groups, buckets, profile && i == 0, env...)
		*pid = c.pid
		b.Logf("nodeflow: cold start %d with %d services%s: ready %s, all groups in OVS %s after process start; CPU %.1f s; RSS %d KiB (peak %d KiB; %s); %s",
			i+1, services, with, c.ready.Round(time.Millisecond), c.all.Round(time.Millisecond), c.cpu.Seconds(), c.rss, c.peak, c.parts, c.goMem)
		runs = append(runs, c)
	}
	if len(runs) == 0 {
		return coldStart{}, 0, false
	}
	peak := slices.MaxFunc(runs, func(x, y coldStart) int { return cmp.Compare(x.peak, y.peak) }).peak
	slices.SortFunc(runs, func(x, y coldStart) int { return cmp.Compare(x.all, y.all) })
	return runs[len(runs)/2], float64(peak) / 1024, true
}

// coldStart is what one cold start of the agent measured.
type coldStart struct {
	pid        int
	ready, all time.Duration // from the process's start
	cpu        time.Duration
	rss, peak  int // KiB
	parts      string
	goMem      string
}

// coldStartAgent stops the agent pid on m, empties br0 of flows and groups,
// starts a new agent and waits until br0 holds groups groups and buckets
// buckets again. The first cold start keeps its profiles when
// NODEFLOW_BENCH_PPROF is set.
func coldStartAgent(b *testing.B, e *env, m *testbed.Member, pid, groups, buckets int, profile bool, env ...string) coldStart {
	b.Helper()
	stopAgent(b, e, m, pid)
	ofctl(b, m, "del-flows", "br0")
	ofctl(b, m, "del-groups", "br0")
	if g, _ := countGroups(b, m); g != 0 {
		b.Fatalf("br0 still holds %d groups", g)
	}
	restart := time.Now()
	c := coldStart{pid: startAgentEnv(b, e, m, env...).Process.Pid}
	coldProfile := func() {}
	if profile {
		coldProfile = saveProfile(b, m, "cold-cpu.prof", "profile?seconds=10")
	}
	eventually(b, 2*time.Minute, "agent ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	c.ready = time.Since(restart)
	// A dump of 10,000 groups takes about a second to print: the time
	// taken is when the dump that found them all started (the switch read
	// its request a few milliseconds later, ovs-ofctl's start-up), not when
	// it ended.
	var polled time.Time
	eventually(b, 30*time.Minute, "every group and bucket in br0 after a cold start", func(ctx context.Context) error {
		polled = time.Now()
		g, bk := countGroups(b, m)
		if g < groups || bk < buckets {
			return fmt.Errorf("br0 holds %d of %d groups, %d of %d buckets", g, groups, bk, buckets)
		}
		return nil
	})
	c.all = polled.Sub(restart)
	c.rss = mustRSS(b, c.pid)
	var err error
	if c.peak, err = procStatusKiB(c.pid, "VmHWM"); err != nil {
		b.Fatal(err)
	}
	coldProfile()
	if profile {
		saveProfile(b, m, "cold-heap.prof", "heap")()
	}
	c.cpu = time.Duration(ticksToMs(cpuTicks(b, c.pid, false)) * float64(time.Millisecond))
	c.parts, c.goMem = rssParts(c.pid), goMemory(m)
	return c
}

// groupHasDNAT reports whether group gid of br0 has a bucket that DNATs
// to ip, asking the switch over the poller's connection.
func (p *flowPoller) groupHasDNAT(ctx context.Context, gid int, ip netip.Addr) (bool, error) {
	rep, err := p.c.MultipartReply(ctx, &openflow.GroupDescRequest{GroupID: uint32(gid)})
	if err != nil {
		return false, err
	}
	groups, err := rep.GroupDesc()
	if err != nil {
		return false, err
	}
	for _, g := range groups {
		for _, bk := range g.Buckets {
			if dnatsTo(bk.Actions, ip) {
				return true, nil
			}
		}
	}
	return false, nil
}

// dnatsTo reports whether acts hold a conntrack action whose NAT rewrites
// the destination to ip.
func dnatsTo(acts []openflow.Action, ip netip.Addr) bool {
	for _, a := range acts {
		ct, ok := a.(openflow.CT)
		if !ok {
			continue
		}
		for _, na := range ct.Actions {
			if nat, ok := na.(openflow.NAT); ok && nat.Dst && nat.MinAddr == ip {
				return true
			}
		}
	}
	return false
}
