package servicefeature

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/memlimit"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// selfRSS returns this process's resident set size.
func selfRSS(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kib << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// liveHeap returns the heap the last collection found live.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// BenchmarkServiceProxyMemoryReturns feeds the service proxy large
// objects, reconciled into a sandboxed switch's bridges as the agent does,
// then deletes them, and reports the live heap and the resident memory:
// before, with the objects, right after their deletion (what the agent
// kept for minutes before it released memory), and once the agent's
// Releaser has released (what it keeps now). Two shapes: a Service of 100
// ports with one EndpointSlice of 1,000 endpoints (100,000 buckets), and
// 10,000 Services of 10 endpoints, whose maps by owner, port and group id
// are rebuilt when they go (package shrink).
func BenchmarkServiceProxyMemoryReturns(b *testing.B) {
	const ports, endpoints = 100, 1000
	svc := webService("10.96.0.10")
	svc.Spec.Type, svc.Spec.Ports = v1.ServiceTypeClusterIP, nil
	sl := webSlice()
	sl.Ports = nil
	for i := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(1000 + i), Protocol: v1.ProtocolTCP})
		sl.Ports = append(sl.Ports, discovery.EndpointPort{Name: ptr.To(fmt.Sprintf("p%d", i)), Port: ptr.To(int32(2000 + i)), Protocol: ptr.To(v1.ProtocolTCP)})
	}
	for i := range endpoints {
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", 200+i/250, 1+i%250)},
			NodeName: ptr.To("node2"), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}})
	}
	b.Run("100x1000", func(b *testing.B) {
		benchMemoryReturns(b, func(p *Proxy) {
			p.svcs.Record(nil, svc)
			p.eps.Record(nil, sl)
		}, func(p *Proxy) {
			p.svcs.Record(svc, nil)
			p.eps.Record(sl, nil)
		}, ports*endpoints)
	})
	b.Run("10000x10", func(b *testing.B) {
		const n = 10000
		benchMemoryReturns(b, func(p *Proxy) { recordBenchServices(p, n) }, func(p *Proxy) {
			for i := range n {
				s := webService(fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250))
				s.Name = fmt.Sprintf("s%d", i)
				p.svcs.Record(s, nil)
				sl := webSlice()
				sl.Name, sl.Labels["kubernetes.io/service-name"] = fmt.Sprintf("s%d-x", i), fmt.Sprintf("s%d", i)
				p.eps.Record(sl, nil)
			}
		}, n*10)
	})
}

// benchMemoryReturns runs add, then remove, on a service proxy whose
// stores a sandboxed switch's reconcilers keep, and reports the memory
// (see BenchmarkServiceProxyMemoryReturns); buckets is how many add makes.
func benchMemoryReturns(b *testing.B, add, remove func(*Proxy), buckets int) {
	sb := ovstest.New(b, ovs.Options{})
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := testServiceProxy(b)
	recs := map[plan.Bridge]*reconcile.Reconciler{}
	for _, br := range plan.Bridges {
		name := br.String()
		if _, err := sb.Vsctl("add-br", name, "--", "set", "bridge", name, "datapath_type=netdev",
			"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
			b.Fatal(err)
		}
		r := reconcile.New(store(p, br), reconcile.Options{Bridge: name, Logger: log, AuditInterval: -1})
		conn, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock(name), r.ConnOptions(ofconn.Options{Logger: log}))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		go func() { _ = r.Run(ctx) }()
		recs[br] = r
	}
	rel := memlimit.NewReleaser(memlimit.ReleaseOptions{})
	go rel.Run(ctx)
	// sync syncs the proxy, waits for both bridges, and tells the
	// releaser the desired state's size, as the agent does after a pass.
	sync := func() {
		if err := p.sync(ctx, false); err != nil {
			b.Fatal(err)
		}
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer fcancel()
		var size int64
		for br, r := range recs {
			if err := r.Flush(fctx); err != nil {
				b.Fatal(err)
			}
			size += store(p, br).Total().Bytes
		}
		rel.Observe(size)
	}
	sync()
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	for b.Loop() {
		debug.FreeOSMemory()
		heap0, rss0 := liveHeap(), selfRSS(b)
		add(p)
		sync()
		if u := store(p, plan.Pod).Total(); u.Buckets != buckets {
			b.Fatalf("%d buckets desired, want %d", u.Buckets, buckets)
		}
		runtime.GC()
		heap1, rss1 := liveHeap(), selfRSS(b)
		releases := rel.Releases()
		remove(p)
		sync()
		rss2 := selfRSS(b)
		deadline := time.Now().Add(45 * time.Second)
		for rel.Releases() == releases {
			if time.Now().After(deadline) {
				b.Fatal("no release within 45 s of the deletion")
			}
			time.Sleep(10 * time.Millisecond)
		}
		heap3, rss3 := liveHeap(), selfRSS(b)
		b.ReportMetric(mib(heap0), "heap-MiB-before")
		b.ReportMetric(mib(heap1), "heap-MiB-with")
		b.ReportMetric(mib(heap3), "heap-MiB-after")
		b.ReportMetric(mib(rss0), "rss-MiB-before")
		b.ReportMetric(mib(rss1), "rss-MiB-with")
		b.ReportMetric(mib(rss2), "rss-MiB-deleted")
		b.ReportMetric(mib(rss3), "rss-MiB-released")
		if heap3 > heap0+(heap1-heap0)/10 {
			b.Errorf("live heap %.1f MiB after the deletion, %.1f before, %.1f with the objects", mib(heap3), mib(heap0), mib(heap1))
		}
	}
}
