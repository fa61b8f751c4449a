package fakeapi

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWatcherOrderAndStop: events pushed before anyone reads arrive in order, and
// Stop closes the channel.
func TestWatcherOrderAndStop(t *testing.T) {
	w := newWatcher()
	const n = 1000
	for i := range n {
		u := &unstructured.Unstructured{}
		u.SetGeneration(int64(i))
		w.push(watch.Event{Type: watch.Added, Object: u})
	}
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case ev := <-w.ResultChan():
			if g := ev.Object.(*unstructured.Unstructured).GetGeneration(); g != int64(i) {
				t.Fatalf("event %d carries generation %d", i, g)
			}
		case <-deadline:
			t.Fatalf("event %d not delivered", i)
		}
	}
	if w.stopped() {
		t.Fatal("Stopped before Stop")
	}
	w.Stop()
	w.Stop()
	if !w.stopped() {
		t.Fatal("not Stopped after Stop")
	}
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("an event after Stop")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel is still open after Stop")
	}
}
