package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	cniversion "github.com/containernetworking/cni/pkg/version"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/host/cni"
)

func init() {
	// A container runtime executes the plugin named by the configuration's
	// "type" with no arguments: installed (or linked) as CNI_PATH/nodeflow,
	// the binary must then act as `nodeflow cni`.
	if len(os.Args) == 1 && os.Getenv("CNI_COMMAND") != "" {
		os.Args = append(os.Args, "cni")
	}
	commands = append(commands, &cli.Command{
		Name:  "cni",
		Usage: "run as a CNI plugin (spec 1.0/1.1): the runtime sets CNI_COMMAND and friends and writes the network configuration to stdin",
		Description: "A container runtime executes the plugin with CNI_COMMAND (ADD, DEL, CHECK, GC, STATUS or VERSION),\n" +
			"CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS and CNI_PATH set, and the network configuration on\n" +
			"stdin. Install the binary (or a link to it) as nodeflow in the CNI bin directory: run without\n" +
			"arguments and with CNI_COMMAND set, it acts as `nodeflow cni`. The result or error is printed on stdout as JSON; logs go to stderr.",
		Action: func(c *cli.Context) error {
			// stdout carries the CNI result; logs must never go there.
			logrus.SetOutput(os.Stderr)
			p := &cni.Plugin{Log: logrus.WithField("component", "cni")}
			if err := skel.PluginMainFuncsWithError(p.Funcs(), cniversion.All, "nodeflow CNI plugin "+version); err != nil {
				if perr := err.Print(); perr != nil {
					logrus.WithError(perr).Error("write cni error")
				}
				return cli.Exit("", 1)
			}
			return nil
		},
	})
}
