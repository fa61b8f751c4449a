package servicefeature

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkServiceProxyMemory10k syncs 10,000 ClusterIP services of 10
// remote endpoints each into the stores (no switch, no API server) and
// reports the heap they keep per service port, and the time of one sync
// of them all. It isolates what the agent's RSS figure in
// docs/benchmarks.md (BenchmarkServices10k) is made of: the desired flows
// and groups and the trackers' model, without informer caches or GC slack.
func BenchmarkServiceProxyMemory10k(b *testing.B) {
	const n = 10000
	for range b.N {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p := testServiceProxy(b)
		recordBenchServices(p, n)
		b.StartTimer()
		start := time.Now()
		if err := p.sync(context.Background(), false); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/n, "heapB/service")
		b.ReportMetric(took.Seconds(), "s/sync")
		runtime.KeepAlive(p)
		b.StartTimer()
	}
}

// BenchmarkServiceProxyChange10k changes one endpoint of one of 10,000
// ClusterIP services of 10 endpoints and syncs: the agent's work for one
// endpoint change at scale, without the switch and the API server.
func BenchmarkServiceProxyChange10k(b *testing.B) {
	const n = 10000
	p := testServiceProxy(b)
	recordBenchServices(p, n)
	ctx := context.Background()
	if err := p.sync(ctx, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		recordBenchSlice(p, i%n, i+1)
		if err := p.sync(ctx, false); err != nil {
			b.Fatal(err)
		}
	}
}

// recordBenchServices records n ClusterIP services s0... of one port, each
// with one EndpointSlice of 10 endpoints (recordBenchSlice, version 0).
func recordBenchServices(p *Proxy, n int) {
	for i := range n {
		svc := webService(fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250))
		svc.Name = fmt.Sprintf("s%d", i)
		svc.Spec.Type = "ClusterIP"
		svc.Spec.Ports[0].NodePort = 0
		p.svcs.Record(nil, svc)
		recordBenchSlice(p, i, 0)
	}
}

// recordBenchSlice records service s<i>'s EndpointSlice in version k: its
// last endpoint's address moves with k.
func recordBenchSlice(p *Proxy, i, k int) {
	var ips []string
	for j := range 10 {
		ips = append(ips, fmt.Sprintf("10.244.%d.%d", j+1, 1+(i+k*(j/9))%250))
	}
	sl := webSlice(ips...)
	sl.Name, sl.Labels["kubernetes.io/service-name"] = fmt.Sprintf("s%d-x", i), fmt.Sprintf("s%d", i)
	p.eps.Record(nil, sl)
}
