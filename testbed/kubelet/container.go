package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// container is one container of a pod: its spec, its image's program, and
// its current process. The pod worker's goroutine starts and stops it;
// status readers and the streaming server take mu.
type container struct {
	spec v1.Container
	init bool
	img  Image
	// imgErr is why the image cannot run (the container stays Waiting).
	imgErr error

	mu sync.Mutex
	// proc is the running process, nil when there is none.
	proc   *exec.Cmd
	exited chan struct{} // closed when proc has exited
	stdin  io.WriteCloser
	// out fans the process's output out to attached clients.
	out *fanout
	// attempt counts starts; restarts is attempt-1 once it has started.
	attempt   int
	startedAt time.Time
	// term is the last termination, nil before the first exit.
	term *v1.ContainerStateTerminated
	// backoffUntil is when a crashed container may start again.
	backoffUntil time.Time
	backoff      time.Duration
	// started and ready are the startup and readiness probes' verdicts
	// (true without a probe once running).
	started, ready bool
	// preStop is closed once the container's preStop hook is done (nil
	// before the pod terminates).
	preStop chan struct{}
	// waitReason and waitMessage explain a container that does not run.
	waitReason, waitMessage string
	id                      string
	logPath                 string
}

// fanout copies a container's output to whoever is attached.
type fanout struct {
	mu  sync.Mutex
	out map[io.Writer]struct{}
}

func (f *fanout) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.out {
		if _, err := w.Write(p); err != nil {
			delete(f.out, w)
		}
	}
	return len(p), nil
}

func (f *fanout) add(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.out == nil {
		f.out = map[io.Writer]struct{}{}
	}
	f.out[w] = struct{}{}
}

func (f *fanout) remove(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.out, w)
}

// logWriter writes one stream of a container into its log file in the
// CRI format (RFC 3339 time, stream, F for a full line or P for a part,
// text), which a kubelet serves and `kubectl logs` reads.
type logWriter struct {
	mu     *sync.Mutex
	f      *os.File
	stream string
	tee    io.Writer
	buf    []byte
}

func (l *logWriter) Write(p []byte) (int, error) {
	if l.tee != nil {
		_, _ = l.tee.Write(p)
	}
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.line(l.buf[:i], "F")
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) >= 16<<10 {
		l.line(l.buf, "P")
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

// flush writes what is left of a line without its newline.
func (l *logWriter) flush() {
	if len(l.buf) > 0 {
		l.line(l.buf, "P")
		l.buf = nil
	}
}

func (l *logWriter) line(text []byte, tag string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.f, "%s %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), l.stream, tag, text)
}

// containerLogDir is where a container's logs are, one file per attempt.
func (k *Kubelet) containerLogDir(pod *v1.Pod, name string) string {
	return filepath.Join(k.logsDir(), pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), name)
}

// env returns a container's environment, as a kubelet builds it: PATH and
// HOSTNAME first, then env (each value may refer to the ones before with
// $(VAR)), with fieldRef values from the pod.
func (w *podWorker) env(pod *v1.Pod, c *container) (map[string]string, error) {
	path := defaultPath
	if c.img.Bin != "" {
		path = c.img.Bin + ":" + path
	}
	env := map[string]string{"PATH": path, "HOSTNAME": podHostname(pod, w.k.cfg.NodeName), "HOME": "/root"}
	for k, v := range w.k.serviceEnv(pod) {
		env[k] = v
	}
	for _, from := range c.spec.EnvFrom {
		vals, err := w.k.envFrom(context.Background(), pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for k, v := range vals {
			env[from.Prefix+k] = v
		}
	}
	for _, e := range c.spec.Env {
		if e.ValueFrom == nil {
			env[e.Name] = expand(e.Value, env)
			continue
		}
		v, err := w.valueFrom(pod, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		env[e.Name] = v
	}
	return env, nil
}

// valueFrom resolves an env var's source.
func (w *podWorker) valueFrom(pod *v1.Pod, s *v1.EnvVarSource) (string, error) {
	switch {
	case s.FieldRef != nil:
		switch p := s.FieldRef.FieldPath; p {
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "metadata.uid":
			return string(pod.UID), nil
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case "status.hostIP":
			return w.k.cfg.NodeIPs[0].String(), nil
		case "status.hostIPs":
			var ips []string
			for _, ip := range w.k.cfg.NodeIPs {
				ips = append(ips, ip.String())
			}
			return strings.Join(ips, ","), nil
		case "status.podIP":
			if len(w.podIPs) > 0 {
				return w.podIPs[0], nil
			}
			return "", nil
		case "status.podIPs":
			return strings.Join(w.podIPs, ","), nil
		default:
			if k, ok := strings.CutPrefix(p, "metadata.labels['"); ok {
				return pod.Labels[strings.TrimSuffix(k, "']")], nil
			}
			if k, ok := strings.CutPrefix(p, "metadata.annotations['"); ok {
				return pod.Annotations[strings.TrimSuffix(k, "']")], nil
			}
			return "", fmt.Errorf("fieldRef %q is not supported by the testbed kubelet", p)
		}
	case s.ResourceFieldRef != nil:
		// The stand-in has no resource accounting: the node's capacity.
		switch s.ResourceFieldRef.Resource {
		case "limits.cpu", "requests.cpu":
			return "4", nil
		default:
			return strconv.FormatInt(8<<30, 10), nil
		}
	case s.ConfigMapKeyRef != nil || s.SecretKeyRef != nil:
		return w.k.keyRef(context.Background(), pod.Namespace, s)
	}
	return "", errors.New("empty valueFrom")
}

// start starts the container's process in the sandbox. The worker holds
// no lock; start takes c.mu.
func (w *podWorker) startContainer(ctx context.Context, pod *v1.Pod, c *container) error {
	env, err := w.env(pod, c)
	if err != nil {
		return err
	}
	var argv []string
	if c.img.Builtin {
		argv = append(append([]string(nil), c.img.Entrypoint...), "--pod", pod.Name)
		tcp, udp := ports(pod)
		for _, p := range tcp {
			argv = append(argv, "--tcp", strconv.Itoa(p))
		}
		for _, p := range udp {
			argv = append(argv, "--udp", strconv.Itoa(p))
		}
	} else if argv, err = c.img.argv(c.spec.Command, c.spec.Args, env); err != nil {
		return err
	}
	cmd := exec.Command("nsenter", inSandbox(w.sandbox, c.img.workingDir(c.spec.WorkingDir), argv)...)
	cmd.Env = environ(env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	c.mu.Lock()
	attempt := c.attempt
	c.mu.Unlock()
	dir := w.k.containerLogDir(pod, c.spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(dir, strconv.Itoa(attempt)+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	out := &fanout{}
	var fmu sync.Mutex
	stdout := &logWriter{mu: &fmu, f: logf, stream: "stdout", tee: out}
	stderr := &logWriter{mu: &fmu, f: logf, stream: "stderr", tee: out}
	var listening chan struct{}
	var watch io.Writer = stdout
	if c.img.Builtin {
		// The test server says when it listens; it counts as started then.
		listening = make(chan struct{})
		watch = &lineWatch{w: stdout, match: "serving pod", seen: listening}
	}
	cmd.Stdout, cmd.Stderr = watch, stderr
	var stdin io.WriteCloser
	if c.spec.Stdin {
		if stdin, err = cmd.StdinPipe(); err != nil {
			logf.Close()
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	exited := make(chan struct{})
	c.mu.Lock()
	c.proc, c.exited, c.stdin, c.out = cmd, exited, stdin, out
	c.startedAt = time.Now()
	c.id = fmt.Sprintf("testbed://%s-%s-%d", w.sandboxID[:12], c.spec.Name, attempt)
	c.logPath = logPath
	c.waitReason, c.waitMessage = "", ""
	c.started = c.spec.StartupProbe == nil
	c.ready = false
	c.attempt++
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		logf.Close()
		code := 0
		if err != nil {
			code = -1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code = 128 + int(ws.Signal())
				}
			}
		}
		c.mu.Lock()
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		c.term = &v1.ContainerStateTerminated{
			ExitCode: int32(code), Reason: reason, ContainerID: c.id,
			StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now(),
		}
		c.proc, c.stdin = nil, nil
		c.mu.Unlock()
		close(exited)
		w.poke()
	}()
	if listening != nil {
		select {
		case <-listening:
		case <-exited:
			return fmt.Errorf("the test server exited at start (see %s)", logPath)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("the test server did not listen within 30s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// inSandbox is the nsenter argv that runs argv in the sandbox's
// namespaces and root, in directory wd (env -C: a directory nsenter would
// open in the node's root, not the pod's).
func inSandbox(sb *sandbox, wd string, argv []string) []string {
	return append([]string{"--target", strconv.Itoa(sb.pid), "--uts", "--mount", "--net", "--root", "--wd", "--", "/usr/bin/env", "-C", wd, "--"}, argv...)
}

// lineWatch closes seen when a line containing match passes through.
type lineWatch struct {
	w     io.Writer
	match string
	seen  chan struct{}
	buf   []byte
}

func (l *lineWatch) Write(p []byte) (int, error) {
	if l.seen != nil {
		l.buf = append(l.buf, p...)
		if bytes.Contains(l.buf, []byte(l.match)) {
			close(l.seen)
			l.seen, l.buf = nil, nil
		} else if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
			l.buf = l.buf[i+1:]
		}
	}
	return l.w.Write(p)
}

// stopContainer signals the container's process group (SIGTERM, then
// SIGKILL after grace) and waits for it to exit.
func stopContainer(c *container, grace time.Duration) {
	c.mu.Lock()
	proc, exited := c.proc, c.exited
	c.mu.Unlock()
	if proc == nil {
		return
	}
	pgid := proc.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
}

// preStopDone reports whether the container's preStop hook is done.
func (c *container) preStopDone() bool {
	c.mu.Lock()
	ch := c.preStop
	c.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// running reports whether the container has a process.
func (c *container) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != nil
}

// status is the container's status, as a kubelet reports it.
func (c *container) status() v1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := v1.ContainerStatus{
		Name:    c.spec.Name,
		Image:   c.spec.Image,
		ImageID: "testbed://" + c.img.Name,
	}
	restarts := int32(max(c.attempt-1, 0))
	st.RestartCount = restarts
	switch {
	case c.proc != nil:
		st.ContainerID = c.id
		st.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		st.Started = ptr.To(c.started)
		st.Ready = c.ready
		if c.term != nil {
			st.LastTerminationState.Terminated = c.term
		}
	case c.term != nil && c.waitReason == "":
		st.ContainerID = c.term.ContainerID
		st.State.Terminated = c.term
		st.Started = ptr.To(false)
	default:
		reason, msg := c.waitReason, c.waitMessage
		if reason == "" {
			reason = "ContainerCreating"
		}
		st.State.Waiting = &v1.ContainerStateWaiting{Reason: reason, Message: msg}
		st.Started = ptr.To(false)
		if c.term != nil {
			st.LastTerminationState.Terminated = c.term
		}
	}
	if c.imgErr != nil {
		st.ImageID = ""
	}
	return st
}
