package reconcile

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

// benchOwnerFlows is owner i's flows: n ct/nat flows of the EndpointDNAT
// kind (the anchor's "100,000 ct/nat flows"), each matching the owner's
// ServiceID and one endpoint. version changes the first endpoint, so that
// an update rewrites one flow (a delete and an add).
func benchOwnerFlows(i, n, version int) []openflow.Flow {
	fs := make([]openflow.Flow, n)
	for j := 0; j < n; j++ {
		ep := ipN("10.128.0.0", i*n+j)
		port := uint16(8080)
		if j == 0 {
			port += uint16(version)
		}
		fs[j] = openflow.Flow{
			Table: uint8(plan.PodEndpointDNAT), Priority: uint16(plan.PriorityNormal),
			Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPProto(6),
				mustMatch(plan.ServiceID.MatchValue(uint64(i+1))),
				mustMatch(plan.EndpointIPv4.MatchValue(uint64(binaryAddr(ep)))),
				mustMatch(plan.EndpointPort.MatchValue(uint64(port)))),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
				openflow.CT{Commit: true, Zone: 65000, RecircTable: uint8(plan.PodSNAT),
					Actions: []openflow.Action{openflow.NAT{Dst: true, MinAddr: ep, MinPort: port}}},
			}}},
		}
	}
	return fs
}

func benchOwner(i int) string { return fmt.Sprintf("service/bench/s%05d:80/TCP", i) }

// BenchmarkReconcileFromEmpty measures the start-up reconcile of 100,000
// ct/nat flows (1,000 owners of 100) into an empty bridge: dial, read the
// switch, diff, and one atomic bundle up to its commit reply. In the same
// run it times `ovs-ofctl --bundle add-flows` of the same flows from a file,
// and reports the ratio (below 1: nodeflow is faster).
func BenchmarkReconcileFromEmpty(b *testing.B) {
	const owners, per = 1000, 100
	sb, addr := testBridge(b, ovs.Options{}, "br0")
	var ours, theirs, build time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		s := NewStore(StoreOptions{})
		for o := 0; o < owners; o++ {
			if err := s.Set(benchOwner(o), State{Flows: benchOwnerFlows(o, per, 0)}); err != nil {
				b.Fatal(err)
			}
		}
		build += time.Since(t0)
		b.StartTimer()
		t1 := time.Now()
		run := start(b, addr, s, Options{AuditInterval: -1})
		ours += time.Since(t1)
		b.StopTimer()
		run.stop()
		if n := flowtest.CountFlows(b, sb, "br0"); n != owners*per+1 {
			b.Fatalf("%d flows installed, want %d", n, owners*per+1)
		}
		file := flowtest.FlowFile(b, s, run.r.Generation())
		if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "--bundle", "add-flows", "br0", file); err != nil {
			b.Fatal(err)
		}
		theirs += time.Since(t2)
		if n := flowtest.CountFlows(b, sb, "br0"); n != owners*per+1 {
			b.Fatalf("ovs-ofctl installed %d flows, want %d", n, owners*per+1)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(ours.Seconds()*1000/n, "ms/reconcile")
	b.ReportMetric(theirs.Seconds()*1000/n, "ms/ovs-ofctl-bundle")
	b.ReportMetric(ours.Seconds()/theirs.Seconds(), "ratio-vs-ovs-ofctl")
	b.ReportMetric(float64(owners*per)*n/ours.Seconds(), "flows/s")
	b.ReportMetric(build.Seconds()*1000/n, "ms/store-build")
}

// BenchmarkIncrementalUpdate measures one owner's update (one of its 100
// flows changes: a delete and an add in one bundle), from Set to the
// commit reply. The timed loop runs with 100,000 flows installed (ns/op);
// beforehand the median of 200 updates with 10,000 installed is taken, and
// the report gives both medians and their ratio: the cost must not grow
// with the total. In the same run it times the openshift-sdn way, forking
// `ovs-ofctl bundle` for the same change with 100,000 flows installed.
func BenchmarkIncrementalUpdate(b *testing.B) {
	const per, samples = 100, 200
	sb, addr := testBridge(b, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{})
	for o := 0; o < 100; o++ {
		if err := s.Set(benchOwner(o), State{Flows: benchOwnerFlows(o, per, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	run := start(b, addr, s, Options{AuditInterval: -1})
	ctx := context.Background()
	version := 0
	update := func(owner int) time.Duration {
		version++
		t0 := time.Now()
		if err := s.Set(benchOwner(owner), State{Flows: benchOwnerFlows(owner, per, version%7+1)}); err != nil {
			b.Fatal(err)
		}
		if err := run.r.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	median := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	var at10k []time.Duration
	for k := 0; k < samples; k++ {
		at10k = append(at10k, update(50))
	}
	for o := 100; o < 1000; o++ {
		if err := s.Set(benchOwner(o), State{Flows: benchOwnerFlows(o, per, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := run.r.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if n := flowtest.CountFlows(b, sb, "br0"); n != 1000*per+1 {
		b.Fatalf("%d flows installed, want %d", n, 1000*per+1)
	}
	// At 100,000: this design and the previous one (every flow compared
	// by its text), alternately, in the same run.
	var at100k, text100k []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at100k = append(at100k, update(500))
		s.setTextOnly(true)
		text100k = append(text100k, update(500))
		s.setTextOnly(false)
	}
	b.StopTimer()

	// The same change forked through ovs-ofctl bundle.
	cookie := uint64(plan.MakeCookie(plan.FeatureService, benchOwner(700), run.r.Generation()))
	var ofctl []time.Duration
	for k := 1; k <= 50; k++ {
		nf := benchOwnerFlows(700, per, k)[0]
		nf.Cookie = cookie
		prev := benchOwnerFlows(700, per, k-1)[0]
		prev.Instructions = nil
		file := filepath.Join(b.TempDir(), "bundle.txt")
		text := "flow delete_strict " + strings.TrimSpace(strings.TrimSuffix(prev.String(), " actions=drop")) + "\n" +
			"flow add " + strings.TrimSpace(nf.String()) + "\n"
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "bundle", "br0", file); err != nil {
			b.Fatal(err)
		}
		ofctl = append(ofctl, time.Since(t0))
	}
	ref := median(ofctl)
	m10, m100 := median(at10k), median(at100k)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p99 := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)*99/100]
	}
	b.ReportMetric(ms(m10), "ms/update@10k")
	b.ReportMetric(ms(m100), "ms/update@100k")
	b.ReportMetric(ms(p99(at100k)), "ms-p99/update@100k")
	b.ReportMetric(ms(median(text100k)), "ms/update-text@100k")
	b.ReportMetric(ms(p99(text100k)), "ms-p99/update-text@100k")
	b.ReportMetric(float64(m100)/float64(m10), "ratio-100k/10k")
	b.ReportMetric(ms(ref), "ms/ovs-ofctl-bundle@100k")
	b.ReportMetric(float64(m100)/float64(ref), "ratio-vs-ovs-ofctl")
}

// BenchmarkSwitchRestartReplay kills ovs-vswitchd with 100,000 flows
// installed, starts it again, and measures the time from ovs-vswitchd
// answering again to every flow being back (as dump-aggregate counts them).
func BenchmarkSwitchRestartReplay(b *testing.B) {
	const owners, per = 1000, 100
	sb, addr := testBridge(b, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{})
	for o := 0; o < owners; o++ {
		if err := s.Set(benchOwner(o), State{Flows: benchOwnerFlows(o, per, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	start(b, addr, s, Options{AuditInterval: -1})
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := sb.RestartVswitchd(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
		back := time.Now()
		waittest.Poll(b, "flows replayed", 60*time.Second, func() error {
			out, err := sb.Ofctl("-O", "OpenFlow15", "dump-aggregate", "br0")
			if err != nil {
				return err
			}
			if !strings.Contains(out, fmt.Sprintf("flow_count=%d", owners*per+1)) {
				return fmt.Errorf("%s", strings.TrimSpace(out))
			}
			return nil
		})
		total += time.Since(back)
	}
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/replay-100k")
}

// BenchmarkDriftRepair deletes every flow of a bridge holding 100,000
// (`ovs-ofctl del-flows`), and measures the time from the command's start
// to every flow being back; and, with one flow deleted
// (`ovs-ofctl del-flows --strict`), the time to that flow being back.
func BenchmarkDriftRepair(b *testing.B) {
	const owners, per = 1000, 100
	sb, addr := testBridge(b, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{})
	for o := 0; o < owners; o++ {
		if err := s.Set(benchOwner(o), State{Flows: benchOwnerFlows(o, per, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	repaired := make(chan time.Time, 64)
	start(b, addr, s, Options{AuditInterval: -1, OnSync: func(rep SyncReport) {
		if rep.Stats.Total() > 0 {
			repaired <- rep.Start.Add(rep.Duration)
		}
	}})
	<-repaired
	one := benchOwnerFlows(3, per, 0)[5]
	one.Instructions = nil
	oneSpec := strings.TrimSpace(strings.TrimSuffix(one.String(), " actions=drop"))
	var all, single time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
			b.Fatal(err)
		}
		waittest.Poll(b, "all flows repaired", 60*time.Second, func() error {
			if n := flowtest.CountFlows(b, sb, "br0"); n != owners*per+1 {
				return fmt.Errorf("%d flows", n)
			}
			return nil
		})
		all += time.Since(t0)
		for len(repaired) > 0 {
			<-repaired
		}
		t1 := time.Now()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "--strict", "del-flows", "br0", oneSpec); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-repaired:
			single += at.Sub(t1)
		case <-time.After(30 * time.Second):
			b.Fatal("single flow not repaired")
		}
	}
	b.ReportMetric(all.Seconds()*1000/float64(b.N), "ms/repair-del-flows-100k")
	b.ReportMetric(single.Seconds()*1000/float64(b.N), "ms/repair-one-flow")
}

// buildStore returns a store holding owners*per flows, all recorded as
// installed (as after a successful sync), without any switch.
func buildStore(b *testing.B, owners, per int) *Store {
	s := NewStore(StoreOptions{})
	for o := 0; o < owners; o++ {
		if err := s.Set(benchOwner(o), State{Flows: benchOwnerFlows(o, per, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	d := s.diff(DiffOptions{})
	for _, bt := range d.Batches {
		s.commitBatch(bt)
	}
	return s
}

// BenchmarkStoreMemory reports the heap held per desired flow: the whole
// (the flows the builders made plus the store's bookkeeping) and the
// store's share, for 100,000 flows that are desired and installed.
func BenchmarkStoreMemory(b *testing.B) {
	const owners, per = 1000, 100
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var total, store float64
	for i := 0; i < b.N; i++ {
		base := heap()
		flows := make([][]openflow.Flow, owners)
		for o := range flows {
			flows[o] = benchOwnerFlows(o, per, 0)
		}
		built := heap()
		s := NewStore(StoreOptions{})
		for o := range flows {
			if err := s.Set(benchOwner(o), State{Flows: flows[o]}); err != nil {
				b.Fatal(err)
			}
		}
		d := s.diff(DiffOptions{})
		for _, bt := range d.Batches {
			s.commitBatch(bt)
		}
		flows = nil
		after := heap()
		total = float64(after-base) / (owners * per)
		store = float64(after-built) / (owners * per)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(total, "bytes/flow")
	b.ReportMetric(store, "store-bytes/flow")
}

// BenchmarkUpdateAllocs measures the reconciler's pure work for one
// owner's update (Set, diff, encoding the bundle, recording it as
// installed), with 10,000 and 100,000 flows in the store: allocations and
// time per update, which must not grow with the total.
func BenchmarkUpdateAllocs(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("installed=%dk", n/1000), func(b *testing.B) {
			const per = 100
			s := buildStore(b, n/per, per)
			owner := n / per / 2
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Set(benchOwner(owner), State{Flows: benchOwnerFlows(owner, per, i%7+1)}); err != nil {
					b.Fatal(err)
				}
				d := s.diff(DiffOptions{MaxBundle: 10000})
				for _, bt := range d.Batches {
					if _, _, err := batchMessages(bt, openflow.Version15, 1); err != nil {
						b.Fatal(err)
					}
					s.commitBatch(bt)
				}
				if d.Stats.Total() != 2 {
					b.Fatalf("update changed %s", d.Stats)
				}
			}
		})
	}
}

// BenchmarkAuditCompare measures the CPU an audit spends on a dump it has
// read, at 100,000 flows (1,000 owners of 100 ct/nat flows): from the
// reply's bytes (in 64 KiB parts, as Open vSwitch sends them) to every
// slot settled, for a dump that equals the desired state. Three designs in
// the same run: "inplace" (this one: flows compared in the reply's memory
// by their encoding), "decoded" (every flow decoded, then compared by its
// re-encoded instructions) and "text" (every flow decoded and compared by
// its text, the first design). ratio is inplace/text. Reading the bytes
// from the socket is not included.
func BenchmarkAuditCompare(b *testing.B) {
	const owners, per = 1000, 100
	newStore := func() (*Store, [][]byte) {
		s := NewStore(StoreOptions{Bridge: plan.Pod})
		var stats []openflow.FlowStats
		for i := 0; i < owners; i++ {
			fs := benchOwnerFlows(i, per, 0)
			if err := s.Set(benchOwner(i), State{Flows: fs}); err != nil {
				b.Fatal(err)
			}
		}
		// What a dump gives: the desired flows with their cookies, their
		// matches as Open vSwitch writes them (registers as xregs).
		for _, o := range s.owners {
			for _, e := range o.flows {
				f := *e.value()
				f.Cookie = o.cookie | 1
				f.Match = ovsMatch(b, &e.packed)
				stats = append(stats, openflow.FlowStats{Flow: f})
			}
		}
		// About 60 KiB of these flows a part.
		msgs := replyParts(b, len(stats), 300, func(lo, hi int) (*openflow.MultipartReply, error) {
			return openflow.NewFlowStatsReply(openflow.Version15, stats[lo:hi])
		})
		obs := &Observed{}
		if err := obs.readFlowParts(msgs); err != nil {
			b.Fatal(err)
		}
		s.observe(obs, true) // the first read settles the slots
		return s, msgs
	}
	perFlow := map[string]float64{}
	for _, design := range []string{"inplace", "decoded", "text"} {
		b.Run(design, func(b *testing.B) {
			s, msgs := newStore()
			s.setTextOnly(design == "text")
			nflows := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				obs := &Observed{}
				if err := obs.readFlowParts(msgs); err != nil {
					b.Fatal(err)
				}
				if design != "inplace" {
					if err := obs.decodeFlows(); err != nil {
						b.Fatal(err)
					}
				}
				_, t0, _ := s.Fingerprints()
				if unwanted := s.observe(obs, false); unwanted != 0 {
					b.Fatalf("%d unwanted flows", unwanted)
				}
				if _, t1, _ := s.Fingerprints(); design != "text" && t1 != t0 {
					b.Fatalf("%d flows compared as text", t1-t0)
				}
				nflows = owners * per
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(nflows)
			perFlow[design] = ns
			b.ReportMetric(ns, "ns/flow")
			b.ReportMetric(0, "ns/op")
		})
	}
	if perFlow["text"] > 0 {
		b.ReportMetric(perFlow["inplace"]/perFlow["text"], "inplace/text")
		b.ReportMetric(perFlow["decoded"]/perFlow["text"], "decoded/text")
	}
}

// ovsMatch returns the match of p with its fields as Open vSwitch writes
// them in OpenFlow 1.5 (which is how p holds them).
func ovsMatch(tb testing.TB, p *openflow.PackedFlow) openflow.Match {
	fields := p.MatchFields()
	b := binary.BigEndian.AppendUint16(nil, 1) // OFPMT_OXM
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(fields)))
	b = append(b, fields...)
	b = append(b, make([]byte, (8-len(b)%8)%8)...)
	m, _, err := openflow.UnmarshalMatch(b)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkAuditGroups measures Store.observe of a group dump equal to the
// desired state: 10,000 select groups of 10 ct/nat buckets, as a service
// proxy holds them, read in place (this design) against decoded whole
// (the previous design), in the same run. Reading the reply off the
// connection is left out.
func BenchmarkAuditGroups(b *testing.B) {
	const groups, buckets = 10000, 10
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	var all []openflow.GroupEntry
	for i := 0; i < groups; i++ {
		g := natGroup(i, buckets)
		g.SelectionMethod, g.SelectionFields = "hash", []openflow.Field{openflow.IPProto(6)}
		if err := s.Set(benchOwner(i), State{Groups: []openflow.GroupEntry{g}}); err != nil {
			b.Fatal(err)
		}
		all = append(all, g)
	}
	// About 60 KiB of these groups a part.
	msgs := replyParts(b, len(all), 60, func(lo, hi int) (*openflow.MultipartReply, error) {
		return openflow.NewGroupDescReply(openflow.Version15, all[lo:hi])
	})
	read := func(decode bool) *Observed {
		obs := &Observed{}
		if err := obs.readGroupParts(msgs); err != nil {
			b.Fatal(err)
		}
		if decode {
			if err := obs.decodeGroups(); err != nil {
				b.Fatal(err)
			}
		}
		return obs
	}
	s.observe(read(true), true) // the first read settles the slots
	perGroup := map[string]float64{}
	for _, design := range []string{"inplace", "decoded"} {
		b.Run(design, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				in0, _ := s.GroupComparisons()
				if unwanted := s.observe(read(design == "decoded"), false); unwanted != 0 {
					b.Fatalf("%d unwanted groups", unwanted)
				}
				if in1, _ := s.GroupComparisons(); design == "inplace" && in1-in0 != groups {
					b.Fatalf("%d of %d groups settled in place", in1-in0, groups)
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / groups
			perGroup[design] = ns
			b.ReportMetric(ns, "ns/group")
		})
	}
	if perGroup["decoded"] > 0 {
		b.ReportMetric(perGroup["inplace"]/perGroup["decoded"], "inplace/decoded")
	}
}

// natGroup is benchOwner(i)'s group of a service's kind: a select group,
// id i+1, of buckets ct(nat) buckets.
func natGroup(i, buckets int) openflow.GroupEntry {
	g := openflow.GroupEntry{ID: uint32(i + 1), Type: openflow.GroupTypeSelect}
	for j := range buckets {
		ip := netip.AddrFrom4([4]byte{10, 244, byte(j), byte(i % 250)})
		g.Buckets = append(g.Buckets, openflow.Bucket{ID: uint32(j), Weight: 1, Actions: []openflow.Action{
			openflow.CT{Commit: true, Zone: 65000, RecircTable: 40, Actions: []openflow.Action{openflow.NAT{Dst: true, MinAddr: ip, MinPort: 8080}}},
		}})
	}
	return g
}

// replyParts encodes n entries as the parts of a multipart reply, per
// entries a part, each made by build from entries lo to hi.
func replyParts(tb testing.TB, n, per int, build func(lo, hi int) (*openflow.MultipartReply, error)) [][]byte {
	tb.Helper()
	var msgs [][]byte
	for lo := 0; lo < n; lo += per {
		hi := min(n, lo+per)
		r, err := build(lo, hi)
		if err != nil {
			tb.Fatal(err)
		}
		if hi < n {
			r.Flags |= openflow.MultipartMore
		}
		m, err := openflow.Marshal(openflow.Version15, 1, r)
		if err != nil {
			tb.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}
