package main

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/cluster/leader"
	"nodeflow/cluster/vnetipam"
)

func init() {
	commands = append(commands, ipamCommand())
}

// ipamCommand is `nodeflow ipam`: the cluster controller that assigns
// addresses to virtual networks' NetworkAttachments.
func ipamCommand() *cli.Command {
	return &cli.Command{
		Name:  "ipam",
		Usage: "assign addresses to NetworkAttachments (vnet.nodeflow.io): lock each address with an IPLock, then write it into the status",
		Description: "One replica works at a time (leader election on a Lease); two at once are safe, since an address is\n" +
			"taken only by creating its IPLock. docs/virtual-networks.md describes the API and the design.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "kubeconfig `PATH` (default: ~/.kube/config, or in-cluster)"},
			&cli.StringFlag{Name: "metrics-addr", Value: ":9478", EnvVars: []string{"NODEFLOW_METRICS_ADDR"}, Usage: "`ADDR` of /metrics and /healthz (empty disables)"},
			&cli.BoolFlag{Name: "leader-elect", Value: true, EnvVars: []string{"NODEFLOW_LEADER_ELECT"}, Usage: "work only while holding the leader Lease, so that several replicas can run"},
			&cli.StringFlag{Name: "lease-namespace", EnvVars: []string{"NODEFLOW_LEASE_NAMESPACE", "POD_NAMESPACE"},
				Usage: "`NAMESPACE` of the leader Lease (default: the pod's, or the kubeconfig context's)"},
			&cli.StringFlag{Name: "lease-name", Value: vnetipam.DefaultLeaseName, Usage: "`NAME` of the leader Lease"},
			&cli.StringFlag{Name: "identity", EnvVars: []string{"NODEFLOW_IDENTITY", "POD_NAME"}, Usage: "this replica's `ID` in the Lease (default: hostname_random)"},
			&cli.IntFlag{Name: "workers", Value: vnetipam.DefaultWorkers, Usage: "attachments and Subnets synced at once"},
			&cli.DurationFlag{Name: "resync", Value: vnetipam.DefaultResync, Usage: "how often every attachment is checked again from the caches"},
			&cli.Float64Flag{Name: "kube-api-qps", Value: 200, Usage: "client-side rate limit of API requests per second"},
			&cli.IntFlag{Name: "kube-api-burst", Value: 400, Usage: "client-side burst of API requests"},
		},
		Action: runIPAM,
	}
}

func runIPAM(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("ipam: unexpected argument %q", c.Args().First())
	}
	api, err := clients(c, "nodeflow-ipam")
	if err != nil {
		return fmt.Errorf("ipam: %w", err)
	}
	kc, dyn, ns := api.kube, api.dyn, api.namespace
	proc, err := startController(c, "ipam")
	if err != nil {
		return fmt.Errorf("ipam: %w", err)
	}
	defer proc.stop()
	ctx, log, reg := proc.ctx, proc.log, proc.reg

	ctrl, err := vnetipam.New(vnetipam.Options{Dynamic: dyn, Kube: kc, Registerer: reg, Log: logrus.StandardLogger(),
		Workers: c.Int("workers"), Resync: c.Duration("resync")})
	if err != nil {
		return err
	}
	if !c.Bool("leader-elect") {
		return ctrl.Run(ctx)
	}
	e, err := election(c, ns, "assigning addresses")
	if err != nil {
		return fmt.Errorf("ipam: %w", err)
	}
	return runElected(ctx, func(ctx context.Context, e leader.Election, run func(context.Context)) error {
		return vnetipam.RunLeader(ctx, kc, e, log, run)
	}, e, ctrl.Run)
}
