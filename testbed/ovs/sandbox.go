// Package ovs runs private Open vSwitch instances for tests and for the testbed.
//
// A Sandbox is one ovsdb-server and one ovs-vswitchd started in a fresh
// temporary directory that serves as their rundir, dbdir and logdir. By default
// the daemons run inside a network namespace that the sandbox creates for
// itself, so that several sandboxes, each with its own br0 and its own
// userspace-datapath tap devices, can run on one machine at once. The sandbox
// never touches the system OVS.
//
// The package execs the OVS command-line tools: it is test infrastructure, and
// the tools are the independent oracles that tests compare nodeflow against.
package ovs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Binaries the sandbox needs, all from the openvswitch-switch and
// openvswitch-common Debian packages.
var requiredBinaries = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"}

// SchemaPath is where Debian's openvswitch-common installs the Open_vSwitch schema.
const SchemaPath = "/usr/share/openvswitch/vswitch.ovsschema"

// ErrMissing is returned (wrapped) when the OVS binaries or the schema are not installed.
var ErrMissing = errors.New("open vswitch is not installed (run `make deps`)")

// Options configure a Sandbox.
type Options struct {
	// Netns is an existing network namespace (a name under /var/run/netns) to
	// run the daemons in. When empty the sandbox creates a private namespace
	// and deletes it on Stop.
	Netns string
	// Dummy starts ovs-vswitchd with --enable-dummy, which adds the "dummy"
	// datapath and interface types (packets injected with netdev-dummy/receive).
	Dummy bool
	// BaseDir is the directory in which the sandbox directory is created.
	// Unix socket paths must stay short, so the default is /tmp.
	BaseDir string
	// StartTimeout bounds how long Start waits for each daemon to answer.
	// Zero means 20 seconds.
	StartTimeout time.Duration
}

// Sandbox is a running private OVS.
type Sandbox struct {
	// Dir is the rundir, dbdir and logdir of both daemons.
	Dir string
	// Netns is the network namespace the daemons run in.
	Netns string

	opts       Options
	ownsNetns  bool
	mu         sync.Mutex
	dbProc     *exec.Cmd
	vsProc     *exec.Cmd
	stopped    bool
	vsRestarts atomic.Int32
}

// Check reports whether the OVS binaries and the schema are installed, with an
// error naming what is missing and `make deps`.
func Check() error {
	var missing []string
	for _, b := range requiredBinaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if _, err := os.Stat(SchemaPath); err != nil {
		missing = append(missing, SchemaPath)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrMissing, strings.Join(missing, ", "))
	}
	return nil
}

var sandboxSeq atomic.Int32

// Start creates the sandbox directory (and namespace), then starts
// ovsdb-server and ovs-vswitchd and waits until both answer.
func Start(ctx context.Context, opts Options) (*Sandbox, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if opts.BaseDir == "" {
		opts.BaseDir = "/tmp"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 20 * time.Second
	}
	reapStale(ctx, opts.BaseDir)
	dir, err := os.MkdirTemp(opts.BaseDir, fmt.Sprintf("nfovs-%d-", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("ovs sandbox: create directory: %w", err)
	}
	s := &Sandbox{Dir: dir, Netns: opts.Netns, opts: opts}
	if s.Netns == "" {
		s.Netns = fmt.Sprintf("nfovs-%d-%d", os.Getpid(), sandboxSeq.Add(1))
		if out, err := exec.CommandContext(ctx, "ip", "netns", "add", s.Netns).CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("ovs sandbox: create netns %s: %v: %s", s.Netns, err, bytes.TrimSpace(out))
		}
		s.ownsNetns = true
		// The loopback device is down in a new namespace.
		_ = exec.CommandContext(ctx, "ip", "netns", "exec", s.Netns, "ip", "link", "set", "lo", "up").Run()
	}
	if err := s.start(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Sandbox) start(ctx context.Context) error {
	db := filepath.Join(s.Dir, "conf.db")
	if out, err := exec.CommandContext(ctx, "ovsdb-tool", "create", db, SchemaPath).CombinedOutput(); err != nil {
		return fmt.Errorf("ovs sandbox: ovsdb-tool create: %v: %s", err, bytes.TrimSpace(out))
	}
	s.dbProc = s.command("ovsdb-server", db,
		"--remote=punix:"+s.DBSock(),
		"--unixctl="+filepath.Join(s.Dir, "ovsdb-server.ctl"),
		"--log-file="+filepath.Join(s.Dir, "ovsdb-server.log"),
		"--no-chdir")
	if err := s.dbProc.Start(); err != nil {
		return fmt.Errorf("ovs sandbox: start ovsdb-server: %w", err)
	}
	if err := waitSocket(ctx, s.DBSock(), s.opts.StartTimeout); err != nil {
		return fmt.Errorf("ovs sandbox: ovsdb-server did not answer (log %s): %w", filepath.Join(s.Dir, "ovsdb-server.log"), err)
	}
	if _, err := s.Vsctl("--no-wait", "init"); err != nil {
		return fmt.Errorf("ovs sandbox: initialise database: %w", err)
	}
	return s.StartVswitchd(ctx)
}

// reapStale deletes the namespaces and directories of sandboxes whose test
// process died without stopping them (a killed `go test`). Both names carry
// the pid that created them; the daemons inside died with it (Pdeathsig).
func reapStale(ctx context.Context, baseDir string) {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
			if ownerDead(name) {
				_ = exec.CommandContext(ctx, "ip", "netns", "delete", name).Run()
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(baseDir, "nfovs-*"))
	for _, d := range dirs {
		if ownerDead(filepath.Base(d)) {
			_ = os.RemoveAll(d)
		}
	}
}

// ownerDead reports whether name is "nfovs-<pid>-<suffix>" for a pid, other
// than ours, that no longer runs.
func ownerDead(name string) bool {
	rest, ok := strings.CutPrefix(name, "nfovs-")
	if !ok {
		return false
	}
	pidText, _, ok := strings.Cut(rest, "-")
	if !ok {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	err = syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// command builds a daemon command that runs in the sandbox namespace with the
// sandbox directories in its environment.
func (s *Sandbox) command(name string, args ...string) *exec.Cmd {
	argv := append([]string{"netns", "exec", s.Netns, name}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Env = append(os.Environ(), s.Env()...)
	cmd.Dir = s.Dir
	// Own process group, so that a test's Ctrl-C does not race our Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Env returns the environment variables that point OVS tools at this sandbox.
func (s *Sandbox) Env() []string {
	return []string{
		"OVS_RUNDIR=" + s.Dir,
		"OVS_DBDIR=" + s.Dir,
		"OVS_LOGDIR=" + s.Dir,
		"OVS_SYSCONFDIR=" + s.Dir,
	}
}

// DBSock is the path of ovsdb-server's unix socket.
func (s *Sandbox) DBSock() string { return filepath.Join(s.Dir, "db.sock") }

// MgmtSock is the path of ovs-vswitchd's OpenFlow management socket for bridge.
func (s *Sandbox) MgmtSock(bridge string) string { return filepath.Join(s.Dir, bridge+".mgmt") }

// VswitchdCtl is the path of ovs-vswitchd's unixctl socket.
func (s *Sandbox) VswitchdCtl() string { return filepath.Join(s.Dir, "ovs-vswitchd.ctl") }

// VswitchdPid returns the pid of the running ovs-vswitchd, or 0.
func (s *Sandbox) VswitchdPid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vsProc == nil || s.vsProc.Process == nil {
		return 0
	}
	return s.vsProc.Process.Pid
}

// StartVswitchd starts ovs-vswitchd if it is not running and waits until it answers.
func (s *Sandbox) StartVswitchd(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vsProc != nil {
		return nil
	}
	args := []string{"unix:" + s.DBSock(),
		"--unixctl=" + s.VswitchdCtl(),
		"--log-file=" + filepath.Join(s.Dir, "ovs-vswitchd.log"),
		"--no-chdir", "--disable-system"}
	if s.opts.Dummy {
		args = append(args, "--enable-dummy")
	}
	_ = os.Remove(s.VswitchdCtl())
	cmd := s.command("ovs-vswitchd", args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ovs sandbox: start ovs-vswitchd: %w", err)
	}
	s.vsProc = cmd
	if err := waitSocket(ctx, s.VswitchdCtl(), s.opts.StartTimeout); err != nil {
		return fmt.Errorf("ovs sandbox: ovs-vswitchd did not answer (log %s): %w", filepath.Join(s.Dir, "ovs-vswitchd.log"), err)
	}
	return nil
}

// KillVswitchd kills ovs-vswitchd with SIGKILL, as a crash would, and waits for it to exit.
func (s *Sandbox) KillVswitchd() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vsProc == nil {
		return nil
	}
	err := stopProcess(s.vsProc, syscall.SIGKILL, 5*time.Second)
	s.vsProc = nil
	return err
}

// RestartVswitchd kills ovs-vswitchd and starts it again. Bridges and ports
// come back from the database; flows and groups do not.
func (s *Sandbox) RestartVswitchd(ctx context.Context) error {
	if err := s.KillVswitchd(); err != nil {
		return err
	}
	s.vsRestarts.Add(1)
	return s.StartVswitchd(ctx)
}

// Stop stops both daemons by pid, deletes the namespace if the sandbox created
// it, and removes the directory. It is safe to call more than once.
func (s *Sandbox) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	var errs []error
	if s.vsProc != nil {
		errs = append(errs, stopProcess(s.vsProc, syscall.SIGTERM, 5*time.Second))
		s.vsProc = nil
	}
	if s.dbProc != nil && s.dbProc.Process != nil {
		errs = append(errs, stopProcess(s.dbProc, syscall.SIGTERM, 5*time.Second))
		s.dbProc = nil
	}
	s.mu.Unlock()
	if s.ownsNetns {
		if out, err := exec.Command("ip", "netns", "delete", s.Netns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete netns %s: %v: %s", s.Netns, err, bytes.TrimSpace(out)))
		}
	}
	if os.Getenv("NODEFLOW_KEEP_SANDBOX") == "" {
		errs = append(errs, os.RemoveAll(s.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ovs sandbox: stop: %w", err)
	}
	return nil
}

// stopProcess signals a daemon and waits for it, escalating to SIGKILL.
func stopProcess(cmd *exec.Cmd, sig syscall.Signal, grace time.Duration) error {
	if cmd.Process == nil {
		return nil
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return nil
	case <-time.After(grace):
		return fmt.Errorf("pid %d did not exit", cmd.Process.Pid)
	}
}

// waitSocket waits until a unix socket accepts connections.
func waitSocket(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: %w", path, lastErr)
}

// run executes an OVS tool against the sandbox and returns its trimmed stdout.
func (s *Sandbox) run(tool string, args ...string) (string, error) {
	cmd := exec.Command(tool, args...)
	cmd.Env = append(os.Environ(), s.Env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimRight(stdout.String(), "\n"), nil
}

// Vsctl runs ovs-vsctl against the sandbox database (a test oracle).
func (s *Sandbox) Vsctl(args ...string) (string, error) {
	return s.run("ovs-vsctl", append([]string{"--db=unix:" + s.DBSock(), "--timeout=10"}, args...)...)
}

// Ofctl runs ovs-ofctl with the given arguments. Bridge names given as
// arguments resolve through OVS_RUNDIR to this sandbox's management sockets.
func (s *Sandbox) Ofctl(args ...string) (string, error) {
	return s.run("ovs-ofctl", args...)
}

// Appctl runs ovs-appctl against this sandbox's ovs-vswitchd.
func (s *Sandbox) Appctl(args ...string) (string, error) {
	return s.run("ovs-appctl", append([]string{"-t", s.VswitchdCtl()}, args...)...)
}

// Exec runs a command inside the sandbox's network namespace and returns its
// combined output.
func (s *Sandbox) Exec(name string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", s.Netns, name}, args...)...)
	cmd.Env = append(os.Environ(), s.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %v: %s", name, strings.Join(args, " "), s.Netns, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}
