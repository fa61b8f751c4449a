package reconcile

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
)

// heapInUse returns the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// TestStoreBytesEstimate holds the Store's estimate of its own memory
// (Use.Bytes) to the heap a Store grows by, for the shapes that cost most:
// 2,000 service ports of 20 endpoints (a group and 21 flows each), and 20
// ports of 1,000 endpoints, whose groups are too large for one message.
func TestStoreBytesEstimate(t *testing.T) {
	for _, c := range []struct {
		name       string
		ports, eps int
	}{{"2000x20", 2000, 20}, {"20x1000", 20, 1000}, {"4x5000", 4, 5000}} {
		t.Run(c.name, func(t *testing.T) {
			before := heapInUse()
			states := make([]State, c.ports)
			eps := make([]netip.Addr, c.eps)
			for j := range eps {
				eps[j] = ipN("10.244.0.1", j)
			}
			for i := range states {
				states[i] = serviceState(uint32(i+1), ipN("10.96.0.1", i), 80, eps, 8080, false)
			}
			s := NewStore(StoreOptions{})
			for i, st := range states {
				if err := s.Set(fmt.Sprintf("service/ns%d/s%d:80/TCP", i%10, i), st); err != nil {
					t.Fatal(err)
				}
			}
			// The states are the caller's: only the Store's share counts.
			states = nil
			grown := heapInUse() - before
			est := s.Total().Bytes
			ratio := float64(est) / float64(grown)
			t.Logf("%s: estimate %d bytes, heap grew %d: %.2f", c.name, est, grown, ratio)
			if ratio < 0.67 || ratio > 1.5 {
				t.Errorf("estimate %d bytes is %.2f times the heap's growth of %d", est, ratio, grown)
			}
			runtime.KeepAlive(s)
			runtime.KeepAlive(states)
		})
	}
}
