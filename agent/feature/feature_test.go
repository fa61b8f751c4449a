package feature

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
)

func TestRestrictRefusesOtherFeatures(t *testing.T) {
	store := reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod})
	o := Restrict(store, "services", []plan.Feature{plan.FeatureService})
	if err := o.Set("service/default/web:80/TCP", reconcile.State{}); err != nil {
		t.Fatalf("own owner refused: %v", err)
	}
	err := o.Set("pod/default/web-1", reconcile.State{})
	if err == nil || !strings.Contains(err.Error(), "does not own") {
		t.Fatalf("another feature's owner: err = %v, want a refusal", err)
	}
	if err := o.Set("bogus/x", reconcile.State{}); err == nil {
		t.Fatal("an undeclared prefix was accepted")
	}
}

func pin(cat byte) *openflow.PacketIn {
	return &openflow.PacketIn{Userdata: []byte{cat, 0, 0, 0, 1}}
}

func TestDispatcherRoutesByCategoryWithBoundedQueues(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := NewDispatcher(reg, logrus.New())
	got := make(chan PacketIn, 10)
	release := make(chan struct{})
	if err := d.Register("services", PacketInCategory{Category: plan.PacketInReject, Queue: 2}, func(p PacketIn) {
		<-release // hold the handler so that the queue fills
		got <- p
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.Register("other", PacketInCategory{Category: plan.PacketInReject}, func(PacketIn) {}); err == nil {
		t.Fatal("a second handler for one category was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.Run(ctx)
	if err := d.Register("late", PacketInCategory{Category: plan.PacketInUnidle}, func(PacketIn) {}); err == nil {
		t.Fatal("registering after Run was accepted")
	}

	// One packet-in is taken by the handler (blocked), two fill the queue,
	// the rest are dropped. Wait until the handler holds the first.
	d.Dispatch(plan.Pod, pin(byte(plan.PacketInReject)))
	deadline := time.Now().Add(5 * time.Second)
	for d.routes[plan.PacketInReject].queue.len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the handler never took the first packet-in")
		}
		time.Sleep(time.Millisecond)
	}
	for range 5 {
		d.Dispatch(plan.Pod, pin(byte(plan.PacketInReject)))
	}
	d.Dispatch(plan.Gateway, pin(99))
	d.Dispatch(plan.Gateway, &openflow.PacketIn{})

	if v := testutil.ToFloat64(d.received.WithLabelValues("reject")); v != 6 {
		t.Errorf("received{reject} = %v, want 6", v)
	}
	if v := testutil.ToFloat64(d.dropped.WithLabelValues("reject", DropQueueFull)); v != 3 {
		t.Errorf("dropped{reject,queue_full} = %v, want 3", v)
	}
	if v := testutil.ToFloat64(d.dropped.WithLabelValues("99", DropUnknown)); v != 1 {
		t.Errorf("dropped{99,unknown} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(d.dropped.WithLabelValues("none", DropMalformed)); v != 1 {
		t.Errorf("dropped{none,malformed} = %v, want 1", v)
	}
	close(release)
	for i := range 3 {
		select {
		case p := <-got:
			if p.Bridge != plan.Pod || p.Category != plan.PacketInReject {
				t.Errorf("packet-in %d: bridge %v category %v", i, p.Bridge, p.Category)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d packet-ins reached the handler, want 3", i)
		}
	}
}

// pinFrom returns a reject packet-in from port that passed meter (0: none).
func pinFrom(port, meter uint32) *openflow.PacketIn {
	fields := []openflow.Field{openflow.InPort(port)}
	if meter != 0 {
		fields = append(fields, openflow.Reg(plan.PuntSource.Index(), meter, 0xffffffff))
	}
	return &openflow.PacketIn{Userdata: []byte{byte(plan.PacketInReject), 0, 0, 0, 1}, Match: openflow.NewMatch(fields...)}
}

func TestSourceOf(t *testing.T) {
	if got := SourceOf(pinFrom(5, 0x20005)); got != 0x20005 {
		t.Errorf("source of a packet-in that passed meter 0x20005: %#x", got)
	}
	if got := SourceOf(pinFrom(5, 0)); got != 1<<32|5 {
		t.Errorf("source of a packet-in from port 5 without a meter: %#x", got)
	}
	if SourceOf(pinFrom(5, 0)) == SourceOf(pinFrom(6, 0)) {
		t.Error("two ports, one source")
	}
}

// The fair queue's timeline, one packet-in at a time, with a queue of 4:
// a flooding source fills it while it is alone; a second source's
// arrival pushes out the flooder's newest, and is handed out second, not
// fifth.
func TestFairQueue(t *testing.T) {
	q := newFairQueue(4)
	ctx := context.Background()
	mk := func(src, i uint32) PacketIn { return PacketIn{Msg: pinFrom(src, src<<8|i)} }
	for i := range uint32(6) {
		dropped := q.push(1, mk(1, i))
		if dropped != (i >= 4) {
			t.Errorf("flood packet-in %d: dropped %v", i, dropped)
		}
	}
	if !q.push(2, mk(2, 0)) {
		t.Error("the second source's arrival into a full queue: nothing dropped")
	}
	if q.len() != 4 {
		t.Fatalf("%d held, want 4", q.len())
	}
	var order []uint32
	for range 4 {
		p, ok := q.pop(ctx)
		if !ok {
			t.Fatal("pop failed")
		}
		order = append(order, p.Msg.Reg(plan.PuntSource.Index()))
	}
	// Source 1's first three (its fourth pushed out), source 2's between.
	want := []uint32{1 << 8, 2 << 8, 1<<8 | 1, 1<<8 | 2}
	if !slices.Equal(order, want) {
		t.Errorf("handed out %#x, want %#x", order, want)
	}
	// Round robin among three: each source in turn.
	q = newFairQueue(8)
	for src := range uint32(3) {
		for i := range uint32(2) {
			q.push(uint64(10+src), mk(10+src, i))
		}
	}
	order = nil
	for range 6 {
		p, _ := q.pop(ctx)
		order = append(order, p.Msg.Reg(plan.PuntSource.Index())>>8)
	}
	if !slices.Equal(order, []uint32{10, 11, 12, 10, 11, 12}) {
		t.Errorf("sources in the order %v, want round robin", order)
	}
	// pop waits, and gives up when its context ends.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, ok := q.pop(cctx); ok {
		t.Error("pop of an empty queue returned a packet-in")
	}
}

// While one pod floods a category whose handler is slow, another pod's
// packet-ins are handled right behind the one in hand: the flood passed
// its own meter, yet cannot fill the queue for anyone else.
func TestDispatcherFairUnderFlood(t *testing.T) {
	d := NewDispatcher(prometheus.NewRegistry(), logrus.New())
	handled := make(chan uint32, 1000)
	step := make(chan struct{})
	if err := d.Register("services", PacketInCategory{Category: plan.PacketInReject, Queue: 64}, func(p PacketIn) {
		<-step
		handled <- p.Msg.InPort()
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.Run(ctx)
	const flooder, victim = 5, 6
	for range 500 {
		d.Dispatch(plan.Pod, pinFrom(flooder, 0x20000|flooder))
	}
	d.Dispatch(plan.Pod, pinFrom(victim, 0x20000|victim))
	// The handler holds one of the flood; the victim's is at most the
	// second after it.
	for i := range 3 {
		step <- struct{}{}
		if port := <-handled; port == victim {
			t.Logf("the victim's packet-in was number %d handled", i+1)
			if dropped := testutil.ToFloat64(d.dropped.WithLabelValues("reject", DropQueueFull)); dropped < 500-64-1 {
				t.Errorf("dropped{reject,queue_full} = %v, want the flood's excess", dropped)
			}
			return
		}
	}
	t.Fatal("the victim's packet-in was not among the first three handled")
}
