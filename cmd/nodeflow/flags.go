package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"nodeflow/cluster/leader"
)

// The flags and prologues several commands share. Each call returns new
// flags: urfave/cli records on a flag whether it was set.

// kubeconfigFlag is --kubeconfig of the commands that also read
// ~/.kube/config.
func kubeconfigFlag() cli.Flag {
	return &cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "kubeconfig `PATH` (default: ~/.kube/config, or in-cluster)"}
}

// kubeAPIFlags are --kube-api-qps and --kube-api-burst with these defaults.
func kubeAPIFlags(qps float64, burst int) []cli.Flag {
	return []cli.Flag{
		&cli.Float64Flag{Name: "kube-api-qps", Value: qps, Usage: "client-side rate limit of API requests per second"},
		&cli.IntFlag{Name: "kube-api-burst", Value: burst, Usage: "client-side burst of API requests"},
	}
}

// controllerFlags are the flags every cluster controller starts with:
// --kubeconfig, --metrics-addr (default metricsAddr) and the leader
// election's, the Lease named leaseName by default.
func controllerFlags(metricsAddr, leaseName string) []cli.Flag {
	return []cli.Flag{
		kubeconfigFlag(),
		&cli.StringFlag{Name: "metrics-addr", Value: metricsAddr, EnvVars: []string{"NODEFLOW_METRICS_ADDR"}, Usage: "`ADDR` of /metrics and /healthz (empty disables)"},
		&cli.BoolFlag{Name: "leader-elect", Value: true, EnvVars: []string{"NODEFLOW_LEADER_ELECT"}, Usage: "work only while holding the leader Lease, so that several replicas can run"},
		&cli.StringFlag{Name: "lease-namespace", EnvVars: []string{"NODEFLOW_LEASE_NAMESPACE", "POD_NAMESPACE"},
			Usage: "`NAMESPACE` of the leader Lease (default: the pod's, or the kubeconfig context's)"},
		&cli.StringFlag{Name: "lease-name", Value: leaseName, Usage: "`NAME` of the leader Lease"},
		&cli.StringFlag{Name: "identity", EnvVars: []string{"NODEFLOW_IDENTITY", "POD_NAME"}, Usage: "this replica's `ID` in the Lease (default: hostname_random)"},
	}
}

// noArgs refuses the positional arguments of a command that takes none.
func noArgs(c *cli.Context, command string) error {
	if c.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", command, c.Args().First())
	}
	return nil
}

// runController runs a cluster controller's run until ctx ends: under the
// leader Lease (elect, with election's flags; kubeNS and work as election
// takes them) unless --leader-elect is false.
func runController(c *cli.Context, ctx context.Context, command, kubeNS, work string,
	elect func(ctx context.Context, e leader.Election, run func(context.Context)) error, run func(ctx context.Context) error) error {
	if !c.Bool("leader-elect") {
		return run(ctx)
	}
	e, err := election(c, kubeNS, work)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	return runElected(ctx, elect, e, run)
}
