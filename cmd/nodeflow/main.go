// Command nodeflow is the per-node OpenFlow controller for Open vSwitch.
//
// Each subcommand lives in its own file of this package and registers itself
// in init() by appending to commands.
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/internal/kubeclient"
)

// version and commit are set at build time with -ldflags "-X
// main.version=... -X main.commit=..." (make build, make image).
var (
	version = "dev"
	commit  = ""
)

// commands holds the subcommands, registered by the files that implement them.
var commands []*cli.Command

// logTimestamp is the logs' time format: RFC 3339 in milliseconds.
const logTimestamp = "2006-01-02T15:04:05.000Z07:00"

func main() {
	// Informers start with a list, not a stream of single events: the
	// agent's start-up waits for them (see kubeclient.ListsFirst).
	kubeclient.ListsFirst()
	app := &cli.App{
		Name:    "nodeflow",
		Usage:   "per-node OpenFlow controller for Open vSwitch",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"NODEFLOW_LOG_LEVEL"}, Usage: "panic, fatal, error, warn, info, debug or trace"},
			&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"NODEFLOW_LOG_FORMAT"}, Usage: "text or json"},
		},
		Before: func(c *cli.Context) error {
			lvl, err := logrus.ParseLevel(c.String("log-level"))
			if err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			logrus.SetLevel(lvl)
			// Milliseconds, as ovs-vswitchd's log has them: an agent's
			// line and a switch's can be put in order.
			switch c.String("log-format") {
			case "json":
				logrus.SetFormatter(&logrus.JSONFormatter{TimestampFormat: logTimestamp})
			case "text":
				logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: logTimestamp})
			default:
				return fmt.Errorf("--log-format: %q is not text or json", c.String("log-format"))
			}
			return nil
		},
		Commands: append([]*cli.Command{{
			Name:  "version",
			Usage: "print the version, the commit it was built from and the Go version",
			Action: func(c *cli.Context) error {
				fmt.Println(versionLine())
				return nil
			},
		}}, commands...),
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "nodeflow:", err)
		os.Exit(1)
	}
}

// versionLine is "nodeflow VERSION (commit C[, modified], GOVERSION)": the
// version and commit stamped by the build, or else the commit Go records
// when it builds from a git checkout.
func versionLine() string {
	rev, modified := commit, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	if modified {
		rev += ", modified"
	}
	return fmt.Sprintf("nodeflow %s (commit %s, %s)", version, rev, runtime.Version())
}
