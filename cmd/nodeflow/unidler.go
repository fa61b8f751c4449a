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

	"nodeflow/memlimit"
	"nodeflow/unidler"
)

func init() {
	commands = append(commands, unidlerCommand())
}

// serviceAccountNamespace holds the pod's namespace in a cluster.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// unidlerCommand is `nodeflow unidler`: the cluster controller that wakes
// idled Services up.
func unidlerCommand() *cli.Command {
	return &cli.Command{
		Name:  "unidler",
		Usage: "wake idled Services up on NeedPods events: scale their unidle targets back up (openshift-controller-manager's unidling controller)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "kubeconfig `PATH` (default: ~/.kube/config, or in-cluster)"},
			&cli.StringFlag{Name: "metrics-addr", Value: ":9477", EnvVars: []string{"NODEFLOW_METRICS_ADDR"}, Usage: "`ADDR` of /metrics and /healthz (empty disables)"},
			&cli.BoolFlag{Name: "leader-elect", Value: true, EnvVars: []string{"NODEFLOW_LEADER_ELECT"}, Usage: "work only while holding the leader Lease, so that several replicas can run"},
			&cli.StringFlag{Name: "lease-namespace", EnvVars: []string{"NODEFLOW_LEASE_NAMESPACE", "POD_NAMESPACE"},
				Usage: "`NAMESPACE` of the leader Lease (default: the pod's, or the kubeconfig context's)"},
			&cli.StringFlag{Name: "lease-name", Value: unidler.DefaultLeaseName, Usage: "`NAME` of the leader Lease"},
			&cli.StringFlag{Name: "identity", EnvVars: []string{"NODEFLOW_IDENTITY", "POD_NAME"}, Usage: "this replica's `ID` in the Lease (default: hostname_random)"},
			&cli.IntFlag{Name: "workers", Value: unidler.DefaultWorkers, Usage: "Services woken up at once"},
			&cli.DurationFlag{Name: "ready-timeout", Value: unidler.DefaultReadyTimeout,
				Usage: "how long to wait for a ready endpoint of a woken Service before removing its idling annotations anyway"},
		},
		Action: runUnidler,
	}
}

func runUnidler(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unidler: unexpected argument %q", c.Args().First())
	}
	kc, discovered, ns, err := kubeClient(c.String("kubeconfig"), "", "nodeflow-unidler")
	if err != nil {
		return fmt.Errorf("unidler: %w", err)
	}
	log := logrus.WithField("component", "unidler")
	if n, what := memlimit.Apply(); n > 0 {
		log.WithField("bytes", n).Info(what)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if addr := c.String("metrics-addr"); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("unidler: --metrics-addr: %w", err)
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
		defer srv.Close()
		log.WithField("addr", l.Addr().String()).Info("serving /metrics and /healthz")
	}

	ctrl := unidler.New(unidler.Options{Client: kc, Discovered: discovered, Registerer: reg, Log: logrus.StandardLogger(),
		Workers: c.Int("workers"), ReadyTimeout: c.Duration("ready-timeout")})
	if !c.Bool("leader-elect") {
		return ctrl.Run(ctx)
	}
	leaseNS := c.String("lease-namespace")
	if leaseNS == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			leaseNS = strings.TrimSpace(string(b))
		} else {
			leaseNS = ns
		}
	}
	id := c.String("identity")
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("unidler: --identity: %w", err)
		}
		id = host + "_" + string(uuid.NewUUID())
	}
	var runErr error
	err = unidler.RunLeader(ctx, kc, unidler.Election{Namespace: leaseNS, Name: c.String("lease-name"), Identity: id}, log,
		func(ctx context.Context) { runErr = ctrl.Run(ctx) })
	return errors.Join(err, runErr)
}
