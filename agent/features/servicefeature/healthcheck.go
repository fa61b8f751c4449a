package servicefeature

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/model/service"
)

// healthCheckReadTimeout bounds a health-check request; load balancers
// ask often and briefly.
const healthCheckReadTimeout = 5 * time.Second

// healthChecks serves the health-check node ports of the Services with
// externalTrafficPolicy=Local (spec.healthCheckNodePort), as kube-proxy
// does: one HTTP listener per Service, on every address of the node's host
// namespace, answering 200 while this node has local endpoints for the
// Service and 503 while it has none (proxy.HealthCheck writes the answer).
//
// The service proxy calls update after each sync with the service ports
// that changed; a listener is closed when its Service goes away, stops
// asking for one, or changes port. A port that cannot be bound (in use)
// is tried again at each sync.
type healthChecks struct {
	log logrus.FieldLogger
	// listen opens the listener of a port; tests replace it.
	listen func(port uint16) (net.Listener, error)

	mu sync.Mutex
	// ports holds, per service port that asks for a health check, its
	// Service, port and local endpoints.
	ports map[service.ServicePortName]hcPort
	// servers are the listeners running, per Service.
	servers map[types.NamespacedName]*hcServer
	closed  bool
	// unhealthy: the last sync failed (setProxyHealthy).
	unhealthy bool
}

// hcPort is what one service port contributes to its Service's health
// check.
type hcPort struct {
	port  uint16
	local []netip.Addr // addresses of its ready endpoints on this node
}

// hcServer is one Service's listener.
type hcServer struct {
	port uint16
	hc   *service.HealthCheck
	srv  *http.Server // nil while the port cannot be bound
}

func newHealthChecks(log logrus.FieldLogger) *healthChecks {
	return &healthChecks{
		log: log.WithField("component", "healthcheck"),
		listen: func(port uint16) (net.Listener, error) {
			return net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
		},
		ports:   map[service.ServicePortName]hcPort{},
		servers: map[types.NamespacedName]*hcServer{},
	}
}

// localReady returns the distinct addresses of the ready endpoints on node
// (kube-proxy counts those).
func localReady(eps []service.Endpoint, node string) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, e := range eps {
		if e.NodeName == node && e.Ready && !seen[e.IP] {
			seen[e.IP] = true
			out = append(out, e.IP)
		}
	}
	return out
}

// update takes the current state of the changed service ports: lookup
// returns a port (false when it is gone) and its endpoints. It then opens,
// updates and closes listeners to match.
func (h *healthChecks) update(changed []service.ServicePortName, node string,
	lookup func(service.ServicePortName) (*service.ServicePort, []service.Endpoint, bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	touched := map[types.NamespacedName]bool{}
	for _, n := range changed {
		if _, had := h.ports[n]; had {
			touched[n.NamespacedName] = true
		}
		delete(h.ports, n)
		port, eps, ok := lookup(n)
		if !ok || port.HealthCheckNodePort == 0 {
			continue
		}
		h.ports[n] = hcPort{port: port.HealthCheckNodePort, local: localReady(eps, node)}
		touched[n.NamespacedName] = true
	}
	// Services whose listener failed before are retried.
	for svc, s := range h.servers {
		if s.srv == nil {
			touched[svc] = true
		}
	}
	if len(touched) == 0 {
		return
	}
	// The wanted port and local endpoints of each touched Service.
	type want struct {
		port  uint16
		local map[netip.Addr]bool
	}
	wants := map[types.NamespacedName]*want{}
	for n, p := range h.ports {
		if !touched[n.NamespacedName] {
			continue
		}
		w := wants[n.NamespacedName]
		if w == nil {
			w = &want{port: p.port, local: map[netip.Addr]bool{}}
			wants[n.NamespacedName] = w
		}
		for _, a := range p.local {
			w.local[a] = true
		}
	}
	for svc := range touched {
		w, s := wants[svc], h.servers[svc]
		if s != nil && (w == nil || w.port != s.port) {
			h.stop(svc, s)
			s = nil
		}
		if w == nil {
			continue
		}
		if s == nil {
			s = &hcServer{port: w.port, hc: service.NewHealthCheck(svc)}
			s.hc.SetProxyHealthy(!h.unhealthy)
			h.servers[svc] = s
		}
		s.hc.SetLocalEndpoints(len(w.local))
		if s.srv == nil {
			h.start(svc, s)
		}
	}
}

// start opens s's listener and serves it; on failure s stays without one
// and the next update tries again.
func (h *healthChecks) start(svc types.NamespacedName, s *hcServer) {
	log := h.log.WithFields(logrus.Fields{"service": svc.String(), "port": s.port})
	l, err := h.listen(s.port)
	if err != nil {
		log.WithError(err).Warn("cannot open the health-check node port; will retry")
		return
	}
	s.srv = &http.Server{Handler: s.hc, ReadHeaderTimeout: healthCheckReadTimeout, ReadTimeout: healthCheckReadTimeout}
	srv := s.srv
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Warn("health-check server stopped")
		}
	}()
	log.Info("serving health checks")
}

// stop closes s's listener and forgets it.
func (h *healthChecks) stop(svc types.NamespacedName, s *hcServer) {
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
		h.log.WithFields(logrus.Fields{"service": svc.String(), "port": s.port}).Info("stopped serving health checks")
	}
	delete(h.servers, svc)
}

// setProxyHealthy records whether the last sync succeeded; the health
// checks answer 503 while it did not, as kube-proxy's do while its
// proxier is unhealthy.
func (h *healthChecks) setProxyHealthy(ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unhealthy = !ok
	for _, s := range h.servers {
		s.hc.SetProxyHealthy(ok)
	}
}

// closeAll closes every listener; later updates do nothing.
func (h *healthChecks) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for svc, s := range h.servers {
		h.stop(svc, s)
	}
}

// serving returns the port each Service is served on (for tests).
func (h *healthChecks) serving() map[types.NamespacedName]uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[types.NamespacedName]uint16{}
	for svc, s := range h.servers {
		if s.srv != nil {
			out[svc] = s.port
		}
	}
	return out
}

// healthSync is the service proxy's hook after a sync's builds: it hands
// the changed ports to the health checks.
func (p *Proxy) healthSync(changed []service.ServicePortName, node string) {
	if p.health == nil {
		return
	}
	p.health.update(changed, node, func(n service.ServicePortName) (*service.ServicePort, []service.Endpoint, bool) {
		port, ok := p.svcs.Port(n)
		if !ok {
			return nil, nil, false
		}
		eps, _ := p.eps.Usable(n, &p.check) // reported by the sync
		return port, eps, true
	})
}

// syncReportingHealth is the Runner's sync: p.sync, whose outcome the
// health checks report as serviceProxyHealthy, and kube-proxy's /healthz.
func (p *Proxy) syncReportingHealth(ctx context.Context, full bool) error {
	start := time.Now()
	err := p.sync(ctx, full)
	if p.health != nil {
		p.health.setProxyHealthy(err == nil)
	}
	p.proxyHealth.synced(start, err)
	return err
}
