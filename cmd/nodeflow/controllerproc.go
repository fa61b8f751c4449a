package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/cluster/leader"
	"nodeflow/internal/kubeclient"
	"nodeflow/lib/memlimit"
)

// The plumbing the cluster controllers (`nodeflow unidler`, `nodeflow
// ipam`) share: a registry with the Go and process collectors served on
// --metrics-addr with /healthz, and a run under leader election.

// controllerProcess is what a cluster controller's command sets up before
// its controller: its log, the Go memory limit from its container's, a
// context ended by SIGINT or SIGTERM, and its metrics registry, served on
// --metrics-addr.
type controllerProcess struct {
	ctx  context.Context
	log  *logrus.Entry
	reg  *prometheus.Registry
	stop func()
}

// startController sets up the process of the controller component; call
// stop when the controller returns.
func startController(c *cli.Context, component string) (*controllerProcess, error) {
	log := logrus.WithField("component", component)
	if n, what := memlimit.Apply(); n > 0 {
		log.WithField("bytes", n).Info(what)
	}
	ctx, stopSignals := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	reg, stopMetrics, err := serveMetrics(c.String("metrics-addr"), log)
	if err != nil {
		stopSignals()
		return nil, err
	}
	return &controllerProcess{ctx: ctx, log: log, reg: reg, stop: func() { stopMetrics(); stopSignals() }}, nil
}

// serveMetrics makes the controller's registry and, when addr is set,
// serves /metrics and /healthz on it until the returned stop is called.
func serveMetrics(addr string, log logrus.FieldLogger) (*prometheus.Registry, func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if addr == "" {
		return reg, func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("metrics server")
		}
	}()
	log.WithField("addr", l.Addr().String()).Info("serving /metrics and /healthz")
	return reg, func() { srv.Close() }, nil
}

// election is the Lease a controller replica runs under, from its flags
// (--lease-namespace, --lease-name, --identity): the namespace defaults
// to the pod's, then to the kubeconfig context's (kubeNS); the identity
// to the hostname and a random suffix.
func election(c *cli.Context, kubeNS, work string) (leader.Election, error) {
	e := leader.Election{Namespace: c.String("lease-namespace"), Name: c.String("lease-name"), Identity: c.String("identity"), Work: work}
	if e.Namespace == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			e.Namespace = strings.TrimSpace(string(b))
		} else {
			e.Namespace = kubeNS
		}
	}
	if e.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return e, fmt.Errorf("--identity: %w", err)
		}
		e.Identity = host + "_" + string(uuid.NewUUID())
	}
	return e, nil
}

// runElected runs run while elected under e, and returns both the
// election's error and run's.
func runElected(ctx context.Context, elect func(ctx context.Context, e leader.Election, run func(context.Context)) error, e leader.Election, run func(ctx context.Context) error) error {
	var runErr error
	err := elect(ctx, e, func(ctx context.Context) { runErr = run(ctx) })
	return errors.Join(err, runErr)
}

// apiClients are a command's clients of the API server.
type apiClients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	// namespace is the kubeconfig context's.
	namespace string
}

// clients makes the typed and dynamic clients from the kubeconfig at
// --kubeconfig (the default loading rules when empty) with the command's
// --kube-api-qps and --kube-api-burst, as agent in the user agent.
func clients(c *cli.Context, agent string) (apiClients, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.String("kubeconfig")
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		return apiClients{}, fmt.Errorf("kubeconfig: %w", err)
	}
	rc.UserAgent = rest.DefaultKubernetesUserAgent() + " " + agent
	rc.QPS, rc.Burst = float32(c.Float64("kube-api-qps")), c.Int("kube-api-burst")
	var out apiClients
	if out.namespace, _, err = cc.Namespace(); err != nil {
		return out, fmt.Errorf("kubeconfig: namespace: %w", err)
	}
	if out.kube, err = kubeclient.NewTyped(rc); err != nil {
		return out, fmt.Errorf("kubernetes client: %w", err)
	}
	if out.dyn, err = kubeclient.NewDynamic(rc); err != nil {
		return out, fmt.Errorf("dynamic client: %w", err)
	}
	return out, nil
}
