package shrink

import (
	"runtime"
	"testing"
)

// heapInUse returns the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestMapGivesBackRoom fills a map with 100,000 entries, deletes all but
// ten, and checks that the rebuilt map holds them and that the heap gets
// back what the full map took; the map Map leaves alone keeps it.
func TestMapGivesBackRoom(t *testing.T) {
	const n = 100000
	fill := func() map[int][4]int64 {
		m := map[int][4]int64{}
		for i := range n {
			m[i] = [4]int64{int64(i)}
		}
		return m
	}
	base := heapInUse()
	var p Peak
	m := Map(fill(), &p)
	full := heapInUse()
	for i := 10; i < n; i++ {
		delete(m, i)
	}
	kept := heapInUse()
	m = Map(m, &p)
	after := heapInUse()
	if len(m) != 10 || m[9] != [4]int64{9} {
		t.Fatalf("rebuilt map: %d entries, m[9]=%v", len(m), m[9])
	}
	grown := int64(full) - int64(base)
	t.Logf("heap: %d KiB before, %d full, %d after deleting (map kept), %d after Map", base>>10, full>>10, kept>>10, after>>10)
	if held := int64(kept) - int64(base); held < grown/2 {
		t.Fatalf("the Go runtime gave back a map's room by itself (%d of %d bytes held): Map's premise is gone", held, grown)
	}
	if held := int64(after) - int64(base); held > grown/10 {
		t.Errorf("after Map, %d bytes of the full map's %d are still held", held, grown)
	}
	runtime.KeepAlive(m)
}

// TestMapPeaks: a small map is never rebuilt, and a map is rebuilt only
// below a quarter of its peak.
func TestMapPeaks(t *testing.T) {
	var p Peak
	small := map[int]bool{}
	for i := range MinPeak - 1 {
		small[i] = true
	}
	small = Map(small, &p)
	clear(small)
	before := small
	small[1] = true
	if got := Map(small, &p); !sameMap(got, before) {
		t.Error("a map that never reached MinPeak was rebuilt")
	}

	p = Peak{}
	m := map[int]bool{}
	for i := range 4000 {
		m[i] = true
	}
	m = Map(m, &p)
	for i := 1000; i < 4000; i++ {
		delete(m, i)
	}
	// 1,000 of 4,000: at a quarter, kept.
	if got := Map(m, &p); !sameMap(got, m) {
		t.Error("rebuilt at a quarter of its peak")
	}
	delete(m, 0)
	got := Map(m, &p)
	if sameMap(got, m) || len(got) != 999 {
		t.Errorf("not rebuilt below a quarter of its peak (%d entries)", len(got))
	}
	// The rebuilt map's peak is its size now: deleting more of it is no
	// reason to rebuild again.
	delete(got, 1)
	if again := Map(got, &p); !sameMap(again, got) {
		t.Error("rebuilt again right after a rebuild")
	}
}

// sameMap reports whether a and b are the same map (not equal: the same).
func sameMap(a, b map[int]bool) bool {
	a[-1] = true
	_, ok := b[-1]
	delete(a, -1)
	return ok
}
