package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is a child process of the supervisor. It runs in its own process
// group and gets SIGKILL if the supervisor dies (Pdeathsig), so nothing it
// starts outlives the testbed.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProc starts argv with its output appended to logPath. With netns set
// it runs in that network namespace (through `ip netns exec`, which also
// gives it a mount namespace of its own with the netns's /sys).
func startProc(name, logPath, netns string, env []string, argv ...string) (*proc, error) {
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	return startArgv(name, logPath, env, argv...)
}

// startInNetns starts argv in network namespace netns alone (through
// nsenter), in the host's mount namespace: what it mounts, such as the
// network namespaces the node agent makes for virtual networks' attachments
// under /run/netns, is seen by everyone, as a DaemonSet's bidirectional
// mount of /run/netns makes it on a real node.
func startInNetns(name, logPath, netns string, env []string, argv ...string) (*proc, error) {
	argv = append([]string{"nsenter", "--net=" + filepath.Join("/run/netns", netns), "--"}, argv...)
	return startArgv(name, logPath, env, argv...)
}

// startArgv starts argv with its output appended to logPath.
func startArgv(name, logPath string, env []string, argv ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testbed: %s: %w", name, err)
	}
	fmt.Fprintf(logf, "---- %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("testbed: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}
