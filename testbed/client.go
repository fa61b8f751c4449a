package testbed

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"nodeflow/testbed/kubelet"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/topology"
)

// UpOptions configure Up.
type UpOptions struct {
	// TopologyFile is the topology; "" means the default one.
	TopologyFile string
	// StateRoot holds the state directories; "" means DefaultStateRoot.
	StateRoot string
	// BinDir holds the control-plane binaries; "" means DefaultBinDir().
	BinDir string
	// Nodeflow is the nodeflow binary.
	Nodeflow string
	// Self is the testbed binary that runs the supervisor (`run`) and the
	// pod workload (`serve`); "" means this executable.
	Self string
	// NoAgent skips `nodeflow agent`.
	NoAgent bool
	// Agnhost is the upstream agnhost binary; "" means DefaultAgnhost().
	Agnhost string
	// CoreDNS is the cluster DNS's binary; "" means DefaultCoreDNS().
	CoreDNS string
	// Timeout bounds the bring-up; zero means 5 minutes.
	Timeout time.Duration
}

// Preflight checks what a testbed needs: root, OVS, iproute2, the
// control-plane binaries in binDir and the nodeflow binary.
func Preflight(binDir, nodeflow string) error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("testbed: needs root (network namespaces)"))
	}
	if err := ovs.Check(); err != nil {
		errs = append(errs, err)
	}
	for _, tool := range []string{"ip", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			errs = append(errs, fmt.Errorf("testbed: %s not found (run `make deps`)", tool))
		}
	}
	if err := CheckBinaries(binDir); err != nil {
		errs = append(errs, err)
	}
	if nodeflow != "" {
		if fi, err := os.Stat(nodeflow); err != nil || fi.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("testbed: nodeflow binary %s is missing (run `make build`)", nodeflow))
		}
	}
	return errors.Join(errs...)
}

// Up starts a testbed supervisor in the background and waits until the
// cluster is ready. It returns the testbed's state.
func Up(o UpOptions) (*State, error) {
	top, err := topology.Load(o.TopologyFile)
	if err != nil {
		return nil, err
	}
	if o.StateRoot == "" {
		o.StateRoot = DefaultStateRoot
	}
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir()
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Self == "" {
		if o.Self, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if o.Nodeflow, err = filepath.Abs(o.Nodeflow); err != nil {
		return nil, err
	}
	if err := Preflight(o.BinDir, o.Nodeflow); err != nil {
		return nil, err
	}
	dir := filepath.Join(o.StateRoot, top.Name)
	if st, err := ReadState(dir); err == nil {
		if st.Alive() {
			return nil, fmt.Errorf("testbed %s is already up (state %s); run `testbed down` first", top.Name, dir)
		}
		if _, err := Down(dir, false); err != nil {
			return nil, fmt.Errorf("testbed %s: clean up a dead testbed: %w", top.Name, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	topoFile := filepath.Join(dir, "topology.yaml")
	src := topology.DefaultYAML()
	if o.TopologyFile != "" {
		if src, err = os.ReadFile(o.TopologyFile); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(topoFile, src, 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "logs", "testbed.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"run", "--topology", topoFile, "--state-dir", dir, "--bin-dir", o.BinDir, "--nodeflow", o.Nodeflow}
	if o.NoAgent {
		args = append(args, "--no-agent")
	}
	if o.Agnhost == "" {
		o.Agnhost = DefaultAgnhost()
	}
	if o.Agnhost != "" {
		args = append(args, "--agnhost", o.Agnhost)
	}
	if o.CoreDNS == "" {
		o.CoreDNS = DefaultCoreDNS()
	}
	if o.CoreDNS != "" {
		args = append(args, "--coredns", o.CoreDNS)
	}
	cmd := exec.Command(o.Self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), MarkerEnv+"="+dir)
	// Its own session: the supervisor outlives `up` and the terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testbed: start supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.After(o.Timeout)
	for {
		select {
		case err := <-exited:
			st, _ := ReadState(dir)
			if st != nil && st.Error != "" {
				return st, fmt.Errorf("testbed %s failed: %s (log: %s)", top.Name, st.Error, logPath)
			}
			return st, fmt.Errorf("testbed %s: supervisor exited (%v) (log: %s)", top.Name, err, logPath)
		case <-deadline:
			_, _ = Down(dir, true)
			return nil, fmt.Errorf("testbed %s: not ready after %s (log: %s)", top.Name, o.Timeout, logPath)
		case <-time.After(50 * time.Millisecond):
		}
		st, err := ReadState(dir)
		if err != nil {
			continue
		}
		switch st.Phase {
		case PhaseReady:
			return st, nil
		case PhaseFailed:
			// The supervisor tears down and exits; wait for that.
			<-exited
			return st, fmt.Errorf("testbed %s failed: %s (log: %s)", top.Name, st.Error, logPath)
		}
	}
}

// Leftovers lists what a testbed left on the machine: processes carrying its
// marker, its network namespaces, and mounts under its state directory or of
// its namespaces.
type Leftovers struct {
	PIDs   []int
	Netns  []string
	Mounts []string
}

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool { return len(l.PIDs) == 0 && len(l.Netns) == 0 && len(l.Mounts) == 0 }

func (l Leftovers) String() string {
	return fmt.Sprintf("processes %v, network namespaces %v, mounts %v", l.PIDs, l.Netns, l.Mounts)
}

// FindLeftovers looks for what the testbed with state directory dir and
// namespace prefix left behind.
func FindLeftovers(dir, netnsPrefix string) Leftovers {
	var l Leftovers
	marker := []byte(MarkerEnv + "=" + dir + "\x00")
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if bytes.Contains(append([]byte("\x00"), env...), append([]byte("\x00"), marker...)) && pidAlive(pid) {
			l.PIDs = append(l.PIDs, pid)
		}
	}
	l.Netns = netnsWithPrefix(netnsPrefix)
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			mp := fields[4]
			if strings.HasPrefix(mp, dir+"/") || mp == dir || strings.HasPrefix(mp, "/run/netns/"+netnsPrefix) {
				l.Mounts = append(l.Mounts, mp)
			}
		}
		f.Close()
	}
	return l
}

// Down stops the testbed whose state directory is dir: it asks the
// supervisor to tear down, waits, then removes whatever is left (processes
// carrying the testbed's marker, its namespaces) and, unless keep is set, the
// state directory. It returns what it had to clean up by force.
func Down(dir string, keep bool) (Leftovers, error) {
	st, err := ReadState(dir)
	name := filepath.Base(dir)
	prefix := NetnsPrefix(name)
	if err == nil {
		prefix = st.NetnsPrefix
		if st.Alive() {
			_ = syscall.Kill(st.SupervisorPID, syscall.SIGTERM)
			deadline := time.Now().Add(2 * time.Minute)
			for st.Alive() && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if st.Alive() {
				_ = syscall.Kill(st.SupervisorPID, syscall.SIGKILL)
			}
		}
	}
	forced := FindLeftovers(dir, prefix)
	for _, pid := range forced.PIDs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range forced.PIDs {
		for i := 0; i < 100 && pidAlive(pid); i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var errs []error
	if err := deleteNetnsWithPrefix(prefix); err != nil {
		errs = append(errs, err)
	}
	for _, m := range FindLeftovers(dir, prefix).Mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if !keep {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if left := FindLeftovers(dir, prefix); !left.Empty() {
		errs = append(errs, fmt.Errorf("testbed %s: still left: %s", name, left))
	}
	return forced, errors.Join(errs...)
}

// Resolve finds the state directory of the testbed named name under root;
// with name "" it picks the only one there is.
func Resolve(root, name string) (string, error) {
	if root == "" {
		root = DefaultStateRoot
	}
	if name != "" {
		dir := filepath.Join(root, name)
		if _, err := os.Stat(StateFile(dir)); err != nil {
			return "", fmt.Errorf("testbed %s is not up (no %s)", name, StateFile(dir))
		}
		return dir, nil
	}
	names, err := List(root)
	if err != nil {
		return "", err
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("no testbed is up (run `testbed up`)")
	case 1:
		return filepath.Join(root, names[0]), nil
	}
	return "", fmt.Errorf("several testbeds are up (%s): choose one with --name", strings.Join(names, ", "))
}

// WriteStatus prints one line per member: name, kind, network namespace,
// addresses (comma-separated, "-" if none) and OVS rundir ("-" if none).
func WriteStatus(w io.Writer, st *State) {
	for _, m := range st.Members {
		addrs, rundir := strings.Join(m.Addresses, ","), m.OVSRundir
		if addrs == "" {
			addrs = "-"
		}
		if rundir == "" {
			rundir = "-"
		}
		fmt.Fprintf(w, "%s %s %s %s %s\n", m.Name, m.Kind, m.Netns, addrs, rundir)
	}
}

// Target is where `testbed exec` runs a command.
type Target struct {
	Netns string
	// Env is added to the command's environment.
	Env []string
}

// ResolveTarget finds the namespace of a member (node, host, bridge) or of a
// pod named NAMESPACE/POD.
func ResolveTarget(st *State, name string) (Target, error) {
	if ns, pod, ok := strings.Cut(name, "/"); ok {
		for _, m := range st.Members {
			if m.Dir == "" {
				continue
			}
			b, err := os.ReadFile(kubelet.RecordPath(m.Dir, ns, pod))
			if err != nil {
				continue
			}
			var rec kubelet.PodRecord
			if err := json.Unmarshal(b, &rec); err != nil {
				return Target{}, err
			}
			return Target{Netns: rec.Netns}, nil
		}
		return Target{}, fmt.Errorf("pod %s is not running on any node of testbed %s", name, st.Name)
	}
	m, ok := st.Member(name)
	if !ok {
		var names []string
		for _, m := range st.Members {
			names = append(names, m.Name)
		}
		return Target{}, fmt.Errorf("testbed %s has no member %q (members: %s; pods: NAMESPACE/POD)", st.Name, name, strings.Join(names, ", "))
	}
	t := Target{Netns: m.Netns}
	if m.OVSRundir != "" {
		t.Env = append(t.Env, "OVS_RUNDIR="+m.OVSRundir, "OVS_DBDIR="+m.OVSRundir, "OVS_LOGDIR="+m.OVSRundir,
			"OVS_SYSCONFDIR="+m.OVSRundir, "KUBECONFIG="+m.Kubeconfig)
	}
	return t, nil
}

// Command builds the command that runs argv in the target.
func (t Target) Command(argv ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", t.Netns}, argv...)...)
	cmd.Env = append(os.Environ(), t.Env...)
	return cmd
}

// LogFiles returns the log files `testbed logs NAME` shows: for a node its
// kubelet and agent logs; for a control-plane component or "testbed" its log.
func LogFiles(st *State, name string) ([]string, error) {
	if m, ok := st.Member(name); ok && m.Dir != "" {
		return []string{filepath.Join(m.Dir, "kubelet.log"), filepath.Join(m.Dir, "agent.log")}, nil
	}
	p := filepath.Join(st.Dir, "logs", name+".log")
	if _, err := os.Stat(p); err == nil {
		return []string{p}, nil
	}
	entries, _ := os.ReadDir(filepath.Join(st.Dir, "logs"))
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".log"))
	}
	for _, m := range st.Members {
		if m.Dir != "" {
			names = append(names, m.Name)
		}
	}
	return nil, fmt.Errorf("no logs for %q (nodes and components: %s)", name, strings.Join(names, ", "))
}
