package servicefeature

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
)

// kube-proxy's node-level endpoints, which load balancers and operators use
// with any service proxy that replaces it: /healthz (and /livez) on its
// health port, 10256, that load balancers probe to tell whether a node's
// service proxy is programmed; /proxyMode and /metrics on its metrics
// port, 10249.

// Default addresses of the endpoints, kube-proxy's.
const (
	DefaultHealthzAddr = "0.0.0.0:10256"
	DefaultMetricsAddr = "127.0.0.1:10249"
)

// ProxyMode is what /proxyMode answers.
const ProxyMode = "nodeflow"

// proxyHealthTimeout is how long a change may wait for its sync before the
// proxy counts as unhealthy (kube-proxy's default is twice its sync period
// of 30 s).
const proxyHealthTimeout = time.Minute

// proxyHealth is the service proxy's health as /healthz reports it: when
// it last programmed the bridges, and since when changes have waited.
type proxyHealth struct {
	mu          sync.Mutex
	now         func() time.Time
	lastUpdated time.Time // last successful sync
	queuedSince time.Time // oldest change not yet synced, zero for none
	failing     bool      // the last sync failed
}

func newProxyHealth() *proxyHealth { return &proxyHealth{now: time.Now} }

// queued records that a change waits for the next sync.
func (h *proxyHealth) queued() {
	h.mu.Lock()
	if h.queuedSince.IsZero() {
		h.queuedSince = h.now()
	}
	h.mu.Unlock()
}

// synced records a sync that started at start and its outcome: the changes
// queued before it are done if it succeeded.
func (h *proxyHealth) synced(start time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing = err != nil
	if err != nil {
		return
	}
	h.lastUpdated = h.now()
	if !h.queuedSince.After(start) {
		h.queuedSince = time.Time{}
	}
}

// healthzBody is /healthz's answer, kube-proxy's fields.
type healthzBody struct {
	LastUpdated  string `json:"lastUpdated"`
	CurrentTime  string `json:"currentTime"`
	NodeEligible bool   `json:"nodeEligible"`
}

// ServeHTTP answers /healthz and /livez: 200 while the proxy is programmed
// (it has synced, its last sync worked, and no change has waited more than
// proxyHealthTimeout), else 503.
func (h *proxyHealth) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	now := h.now()
	healthy := !h.lastUpdated.IsZero() && !h.failing && (h.queuedSince.IsZero() || now.Sub(h.queuedSince) <= proxyHealthTimeout)
	body := healthzBody{CurrentTime: now.UTC().Format(time.RFC3339Nano), NodeEligible: true}
	if !h.lastUpdated.IsZero() {
		body.LastUpdated = h.lastUpdated.UTC().Format(time.RFC3339Nano)
	}
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

// serveProxyEndpoints serves /healthz and /livez on healthzAddr, and
// /proxyMode and /metrics on metricsAddr ("" leaves one out), until ctx
// ends. An address that cannot be bound is logged, not fatal: the proxy
// works without them.
func serveProxyEndpoints(ctx context.Context, log logrus.FieldLogger, h *proxyHealth, reg prometheus.Gatherer, healthzAddr, metricsAddr string) {
	health := http.NewServeMux()
	health.Handle("/healthz", h)
	health.Handle("/livez", h)
	metrics := http.NewServeMux()
	metrics.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, ProxyMode) })
	metrics.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	metrics.Handle("/healthz", h)
	for _, s := range []struct {
		addr    string
		handler http.Handler
	}{{healthzAddr, health}, {metricsAddr, metrics}} {
		if s.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", s.addr)
		if err != nil {
			log.WithError(err).WithField("addr", s.addr).Warn("cannot serve kube-proxy's node endpoints there")
			continue
		}
		srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: healthCheckReadTimeout}
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.WithError(err).WithField("addr", s.addr).Warn("kube-proxy endpoint server")
			}
		}()
	}
}
