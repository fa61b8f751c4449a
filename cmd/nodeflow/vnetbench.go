package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/internal/vnetbench"
	"nodeflow/model/vnet"
)

func init() {
	commands = append(commands, vnetBenchCommand())
}

// vnetBenchCommand is `nodeflow vnet-bench`: the virtual networks'
// throughput driver.
func vnetBenchCommand() *cli.Command {
	return &cli.Command{
		Name:  "vnet-bench",
		Usage: "create N NetworkAttachments over the nodes and VNIs and report how fast they are assigned and made",
		Description: "Creates a namespace with one Subnet per VNI and N attachments spread round robin over the nodes and VNIs,\n" +
			"then reports the attachments per second, the time from each create to its address (the IPAM controller)\n" +
			"and to its interface on its node (the connection agent), p50 and p99, and the API server's requests per\n" +
			"attachment (from its apiserver_request_total). Needs the IPAM controller running, and the right to create\n" +
			"namespaces and, with --fake-nodes, Nodes, and to read the API server's /metrics.",
		Flags: append([]cli.Flag{
			kubeconfigFlag(),
			&cli.IntFlag{Name: "attachments", Aliases: []string{"n"}, Value: 1000, Usage: "how many attachments"},
			&cli.IntFlag{Name: "vnis", Value: 100, Usage: "how many virtual networks they are spread over"},
			&cli.UintFlag{Name: "first-vni", Value: uint(vnet.MinVNI + 0x1000), Usage: "the first VNI"},
			&cli.StringFlag{Name: "subnet", Value: "10.240.0.0/16", Usage: "the `CIDR` of every VNI's Subnet"},
			&cli.StringSliceFlag{Name: "node", Usage: "a node to put attachments on (repeat; default: every Node)"},
			&cli.IntFlag{Name: "fake-nodes", Usage: "add this many Node objects with no kubelet or agent, whose attachments are only assigned"},
			&cli.BoolFlag{Name: "no-agents", Usage: "do not wait for the connection agents to make the interfaces"},
			&cli.IntFlag{Name: "concurrency", Value: 16, Usage: "concurrent writers"},
			&cli.StringFlag{Name: "namespace", Value: "vnet-bench", Usage: "the `NAMESPACE` created for the run"},
			&cli.DurationFlag{Name: "timeout", Value: 0, Usage: "how long to wait for every attachment (default 30m)"},
			&cli.BoolFlag{Name: "keep", Usage: "leave the namespace and fake Nodes in place"},
		}, kubeAPIFlags(500, 1000)...),
		Action: runVNetBench,
	}
}

func runVNetBench(c *cli.Context) error {
	if err := noArgs(c, "vnet-bench"); err != nil {
		return err
	}
	api, err := clients(c, "nodeflow-vnet-bench")
	if err != nil {
		return fmt.Errorf("vnet-bench: %w", err)
	}
	kc, dyn := api.kube, api.dyn
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := vnetbench.Run(ctx, vnetbench.Options{
		Dynamic: dyn, Kube: kc, Namespace: c.String("namespace"),
		Attachments: c.Int("attachments"), VNIs: c.Int("vnis"), FirstVNI: uint32(c.Uint("first-vni")), SubnetCIDR: c.String("subnet"),
		Nodes: c.StringSlice("node"), FakeNodes: c.Int("fake-nodes"), NoAgents: c.Bool("no-agents"), Concurrency: c.Int("concurrency"),
		Timeout: c.Duration("timeout"), Keep: c.Bool("keep"), Log: logrus.StandardLogger(),
	})
	if err != nil {
		return err
	}
	res.Print(c.App.Writer)
	return nil
}
