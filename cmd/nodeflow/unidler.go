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
		Flags: append(controllerFlags(":9477", idlingcontroller.DefaultLeaseName),
			&cli.IntFlag{Name: "workers", Value: idlingcontroller.DefaultWorkers, Usage: "Services woken up at once"},
			&cli.DurationFlag{Name: "ready-timeout", Value: idlingcontroller.DefaultReadyTimeout,
				Usage: "how long to wait for a ready endpoint of a woken Service before removing its idling annotations anyway"},
		),
		Action: runUnidler,
	}
}

func runUnidler(c *cli.Context) error {
	if err := noArgs(c, "unidler"); err != nil {
		return err
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
	return runController(c, ctx, "unidler", ns, "", func(ctx context.Context, e leader.Election, run func(context.Context)) error {
		return idlingcontroller.RunLeader(ctx, kc, e, log, run)
	}, ctrl.Run)
}
