package main

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/cluster/idlingcontroller"
	"nodeflow/cluster/leader"
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
			&cli.StringFlag{Name: "lease-name", Value: idlingcontroller.DefaultLeaseName, Usage: "`NAME` of the leader Lease"},
			&cli.StringFlag{Name: "identity", EnvVars: []string{"NODEFLOW_IDENTITY", "POD_NAME"}, Usage: "this replica's `ID` in the Lease (default: hostname_random)"},
			&cli.IntFlag{Name: "workers", Value: idlingcontroller.DefaultWorkers, Usage: "Services woken up at once"},
			&cli.DurationFlag{Name: "ready-timeout", Value: idlingcontroller.DefaultReadyTimeout,
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
	proc, err := startController(c, "unidler")
	if err != nil {
		return fmt.Errorf("unidler: %w", err)
	}
	defer proc.stop()
	ctx, log, reg := proc.ctx, proc.log, proc.reg

	ctrl := idlingcontroller.New(idlingcontroller.Options{Client: kc, Discovered: discovered, Registerer: reg, Log: logrus.StandardLogger(),
		Workers: c.Int("workers"), ReadyTimeout: c.Duration("ready-timeout")})
	if !c.Bool("leader-elect") {
		return ctrl.Run(ctx)
	}
	e, err := election(c, ns, "")
	if err != nil {
		return fmt.Errorf("unidler: %w", err)
	}
	return runElected(ctx, func(ctx context.Context, e leader.Election, run func(context.Context)) error {
		return idlingcontroller.RunLeader(ctx, kc, e, log, run)
	}, e, ctrl.Run)
}
