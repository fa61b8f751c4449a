package kubeclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
