package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/testbed/nsutil"
)

// startProbes starts one readiness prober per container that has a probe.
// Containers without one are ready as soon as they run.
func (w *podWorker) startProbes(ctx context.Context, pod *v1.Pod) {
	pctx, cancel := context.WithCancel(ctx)
	w.probeCancel = cancel
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe == nil {
			continue
		}
		go w.probeLoop(pctx, pod, c, w.netns, append([]string(nil), w.podIPs...))
	}
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

func (w *podWorker) probeLoop(ctx context.Context, pod *v1.Pod, c v1.Container, netns string, podIPs []string) {
	p := c.ReadinessProbe
	period := time.Duration(orDefault(p.PeriodSeconds, 10)) * time.Second
	timeout := time.Duration(orDefault(p.TimeoutSeconds, 1)) * time.Second
	successThreshold := int(orDefault(p.SuccessThreshold, 1))
	failureThreshold := int(orDefault(p.FailureThreshold, 3))
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	ready, successes, failures := false, 0, 0
	for {
		err := probe(ctx, p.ProbeHandler, c, netns, podIPs, timeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
		}
		changed := false
		switch {
		case !ready && successes >= successThreshold:
			ready, changed = true, true
		case ready && failures >= failureThreshold:
			ready, changed = false, true
		}
		if changed {
			w.mu.Lock()
			w.ready[c.Name] = ready
			w.mu.Unlock()
			if ready {
				w.log.WithField("container", c.Name).Info("readiness probe succeeded")
			} else {
				w.log.WithField("container", c.Name).WithError(err).Info("readiness probe failed")
				w.k.recorder.Eventf(pod, v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %v", err)
			}
			w.poke()
		}
		select {
		case <-ctx.Done():
			return
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

// probe runs one probe inside the pod's network namespace.
func probe(ctx context.Context, h v1.ProbeHandler, c v1.Container, netns string, podIPs []string, timeout time.Duration) error {
	host := ""
	if len(podIPs) > 0 {
		host = podIPs[0]
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case h.HTTPGet != nil:
		port, err := resolvePort(h.HTTPGet.Port, c)
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
		port, err := resolvePort(h.TCPSocket.Port, c)
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
		// The test server has no filesystem of its own: the command runs on
		// the node, in the pod's network namespace.
		argv := append([]string{"netns", "exec", netns}, h.Exec.Command...)
		if out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput(); err != nil {
			return fmt.Errorf("exec probe: %v: %s", err, out)
		}
		return nil
	default:
		return fmt.Errorf("probe type not supported by the testbed kubelet (httpGet, tcpSocket and exec are)")
	}
}
