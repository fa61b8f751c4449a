package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/agent"
	"nodeflow/agent/cleanup"
	"nodeflow/agent/features"
)

func init() {
	commands = append(commands, cleanupCommand())
}

// cleanupFlags are the agent's flags that say where the agent kept what it
// put on the node; cleanup takes the agent's other flags too, hidden, so
// that it reads the same --config file.
var cleanupFlags = map[string]bool{
	"config": true, "ovs-rundir": true, "pod-bridge": true, "gateway-bridge": true, "uplink": true,
	"masquerade-subnet-v4": true, "masquerade-subnet-v6": true, "health-addr": true, "socket": true,
	"cni-conf-dir": true, "cni-data-dir": true, "proc-sys-net": true,
}

// cleanupCommand is `nodeflow cleanup`: take off the node everything the
// agent put there.
func cleanupCommand() *cli.Command {
	var flags []cli.Flag
	for _, f := range agentCommand().Flags {
		if !cleanupFlags[f.Names()[0]] {
			hideFlag(f)
		}
		flags = append(flags, f)
	}
	flags = append(flags,
		&cli.StringFlag{Name: "cni-bin", Value: "/opt/cni/bin/nodeflow", Usage: "the installed CNI plugin's `PATH` (as nodeflow install-cni --to put it); empty leaves it"},
		&cli.BoolFlag{Name: "purge", Usage: "remove the IPAM store and the CNI plugin even while pods on this node hold addresses from it"},
		&cli.BoolFlag{Name: "force", Usage: "run even while an agent answers on this node or holds its Open vSwitch"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print what would be done, and do nothing"},
		&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "give up after this long"},
	)
	return &cli.Command{
		Name:  "cleanup",
		Usage: "remove everything the node agent put on this node (after the agent is stopped for good)",
		Description: "Puts the node back as it was before nodeflow: gives the uplink its addresses, routes and sysctls\n" +
			"back from the gateway bridge, deletes the bridges nodeflow created, its nftables tables, its CNI\n" +
			"configuration, introspection socket and IPAM store. Give it the agent's settings (the same flags,\n" +
			"or --config). It refuses while an agent answers on the node, unless --force. Running it again\n" +
			"finds nothing to do. See docs/install.md, Removal.",
		Flags:  flags,
		Action: runCleanup,
	}
}

// hideFlag hides one of the agent's flags from cleanup's help.
func hideFlag(f cli.Flag) {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Hidden = true
	case *cli.StringSliceFlag:
		f.Hidden = true
	case *cli.IntFlag:
		f.Hidden = true
	case *cli.BoolFlag:
		f.Hidden = true
	case *cli.DurationFlag:
		f.Hidden = true
	case *cli.Float64Flag:
		f.Hidden = true
	}
}

func runCleanup(c *cli.Context) error {
	if err := agentPrologue(c, "cleanup"); err != nil {
		return err
	}
	socket, dataDir := agentPaths(c.String("ovs-rundir"), c.String("socket"), c.String("cni-conf-dir"), c.String("cni-data-dir"))
	o := cleanup.Options{
		OVSRundir: c.String("ovs-rundir"), PodBridge: c.String("pod-bridge"), GatewayBridge: c.String("gateway-bridge"),
		Uplink: c.String("uplink"), CNIConfDir: c.String("cni-conf-dir"), CNIDataDir: dataDir, CNIBin: c.String("cni-bin"),
		Socket: socket, HealthAddr: c.String("health-addr"), AgentLock: agent.AgentLock,
		NFTables: features.NFTables(), VNet: features.Links(),
		Purge: c.Bool("purge"), Force: c.Bool("force"), DryRun: c.Bool("dry-run"),
	}
	for _, flag := range []string{"masquerade-subnet-v4", "masquerade-subnet-v6"} {
		if s := c.String(flag); s != "" {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return fmt.Errorf("cleanup: --%s: %w", flag, err)
			}
			o.Masquerade = append(o.Masquerade, p.Masked())
		}
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
	defer cancel()
	p, err := cleanup.Run(ctx, o, logrus.StandardLogger())
	if o.DryRun {
		for _, s := range p.Steps {
			fmt.Fprintln(c.App.Writer, s)
		}
	}
	return err
}
