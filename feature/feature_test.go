package feature

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"nodeflow/flows/plan"
	"nodeflow/flows/reconcile"
	"nodeflow/openflow"
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
	for len(d.routes[plan.PacketInReject].queue) != 0 {
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
