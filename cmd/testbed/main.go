// Command testbed runs nodeflow's multi-node test cluster on one machine:
// network namespaces on a shared fabric, one Open vSwitch per node, a real
// Kubernetes control plane and a kubelet stand-in per node that attaches pods
// with `nodeflow cni`.
//
//	testbed up [-t FILE] [--nodeflow PATH]   bring a cluster up; returns when it is ready
//	testbed status                           one line per member: name kind netns addresses ovs-rundir
//	testbed exec NAME -- CMD...              run CMD in a node, host or pod (NAMESPACE/POD)
//	testbed kubectl ARGS...                  kubectl with the admin kubeconfig
//	testbed logs NAME                        a node's kubelet and agent logs, or a component's log
//	testbed down                             remove everything
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/testbed"
	"nodeflow/testbed/kubelet"
	"nodeflow/testbed/topology"
	"nodeflow/testbed/workload"
)

func main() {
	app := &cli.App{
		Name:  "testbed",
		Usage: "a containerlab-style multi-node Kubernetes cluster on one machine, for nodeflow",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "the testbed to act on (default: the only one up)"},
			&cli.StringFlag{Name: "state-root", Value: testbed.DefaultStateRoot, Usage: "where testbeds keep their state", EnvVars: []string{"NODEFLOW_TESTBED_ROOT"}},
		},
		Commands: []*cli.Command{
			upCommand(), statusCommand(), execCommand(), kubectlCommand(), logsCommand(), conformanceCommand(), downCommand(),
			runCommand(), serveCommand(), sandboxCommand(), pauseCommand(),
		},
	}
	if err := app.Run(os.Args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "testbed:", err)
		os.Exit(1)
	}
}

// defaultNodeflow finds the nodeflow binary: next to this one, else on PATH.
func defaultNodeflow() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "nodeflow")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("nodeflow"); err == nil {
		return p
	}
	return "nodeflow"
}

func upCommand() *cli.Command {
	return &cli.Command{
		Name:  "up",
		Usage: "bring a testbed up and wait until the cluster is ready",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "topology", Aliases: []string{"t"}, Usage: "topology `FILE` (default: two nodes and an external host)"},
			&cli.StringFlag{Name: "nodeflow", Usage: "the nodeflow `BINARY` (CNI plugin and agent)", Value: defaultNodeflow()},
			&cli.StringFlag{Name: "bin-dir", Usage: "control-plane binaries (default: the `make testbed-deps` cache)", Value: testbed.DefaultBinDir()},
			&cli.BoolFlag{Name: "no-agent", Usage: "do not start `nodeflow agent`"},
			&cli.StringFlag{Name: "agnhost", Usage: "the upstream agnhost `BINARY` that the e2e-test-images agnhost image runs (default: the `make testbed-deps` cache)"},
			&cli.StringFlag{Name: "coredns", Usage: "the CoreDNS `BINARY` of the cluster DNS (default: the `make testbed-deps` cache)"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute},
		},
		Action: func(c *cli.Context) error {
			start := time.Now()
			st, err := testbed.Up(testbed.UpOptions{
				TopologyFile: c.String("topology"),
				StateRoot:    c.String("state-root"),
				BinDir:       c.String("bin-dir"),
				Nodeflow:     c.String("nodeflow"),
				NoAgent:      c.Bool("no-agent"),
				Agnhost:      c.String("agnhost"),
				CoreDNS:      c.String("coredns"),
				Timeout:      c.Duration("timeout"),
			})
			if err != nil {
				return err
			}
			fmt.Printf("testbed %s is up (%s)\n", st.Name, time.Since(start).Round(100*time.Millisecond))
			fmt.Printf("kubeconfig: %s\n", st.Kubeconfig)
			fmt.Printf("state:      %s\n", st.Dir)
			if st.Agent {
				fmt.Println("agent:      nodeflow agent runs on every node")
			} else {
				fmt.Printf("agent:      not started: %s; pods get addresses and OVS ports, but no flows\n", st.AgentReason)
			}
			fmt.Println()
			testbed.WriteStatus(os.Stdout, st)
			return nil
		},
	}
}

// state resolves the testbed the command acts on.
func state(c *cli.Context) (*testbed.State, error) {
	dir, err := testbed.Resolve(c.String("state-root"), c.String("name"))
	if err != nil {
		return nil, err
	}
	return testbed.ReadState(dir)
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "print one line per member: name, kind, netns, addresses, OVS rundir",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "also print the testbed's phase, kubeconfig and processes (to stderr)"}},
		Action: func(c *cli.Context) error {
			st, err := state(c)
			if err != nil {
				return err
			}
			testbed.WriteStatus(os.Stdout, st)
			if c.Bool("verbose") {
				alive := "running"
				if !st.Alive() {
					alive = "NOT running"
				}
				fmt.Fprintf(os.Stderr, "testbed %s: phase %s, supervisor %d %s\nkubeconfig %s\napi server %s\nagent %v %s\n",
					st.Name, st.Phase, st.SupervisorPID, alive, st.Kubeconfig, st.APIServer, st.Agent, st.AgentReason)
				for _, p := range st.Processes {
					fmt.Fprintf(os.Stderr, "process %s %d\n", p.Name, p.PID)
				}
				for k, v := range st.Timings {
					fmt.Fprintf(os.Stderr, "timing %s %s\n", k, v)
				}
			}
			return nil
		},
	}
}

func execCommand() *cli.Command {
	return &cli.Command{
		Name:            "exec",
		Usage:           "run a command in a node, an external host or a pod (NAMESPACE/POD)",
		ArgsUsage:       "NAME -- CMD [ARGS...]",
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) < 2 {
				return fmt.Errorf("usage: testbed exec NAME -- CMD [ARGS...]")
			}
			name, argv := args[0], args[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return fmt.Errorf("usage: testbed exec NAME -- CMD [ARGS...]")
			}
			st, err := state(c)
			if err != nil {
				return err
			}
			t, err := testbed.ResolveTarget(st, name)
			if err != nil {
				return err
			}
			cmd := t.Command(argv...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			return exitStatus(cmd.Run())
		},
	}
}

// exitStatus passes a command's exit code on.
func exitStatus(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return cli.Exit("", ee.ExitCode())
	}
	return err
}

func kubectlCommand() *cli.Command {
	return &cli.Command{
		Name:            "kubectl",
		Usage:           "run kubectl against the testbed's cluster",
		ArgsUsage:       "ARGS...",
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			st, err := state(c)
			if err != nil {
				return err
			}
			cmd := exec.Command(filepath.Join(st.BinDir, "kubectl"), append([]string{"--kubeconfig", st.Kubeconfig}, c.Args().Slice()...)...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			return exitStatus(cmd.Run())
		},
	}
}

func logsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "show a node's kubelet and agent logs, or a component's log (etcd, kube-apiserver, ..., testbed)",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("usage: testbed logs NAME")
			}
			st, err := state(c)
			if err != nil {
				return err
			}
			files, err := testbed.LogFiles(st, c.Args().First())
			if err != nil {
				return err
			}
			for _, f := range files {
				fmt.Printf("==> %s <==\n", f)
				in, err := os.Open(f)
				if err != nil {
					fmt.Printf("(%v)\n", err)
					continue
				}
				_, _ = io.Copy(os.Stdout, in)
				in.Close()
			}
			return nil
		},
	}
}

func downCommand() *cli.Command {
	return &cli.Command{
		Name:  "down",
		Usage: "stop the testbed and remove everything it created",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "keep-state", Usage: "keep the state directory (logs)"}},
		Action: func(c *cli.Context) error {
			dir, err := testbed.Resolve(c.String("state-root"), c.String("name"))
			if err != nil {
				return err
			}
			forced, err := testbed.Down(dir, c.Bool("keep-state"))
			if !forced.Empty() {
				fmt.Fprintf(os.Stderr, "testbed: removed by force: %s\n", forced)
			}
			if err != nil {
				return err
			}
			fmt.Printf("testbed %s is down\n", filepath.Base(dir))
			return nil
		},
	}
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

// runCommand is the supervisor that `up` starts in the background.
func runCommand() *cli.Command {
	return &cli.Command{
		Name:   "run",
		Usage:  "run a testbed in the foreground (what `up` starts in the background)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "topology", Aliases: []string{"t"}},
			&cli.StringFlag{Name: "state-dir", Required: true},
			&cli.StringFlag{Name: "bin-dir", Value: testbed.DefaultBinDir()},
			&cli.StringFlag{Name: "nodeflow", Value: defaultNodeflow()},
			&cli.BoolFlag{Name: "no-agent"},
			&cli.StringFlag{Name: "agnhost"},
			&cli.StringFlag{Name: "coredns"},
		},
		Action: func(c *cli.Context) error {
			logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano})
			top, err := topology.Load(c.String("topology"))
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			return testbed.Run(ctx, testbed.Options{
				Topology: top,
				Dir:      c.String("state-dir"),
				BinDir:   c.String("bin-dir"),
				Nodeflow: c.String("nodeflow"),
				NoAgent:  c.Bool("no-agent"),
				Agnhost:  c.String("agnhost"),
				CoreDNS:  c.String("coredns"),
			})
		},
	}
}

// conformanceCommand runs the upstream e2e tests against a testbed.
func conformanceCommand() *cli.Command {
	var subsets []string
	for k := range testbed.ConformanceSubsets {
		subsets = append(subsets, k)
	}
	sort.Strings(subsets)
	return &cli.Command{
		Name:  "conformance",
		Usage: "run Kubernetes' own e2e tests (the upstream e2e.test) against the testbed and report them",
		Description: "Runs a subset of the upstream tests (" + strings.Join(subsets, ", ") + "), leaving out those the\n" +
			"testbed cannot run (docs/conformance.md), and writes e2e.log, report.json and report.md\n" +
			"to --out. It exits non-zero if a test failed.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "subset", Value: "sig-network", Usage: "the tests: " + strings.Join(subsets, ", ")},
			&cli.StringFlag{Name: "focus", Usage: "a regular expression that selects the tests instead of --subset"},
			&cli.StringFlag{Name: "skip", Usage: "a regular expression of more tests to leave out"},
			&cli.StringFlag{Name: "e2e-test", Usage: "the upstream e2e.test `BINARY` (default: testbed/tools/build.sh e2e.test's)"},
			&cli.IntFlag{Name: "procs", Value: 1, Usage: "run the tests in `N` processes ([Serial] ones alone, at the end), with the ginkgo runner"},
			&cli.StringFlag{Name: "ginkgo", Usage: "the ginkgo runner `BINARY` for --procs (default: testbed/tools/build.sh ginkgo's)"},
			&cli.StringFlag{Name: "out", Value: "_output/conformance", Usage: "the report `DIR`"},
			&cli.DurationFlag{Name: "timeout", Value: 3 * time.Hour},
		},
		Action: func(c *cli.Context) error {
			st, err := state(c)
			if err != nil {
				return err
			}
			focus := c.String("focus")
			if focus == "" {
				if focus = testbed.ConformanceSubsets[c.String("subset")]; focus == "" {
					return fmt.Errorf("no subset %q (there are %s)", c.String("subset"), strings.Join(subsets, ", "))
				}
			}
			bin := c.String("e2e-test")
			if bin == "" {
				if bin = testbed.DefaultE2ETest(); bin == "" {
					return fmt.Errorf("e2e.test is not built: run testbed/tools/build.sh e2e.test")
				}
			}
			out, err := filepath.Abs(c.String("out"))
			if err != nil {
				return err
			}
			ginkgo := c.String("ginkgo")
			if ginkgo == "" {
				ginkgo = testbed.DefaultGinkgo()
			}
			if c.Int("procs") > 1 && ginkgo == "" {
				return fmt.Errorf("--procs needs the ginkgo runner: run testbed/tools/build.sh ginkgo")
			}
			nodes := 0
			for _, m := range st.Members {
				if m.Kind == topology.KindK8sNode {
					nodes++
				}
			}
			res, err := testbed.RunConformance(testbed.ConformanceOptions{
				E2ETest: bin, Ginkgo: ginkgo, Procs: c.Int("procs"), Kubeconfig: st.Kubeconfig, NumNodes: nodes, Focus: focus, Skip: c.String("skip"),
				Versions: testbed.DetectVersions(), OutDir: out, Timeout: c.Duration("timeout"), Log: os.Stdout,
			})
			if err != nil {
				return err
			}
			fmt.Printf("\n%d passed, %d failed, %d skipped in %s; report: %s\n", len(res.Passed), len(res.Failed), len(res.Skipped),
				res.RunTime.Round(time.Second), filepath.Join(out, "report.md"))
			for _, f := range res.Failed {
				fmt.Printf("FAILED: %s\n", f.Name)
			}
			if len(res.Failed) > 0 {
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}

// sandboxCommand is a pod's sandbox process, which the kubelet stand-in
// starts under `unshare --uts --mount` in the pod's network namespace.
func sandboxCommand() *cli.Command {
	return &cli.Command{
		Name:   "sandbox",
		Usage:  "hold a pod's namespaces: set its hostname, build its root, wait",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "hostname"},
			&cli.StringFlag{Name: "root-dir", Usage: "the `DIR` of the pod root's overlay"},
			&cli.StringSliceFlag{Name: "file", Usage: "`TARGET=SOURCE`: SOURCE's content at TARGET in the root"},
			&cli.StringSliceFlag{Name: "dir", Usage: "a `DIR` to make in the root"},
			&cli.StringSliceFlag{Name: "mount", Usage: "`TARGET=SOURCE[:ro]` to bind into the root"},
		},
		Action: func(c *cli.Context) error {
			return kubelet.RunSandbox(kubelet.SandboxSpec{
				Hostname: c.String("hostname"), RootDir: c.String("root-dir"),
				Files: c.StringSlice("file"), Dirs: c.StringSlice("dir"), Mounts: c.StringSlice("mount"),
			}, os.Stdout)
		},
	}
}

// pauseCommand is the pause image's program.
func pauseCommand() *cli.Command {
	return &cli.Command{
		Name:   "pause",
		Usage:  "wait for SIGTERM (the pause image)",
		Hidden: true,
		Action: func(*cli.Context) error {
			kubelet.RunPause()
			return nil
		},
	}
}

// serveCommand is the pod workload the kubelet stand-in runs.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:   "serve",
		Usage:  "run the built-in pod test server",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pod", Required: true},
			&cli.IntSliceFlag{Name: "tcp"},
			&cli.IntSliceFlag{Name: "udp"},
		},
		Action: func(c *cli.Context) error {
			ctx, cancel := signalContext()
			defer cancel()
			return workload.Serve(ctx, workload.Config{Pod: c.String("pod"), TCP: c.IntSlice("tcp"), UDP: c.IntSlice("udp"), Log: os.Stdout})
		},
	}
}
