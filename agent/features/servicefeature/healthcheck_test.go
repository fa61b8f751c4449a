package servicefeature

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/model/service"
)

// hcBody is kube-proxy's health-check answer, as a load balancer reads it.
type hcBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func TestHealthChecks(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	h := newHealthChecks(log)
	// Each requested port maps to a loopback listener on a free port.
	addrs := map[uint16]string{}
	busy := map[uint16]bool{}
	h.listen = func(port uint16) (net.Listener, error) {
		if busy[port] {
			return nil, fmt.Errorf("port %d in use", port)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			addrs[port] = l.Addr().String()
		}
		return l, err
	}
	t.Cleanup(h.closeAll)

	svc := types.NamespacedName{Namespace: "default", Name: "lb"}
	http80 := service.ServicePortName{NamespacedName: svc, Port: "http", Protocol: v1.ProtocolTCP}
	dns := service.ServicePortName{NamespacedName: svc, Port: "dns", Protocol: v1.ProtocolUDP}
	ports := map[service.ServicePortName]*service.ServicePort{}
	eps := map[service.ServicePortName][]service.Endpoint{}
	lookup := func(n service.ServicePortName) (*service.ServicePort, []service.Endpoint, bool) {
		p, ok := ports[n]
		return p, eps[n], ok
	}
	ep := func(ip, node string, ready bool) service.Endpoint {
		return service.Endpoint{IP: netip.MustParseAddr(ip), Port: 8080, NodeName: node, Ready: ready, Serving: ready}
	}
	ask := func(t *testing.T, port uint16) (int, hcBody) {
		t.Helper()
		a, ok := addrs[port]
		if !ok {
			t.Fatalf("port %d never opened", port)
		}
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + a + "/")
		if err != nil {
			t.Fatalf("health check on %d: %v", port, err)
		}
		defer resp.Body.Close()
		var b hcBody
		if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
			t.Fatalf("health check on %d: body: %v", port, err)
		}
		return resp.StatusCode, b
	}
	closedPort := func(t *testing.T, port uint16) {
		t.Helper()
		if c, err := net.DialTimeout("tcp", addrs[port], time.Second); err == nil {
			c.Close()
			t.Fatalf("health check port %d (%s) still open", port, addrs[port])
		}
	}

	steps := []struct {
		name      string
		change    func()
		changed   []service.ServicePortName
		port      uint16 // 0: nothing served
		code      int
		local     int
		unhealthy bool
		closed    []uint16
	}{
		{
			name: "no endpoints: 503",
			change: func() {
				ports[http80] = &service.ServicePort{Name: http80, HealthCheckNodePort: 30100}
			},
			changed: []service.ServicePortName{http80}, port: 30100, code: 503, local: 0,
		},
		{
			name: "local ready endpoints of both ports, counted once per address: 200",
			change: func() {
				ports[dns] = &service.ServicePort{Name: dns, HealthCheckNodePort: 30100}
				eps[http80] = []service.Endpoint{ep("10.0.0.1", "n1", true), ep("10.0.0.2", "n1", true), ep("10.0.1.1", "n2", true), ep("10.0.0.3", "n1", false)}
				eps[dns] = []service.Endpoint{ep("10.0.0.1", "n1", true), ep("10.0.0.4", "n1", true)}
			},
			changed: []service.ServicePortName{http80, dns}, port: 30100, code: 200, local: 3,
		},
		{
			name: "only remote endpoints left: 503",
			change: func() {
				eps[http80] = []service.Endpoint{ep("10.0.1.1", "n2", true)}
				eps[dns] = nil
			},
			changed: []service.ServicePortName{http80, dns}, port: 30100, code: 503, local: 0,
		},
		{
			name: "port changes: the old listener closes",
			change: func() {
				ports[http80] = &service.ServicePort{Name: http80, HealthCheckNodePort: 30200}
				ports[dns] = &service.ServicePort{Name: dns, HealthCheckNodePort: 30200}
				eps[http80] = []service.Endpoint{ep("10.0.0.9", "n1", true)}
			},
			changed: []service.ServicePortName{http80, dns}, port: 30200, code: 200, local: 1, closed: []uint16{30100},
		},
		{
			name: "busy port: nothing served, retried at the next update",
			change: func() {
				busy[30300] = true
				ports[http80] = &service.ServicePort{Name: http80, HealthCheckNodePort: 30300}
				ports[dns] = &service.ServicePort{Name: dns, HealthCheckNodePort: 30300}
			},
			changed: []service.ServicePortName{http80, dns}, port: 0, closed: []uint16{30200},
		},
		{
			name:    "port free again: served at the next update",
			change:  func() { delete(busy, 30300) },
			changed: nil, port: 30300, code: 200, local: 1,
		},
		{
			name:    "failed sync: 503 with local endpoints, serviceProxyHealthy false",
			change:  func() { h.setProxyHealthy(false) },
			changed: nil, port: 30300, code: 503, local: 1, unhealthy: true,
		},
		{
			name:    "good sync again: 200",
			change:  func() { h.setProxyHealthy(true) },
			changed: nil, port: 30300, code: 200, local: 1,
		},
		{
			name:    "service gone: closed",
			change:  func() { delete(ports, http80); delete(ports, dns) },
			changed: []service.ServicePortName{http80, dns}, port: 0, closed: []uint16{30300},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.change()
			h.update(s.changed, "n1", lookup)
			serving := h.serving()
			if s.port == 0 {
				if len(serving) != 0 {
					t.Fatalf("serving %v, want nothing", serving)
				}
			} else {
				if serving[svc] != s.port || len(serving) != 1 {
					t.Fatalf("serving %v, want %s on %d", serving, svc, s.port)
				}
				code, b := ask(t, s.port)
				if code != s.code || b.LocalEndpoints != s.local || b.Service.Namespace != "default" || b.Service.Name != "lb" || b.ServiceProxyHealthy == s.unhealthy {
					t.Errorf("answer %d %+v, want %d with %d local endpoints for default/lb, proxy healthy %v", code, b, s.code, s.local, !s.unhealthy)
				}
			}
			for _, p := range s.closed {
				closedPort(t, p)
			}
		})
	}
}
