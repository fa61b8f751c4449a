package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/testbed/nsutil"
)

// startProbes starts c's probes for the process it just started: the
// startup probe first, then readiness and liveness. Without a readiness
// probe a container is ready once started; a liveness probe that fails its
// threshold restarts the container (its restart policy permitting), as a
// kubelet's does. They end when the container's process does.
func (w *podWorker) startProbes(ctx context.Context, pod *v1.Pod, c *container) {
	pctx, cancel := context.WithCancel(ctx)
	w.probeCancel[c] = cancel
	c.mu.Lock()
	exited := c.exited
	if c.spec.ReadinessProbe == nil && c.spec.StartupProbe == nil {
		c.ready = true
	}
	c.mu.Unlock()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-pctx.Done():
		}
	}()
	go func() {
		if p := c.spec.StartupProbe; p != nil {
			if !w.probeLoop(pctx, pod, c, "Startup", p) {
				return
			}
			c.mu.Lock()
			c.started = true
			c.ready = c.spec.ReadinessProbe == nil
			c.mu.Unlock()
			w.poke()
		}
		if p := c.spec.LivenessProbe; p != nil {
			go func() {
				if !w.probeLoop(pctx, pod, c, "Liveness", p) {
					return
				}
				w.log.WithField("container", c.spec.Name).Info("liveness probe failed; restarting the container")
				w.k.recorder.Eventf(pod, v1.EventTypeNormal, "Killing", "Container %s failed liveness probe, will be restarted", c.spec.Name)
				grace := 30 * time.Second
				if p.TerminationGracePeriodSeconds != nil {
					grace = time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
				} else if pod.Spec.TerminationGracePeriodSeconds != nil {
					grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
				}
				stopContainer(c, grace)
			}()
		}
		if p := c.spec.ReadinessProbe; p != nil {
			w.probeLoop(pctx, pod, c, "Readiness", p)
		}
	}()
}

// runPreStop starts c's preStop hook, if it has one and runs; the
// container's preStopDone turns true when the hook returns (or grace ends),
// and the worker is poked so that drain sends the SIGTERM then.
func (w *podWorker) runPreStop(ctx context.Context, pod *v1.Pod, c *container, grace time.Duration) {
	c.mu.Lock()
	h := (*v1.LifecycleHandler)(nil)
	if c.spec.Lifecycle != nil && c.proc != nil {
		h = c.spec.Lifecycle.PreStop
	}
	if h == nil {
		c.preStop = closedChan
		c.mu.Unlock()
		return
	}
	done := make(chan struct{})
	c.preStop = done
	c.mu.Unlock()
	go func() {
		defer func() { close(done); w.poke() }()
		hctx, cancel := context.WithTimeout(ctx, grace)
		defer cancel()
		if err := w.runHook(hctx, pod, c, h); err != nil {
			w.log.WithError(err).WithField("container", c.spec.Name).Warn("preStop hook")
			w.k.recorder.Eventf(pod, v1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %v", err)
		}
	}()
}

// closedChan is a closed channel: a preStop hook that is done.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// runHook runs a lifecycle handler: exec in the container, an HTTP GET
// from the pod's namespace, or a sleep.
func (w *podWorker) runHook(ctx context.Context, pod *v1.Pod, c *container, h *v1.LifecycleHandler) error {
	switch {
	case h.Sleep != nil:
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
		}
		return nil
	case h.Exec != nil:
		var out strings.Builder
		if err := w.execIn(ctx, pod, c, h.Exec.Command, nil, &out, &out); err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(out.String()))
		}
		return nil
	case h.HTTPGet != nil:
		dl, _ := ctx.Deadline()
		return w.probe(ctx, pod, c, v1.ProbeHandler{HTTPGet: h.HTTPGet}, time.Until(dl))
	}
	return nil
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// probeLoop runs probe p every period. For the readiness probe it records
// each change of verdict and runs until ctx ends. For the startup
// and liveness probes it returns true once the probe has
// succeeded, or failed, its threshold: its verdict; false if ctx ended.
func (w *podWorker) probeLoop(ctx context.Context, pod *v1.Pod, c *container, kind string, p *v1.Probe) bool {
	period := time.Duration(orDefault(p.PeriodSeconds, 10)) * time.Second
	timeout := time.Duration(orDefault(p.TimeoutSeconds, 1)) * time.Second
	successThreshold := int(orDefault(p.SuccessThreshold, 1))
	failureThreshold := int(orDefault(p.FailureThreshold, 3))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	ready, successes, failures := false, 0, 0
	for {
		err := w.probe(ctx, pod, c, p.ProbeHandler, timeout)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
		}
		switch kind {
		case "Startup":
			if successes >= 1 {
				return true
			}
			if failures >= failureThreshold {
				w.k.recorder.Eventf(pod, v1.EventTypeWarning, "Unhealthy", "Startup probe failed: %v", err)
				stopContainer(c, time.Second)
				return false
			}
		case "Liveness":
			if err != nil {
				w.k.recorder.Eventf(pod, v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %v", err)
			}
			if failures >= failureThreshold {
				return true
			}
		default:
			changed := false
			switch {
			case !ready && successes >= successThreshold:
				ready, changed = true, true
			case ready && failures >= failureThreshold:
				ready, changed = false, true
			}
			if changed {
				c.mu.Lock()
				c.ready = ready
				c.mu.Unlock()
				if ready {
					w.log.WithField("container", c.spec.Name).Info("readiness probe succeeded")
				} else {
					w.log.WithField("container", c.spec.Name).WithError(err).Info("readiness probe failed")
					w.k.recorder.Eventf(pod, v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %v", err)
				}
				w.poke()
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(period):
		}
	}
}

// resolvePort turns a probe's port (number or containerPort name) into a number.
func resolvePort(p intstr.IntOrString, c v1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no containerPort named %q", p.StrVal)
}

// probe runs one probe: HTTP and TCP from inside the pod's network
// namespace (against the pod's IP), exec inside the container.
func (w *podWorker) probe(ctx context.Context, pod *v1.Pod, c *container, h v1.ProbeHandler, timeout time.Duration) error {
	w.mu.Lock()
	netns, podIPs := w.netns, w.podIPs
	w.mu.Unlock()
	host := ""
	if len(podIPs) > 0 {
		host = podIPs[0]
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case h.HTTPGet != nil:
		port, err := resolvePort(h.HTTPGet.Port, c.spec)
		if err != nil {
			return err
		}
		if h.HTTPGet.Host != "" {
			host = h.HTTPGet.Host
		}
		scheme := "http"
		if h.HTTPGet.Scheme == v1.URISchemeHTTPS {
			scheme = "https"
		}
		tr := &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return nsutil.Dial(ctx, netns, network, addr, timeout)
			},
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // as kubelet's prober
			DisableKeepAlives: true,
		}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+h.HTTPGet.Path, nil)
		if err != nil {
			return err
		}
		for _, hd := range h.HTTPGet.HTTPHeaders {
			req.Header.Add(hd.Name, hd.Value)
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return nil
	case h.TCPSocket != nil:
		port, err := resolvePort(h.TCPSocket.Port, c.spec)
		if err != nil {
			return err
		}
		if h.TCPSocket.Host != "" {
			host = h.TCPSocket.Host
		}
		conn, err := nsutil.Dial(ctx, netns, "tcp", net.JoinHostPort(host, strconv.Itoa(port)), timeout)
		if err != nil {
			return err
		}
		return conn.Close()
	case h.Exec != nil:
		if len(h.Exec.Command) == 0 {
			return fmt.Errorf("exec probe: empty command")
		}
		var out strings.Builder
		if err := w.execIn(ctx, pod, c, h.Exec.Command, nil, &out, &out); err != nil {
			return fmt.Errorf("exec probe: %v: %s", err, strings.TrimSpace(out.String()))
		}
		return nil
	case h.GRPC != nil:
		return fmt.Errorf("gRPC probes are not supported by the testbed kubelet")
	default:
		return fmt.Errorf("probe type not supported by the testbed kubelet (httpGet, tcpSocket and exec are)")
	}
}
