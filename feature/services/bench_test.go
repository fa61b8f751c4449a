package services

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
		for i := range n {
			svc := webService(fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250))
			svc.Name = fmt.Sprintf("s%d", i)
			svc.Spec.Type = "ClusterIP"
			svc.Spec.Ports[0].NodePort = 0
			p.svcs.Record(nil, svc)
			var ips []string
			for j := range 10 {
				ips = append(ips, fmt.Sprintf("10.244.%d.%d", j+1, 1+i%250))
			}
			sl := webSlice(ips...)
			sl.Name, sl.Labels["kubernetes.io/service-name"] = svc.Name+"-x", svc.Name
			p.eps.Record(nil, sl)
		}
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
