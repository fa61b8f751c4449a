package cni

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func rng(s string) Range {
	p := netip.MustParsePrefix(s)
	return Range{Subnet: p, Gateway: p.Addr().Next()}
}

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreAllocate(t *testing.T) {
	s := openStore(t, t.TempDir())
	r := rng("10.0.0.0/29") // .0 network, .1 gateway, .2-.6 usable, .7 broadcast
	a1 := Attachment{"c1", "eth0"}
	got, err := s.Allocate(a1, r)
	if err != nil {
		t.Fatal(err)
	}
	if got != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("first address %s, want 10.0.0.2", got)
	}
	again, err := s.Allocate(a1, r)
	if err != nil || again != got {
		t.Errorf("retried allocate gave %s, %v; want %s", again, err, got)
	}
	a2 := Attachment{"c2", "eth0"}
	got2, _ := s.Allocate(a2, r)
	if got2 != netip.MustParseAddr("10.0.0.3") {
		t.Errorf("second address %s, want 10.0.0.3", got2)
	}
	if err := s.Release(a1); err != nil {
		t.Fatal(err)
	}
	// Round robin: .2 was just released, the next is .4.
	got3, _ := s.Allocate(Attachment{"c3", "eth0"}, r)
	if got3 != netip.MustParseAddr("10.0.0.4") {
		t.Errorf("after release got %s, want 10.0.0.4 (round robin)", got3)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir(), "10.0.0.3"))
	if err != nil || string(b) != "c2\neth0\n" {
		t.Errorf("record of 10.0.0.3 = %q, %v", b, err)
	}
	if ips, _ := s.Lookup(a2); len(ips) != 1 || ips[0] != got2 {
		t.Errorf("lookup c2 = %v", ips)
	}
}

func TestStoreExhausted(t *testing.T) {
	s := openStore(t, t.TempDir())
	r := rng("10.0.0.0/30") // only .2 is usable
	if a, err := s.Allocate(Attachment{"c1", "eth0"}, r); err != nil || a != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("allocate: %s, %v", a, err)
	}
	_, err := s.Allocate(Attachment{"c2", "eth0"}, r)
	if !errors.Is(err, ErrRangeExhausted) {
		t.Fatalf("error %v, want ErrRangeExhausted", err)
	}
	// IPv6: a /126 has ::1 (gateway), ::2 and ::3 (no broadcast in IPv6).
	r6 := rng("fd00::/126")
	for i, want := range []string{"fd00::2", "fd00::3"} {
		a, err := s.Allocate(Attachment{fmt.Sprint("v6-", i), "eth0"}, r6)
		if err != nil || a != netip.MustParseAddr(want) {
			t.Fatalf("allocate %d: %s, %v; want %s", i, a, err, want)
		}
	}
	if _, err := s.Allocate(Attachment{"v6-x", "eth0"}, r6); !errors.Is(err, ErrRangeExhausted) {
		t.Fatalf("error %v, want ErrRangeExhausted", err)
	}
}

func TestStoreCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	// A crash between writing the temporary record and linking it leaves
	// only the temporary file: the address must still be free.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-deadbeef"), []byte("c0\neth0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	if _, err := os.Stat(filepath.Join(dir, ".tmp-deadbeef")); !os.IsNotExist(err) {
		t.Error("temporary file left by a crash was not removed")
	}
	a, err := s.Allocate(Attachment{"c1", "eth0"}, rng("10.0.0.0/30"))
	if err != nil || a != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("allocate after crash: %s, %v", a, err)
	}
	// A corrupt last-reserved file is ignored.
	s.Close()
	if err := os.WriteFile(filepath.Join(dir, "last-reserved-ip.4"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	if _, err := s2.Allocate(Attachment{"c2", "eth0"}, rng("10.0.0.0/29")); err != nil {
		t.Errorf("allocate with a corrupt last-reserved file: %v", err)
	}
}

func TestStoreGC(t *testing.T) {
	s := openStore(t, t.TempDir())
	r := rng("10.0.0.0/24")
	keep, drop := Attachment{"keep", "eth0"}, Attachment{"drop", "eth0"}
	for _, a := range []Attachment{keep, drop} {
		if _, err := s.Allocate(a, r); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.GC([]Attachment{keep})
	if err != nil || n != 1 {
		t.Fatalf("gc released %d, %v; want 1", n, err)
	}
	all, _ := s.Allocations()
	if len(all) != 1 {
		t.Fatalf("allocations after gc: %v", all)
	}
	for _, o := range all {
		if o != keep {
			t.Errorf("gc kept %v", o)
		}
	}
}

// Concurrent invocations (each opening the store, as separate plugin
// processes do) never hand out an address twice.
func TestStoreConcurrent(t *testing.T) {
	dir := t.TempDir()
	r := rng("10.0.0.0/24")
	var wg sync.WaitGroup
	results := make(chan netip.Addr, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenStore(dir)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			a, err := s.Allocate(Attachment{fmt.Sprint("c", i), "eth0"}, r)
			if err != nil {
				t.Error(err)
				return
			}
			results <- a
		}()
	}
	wg.Wait()
	close(results)
	seen := map[netip.Addr]bool{}
	for a := range results {
		if seen[a] {
			t.Errorf("%s handed out twice", a)
		}
		seen[a] = true
	}
	if len(seen) != 40 {
		t.Errorf("%d distinct addresses, want 40", len(seen))
	}
}
