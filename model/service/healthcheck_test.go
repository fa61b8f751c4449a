package service

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestHealthCheck(t *testing.T) {
	h := NewHealthCheck(types.NamespacedName{Namespace: "default", Name: "lb"})
	ask := func() (int, healthBody, http.Header) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		var b healthBody
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
		return rec.Code, b, rec.Header()
	}
	tests := []struct {
		name    string
		local   int
		healthy bool
		code    int
	}{
		{"no local endpoints", 0, true, 503},
		{"two local endpoints", 2, true, 200},
		{"proxy unhealthy", 2, false, 503},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.SetLocalEndpoints(tc.local)
			h.SetProxyHealthy(tc.healthy)
			code, b, hdr := ask()
			if code != tc.code || b.LocalEndpoints != tc.local || b.ServiceProxyHealthy != tc.healthy ||
				b.Service.Namespace != "default" || b.Service.Name != "lb" {
				t.Errorf("got %d %+v", code, b)
			}
			if hdr.Get("Content-Type") != "application/json" || hdr.Get("X-Load-Balancing-Endpoint-Weight") == "" {
				t.Errorf("headers %v", hdr)
			}
		})
	}
}
