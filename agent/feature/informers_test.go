package feature

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestObjectOf(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	if p, ok := ObjectOf[*corev1.Pod](pod); !ok || p != pod {
		t.Errorf("pod: got %v, %v", p, ok)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: pod}
	if p, ok := ObjectOf[*corev1.Pod](tomb); !ok || p != pod {
		t.Errorf("tombstone: got %v, %v", p, ok)
	}
	if n, ok := ObjectOf[*corev1.Node](tomb); ok || n != nil {
		t.Errorf("node from a pod's tombstone: got %v, %v", n, ok)
	}
}

func TestOnEveryChange(t *testing.T) {
	var got []string
	h := OnEveryChange(func(obj any) { got = append(got, obj.(string)) })
	h.OnAdd("added", false)
	h.OnUpdate("old", "new")
	h.OnDelete("deleted")
	if want := []string{"added", "new", "deleted"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestDefaultIfUnset(t *testing.T) {
	d, n, k := time.Duration(0), -3, 7
	DefaultIfUnset(&d, time.Second)
	DefaultIfUnset(&n, 5)
	DefaultIfUnset(&k, 5)
	if d != time.Second || n != 5 || k != 7 {
		t.Errorf("got %v %d %d, want 1s 5 7", d, n, k)
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewCounter("test_a_total", "A."), NewGaugeVec("test_b", "B.", "kind")
	if err := Register(reg, a, b); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, NewCounter("test_c_total", "C."), a); err == nil {
		t.Error("registering a collector twice: no error")
	}
}
