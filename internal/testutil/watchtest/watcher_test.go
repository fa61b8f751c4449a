package watchtest

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// TestOrderAndStop: events pushed before anyone reads arrive in order, and
// Stop closes the channel.
func TestOrderAndStop(t *testing.T) {
	w := New()
	const n = 1000
	for i := range n {
		u := &unstructured.Unstructured{}
		u.SetGeneration(int64(i))
		w.Push(watch.Event{Type: watch.Added, Object: u})
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
	if w.Stopped() {
		t.Fatal("Stopped before Stop")
	}
	w.Stop()
	w.Stop()
	if !w.Stopped() {
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
