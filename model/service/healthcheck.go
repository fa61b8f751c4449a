package service

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// HealthCheck answers a LoadBalancer's health checks on a Service's
// healthCheckNodePort (externalTrafficPolicy=Local) the way kube-proxy
// does: 200 when this node has local endpoints for the Service, 503 when
// it has none, with a JSON body naming the Service and the count. The
// agent serves one per health-check port and updates it after each sync.
type HealthCheck struct {
	service types.NamespacedName
	mu      sync.Mutex
	local   int
	healthy bool
}

// NewHealthCheck returns the handler of one Service, with no local
// endpoints yet and the proxy healthy.
func NewHealthCheck(service types.NamespacedName) *HealthCheck {
	return &HealthCheck{service: service, healthy: true}
}

// SetLocalEndpoints records how many endpoints of the Service run on this
// node.
func (h *HealthCheck) SetLocalEndpoints(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.local = n
}

// SetProxyHealthy records whether the agent's last sync succeeded; an
// unhealthy proxy answers 503 whatever the endpoints.
func (h *HealthCheck) SetProxyHealthy(ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.healthy = ok
}

type healthBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// ServeHTTP answers any path.
func (h *HealthCheck) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	var body healthBody
	body.Service.Namespace, body.Service.Name = h.service.Namespace, h.service.Name
	body.LocalEndpoints, body.ServiceProxyHealthy = h.local, h.healthy
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(body.LocalEndpoints))
	if body.LocalEndpoints == 0 || !body.ServiceProxyHealthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	_ = json.NewEncoder(w).Encode(body)
}
