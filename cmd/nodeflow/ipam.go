package main

import (
	"context"
	"fmt"
	"slices"

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
		Flags: slices.Concat(controllerFlags(":9478", vnetipam.DefaultLeaseName), []cli.Flag{
			&cli.IntFlag{Name: "workers", Value: vnetipam.DefaultWorkers, Usage: "attachments and Subnets synced at once"},
			&cli.DurationFlag{Name: "resync", Value: vnetipam.DefaultResync, Usage: "how often every attachment is checked again from the caches"},
		}, kubeAPIFlags(200, 400)),
		Action: runIPAM,
	}
}

func runIPAM(c *cli.Context) error {
	if err := noArgs(c, "ipam"); err != nil {
		return err
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
	return runController(c, ctx, "ipam", ns, "assigning addresses", func(ctx context.Context, e leader.Election, run func(context.Context)) error {
		return vnetipam.RunLeader(ctx, kc, e, log, run)
	}, ctrl.Run)
}
