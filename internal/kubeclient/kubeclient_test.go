package kubeclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// TestTypedClientSpeaksProtobuf serves a Service only as protobuf, as the
// API server does when asked for it, and checks that the typed client asks
// for protobuf first, decodes the answer, and leaves the caller's
// configuration as it was.
func TestTypedClientSpeaksProtobuf(t *testing.T) {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("the client's scheme has no protobuf serializer")
	}
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	var mu sync.Mutex
	var accepts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		if r.URL.Path != "/api/v1/namespaces/shop/services/web" {
			http.NotFound(w, r)
			return
		}
		if !strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) {
			http.Error(w, "this server answers in protobuf only", http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		if err := enc.Encode(svc, w); err != nil {
			t.Errorf("encode: %v", err)
		}
	}))
	defer srv.Close()

	rc := &rest.Config{Host: srv.URL}
	kc, err := NewTyped(rc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kc.CoreV1().Services("shop").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get over protobuf: %v", err)
	}
	if got.Spec.ClusterIP != "10.96.0.10" || len(got.Spec.Ports) != 1 || got.Spec.Ports[0].Port != 80 {
		t.Errorf("decoded %+v, want the served Service", got.Spec)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(accepts) != 1 || !strings.Contains(accepts[0], runtime.ContentTypeJSON) {
		t.Errorf("Accept headers %q, want one asking for protobuf then JSON", accepts)
	}
	if rc.ContentType != "" || rc.AcceptContentTypes != "" {
		t.Errorf("the caller's configuration changed: %q, %q", rc.ContentType, rc.AcceptContentTypes)
	}
}

// TestListsFirst starts a Service informer on the typed client and checks
// its first request: a list after ListsFirst, the streaming watch of
// client-go's default when the environment asks for it.
func TestListsFirst(t *testing.T) {
	ListsFirst()
	first := func(t *testing.T) *http.Request {
		reqs := make(chan *http.Request, 16)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case reqs <- r:
			default:
			}
			if r.URL.Query().Get("watch") == "true" {
				<-r.Context().Done() // a watch that never says anything
				return
			}
			w.Header().Set("Content-Type", runtime.ContentTypeJSON)
			_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`))
		}))
		t.Cleanup(srv.Close)
		kc, err := NewTyped(&rest.Config{Host: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		factory := informers.NewSharedInformerFactory(kc, 0)
		factory.Core().V1().Services().Informer()
		factory.Start(ctx.Done())
		// Cleanups run last first: stop the informer, then wait for it.
		t.Cleanup(factory.Shutdown)
		t.Cleanup(cancel)
		select {
		case r := <-reqs:
			return r
		case <-time.After(30 * time.Second):
			t.Fatal("the informer sent no request in 30 s")
			return nil
		}
	}
	t.Run("default", func(t *testing.T) {
		if _, set := os.LookupEnv(WatchListEnv); set {
			t.Skipf("%s is set in this test's environment", WatchListEnv)
		}
		q := first(t).URL.Query()
		if q.Get("watch") != "" || q.Get("sendInitialEvents") != "" || q.Get("resourceVersion") != "0" {
			t.Errorf("first request %q, want a list from the API server's cache (resourceVersion=0, no watch)", q.Encode())
		}
	})
	t.Run("environment", func(t *testing.T) {
		t.Setenv(WatchListEnv, "true")
		q := first(t).URL.Query()
		if q.Get("watch") != "true" || q.Get("sendInitialEvents") != "true" {
			t.Errorf("first request %q with %s=true, want client-go's streaming list", q.Encode(), WatchListEnv)
		}
	})
}
