package kubelet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Restart back-off: a container that exits and is to run again waits
// this long, doubled on each exit up to restartBackoffMax (a kubelet uses
// 10 s and 5 minutes; the testbed's pods are tests).
const (
	restartBackoff    = time.Second
	restartBackoffMax = 30 * time.Second
)

// podWorker drives one pod through its life. Only run's goroutine starts
// and stops things; the status, the probes and the streaming server read
// under mu.
type podWorker struct {
	k   *Kubelet
	log logrus.FieldLogger

	mu         sync.Mutex
	pod        *v1.Pod
	gone       bool
	notify     chan struct{}
	sandbox    *sandbox
	containers []*container // init containers first
	podIPs     []string
	netns      string
	// evicted says why the kubelet evicted the pod ("" if it did not).
	evicted string

	// Fields only run's goroutine touches.
	started     bool // the sandbox is up
	sandboxID   string
	cniConf     map[string]any
	cniResult   json.RawMessage
	startedAt   metav1.Time
	probeCancel map[*container]context.CancelFunc
	lastStatus  *v1.PodStatus
}

func newPodWorker(k *Kubelet, pod *v1.Pod) *podWorker {
	return &podWorker{
		k:           k,
		log:         k.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "uid": pod.UID}),
		pod:         pod,
		notify:      make(chan struct{}, 1),
		probeCancel: map[*container]context.CancelFunc{},
	}
}

func (w *podWorker) update(pod *v1.Pod, gone bool) {
	w.mu.Lock()
	w.pod = pod
	w.gone = w.gone || gone
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) poke() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *podWorker) snapshot() (*v1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.gone
}

// container returns the named container (app or init), nil if none.
func (w *podWorker) container(name string) *container {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.containers {
		if c.spec.Name == name {
			return c
		}
	}
	return nil
}

// defaultContainer is the container a request without one means: the
// only one, or the one the kubectl.kubernetes.io/default-container
// annotation names.
func (w *podWorker) defaultContainer() (*container, error) {
	pod, _ := w.snapshot()
	if n := pod.Annotations["kubectl.kubernetes.io/default-container"]; n != "" {
		if c := w.container(n); c != nil {
			return c, nil
		}
	}
	if len(pod.Spec.Containers) == 1 {
		if c := w.container(pod.Spec.Containers[0].Name); c != nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s has %d containers: name one", pod.Namespace, pod.Name, len(pod.Spec.Containers))
}

func (w *podWorker) run(ctx context.Context) {
	backoff := time.Second
	var retryAt time.Time
	var wake *time.Timer
	refresh := time.NewTicker(volumeRefresh)
	defer refresh.Stop()
	for {
		var wakeC <-chan time.Time
		if wake != nil {
			wakeC = wake.C
		}
		select {
		case <-ctx.Done():
			w.stopContainers(2 * time.Second)
			w.removeSandbox(false)
			return
		case <-w.notify:
		case <-wakeC:
			wake = nil
		case <-refresh.C:
			pod, gone := w.snapshot()
			if !w.started || gone || pod.DeletionTimestamp != nil || w.isEvicted() {
				continue
			}
			w.refreshVolumes(ctx, pod)
			if !w.checkStorage(pod) {
				continue
			}
		}
		pod, gone := w.snapshot()
		if gone || pod.DeletionTimestamp != nil {
			w.terminate(ctx, pod, gone)
			return
		}
		var next wakeup
		if !w.started {
			if now := time.Now(); now.Before(retryAt) {
				next.by(retryAt)
			} else if err := w.start(ctx, pod); err != nil {
				if ctx.Err() != nil {
					continue
				}
				w.log.WithError(err).Error("start pod")
				w.k.recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
				w.stopContainers(time.Second)
				_ = w.removeSandbox(true)
				retryAt = time.Now().Add(backoff)
				next.by(retryAt)
				backoff = min(2*backoff, 30*time.Second)
			} else {
				backoff = time.Second
			}
		}
		if w.started {
			if !w.isEvicted() {
				next.by(w.syncContainers(ctx, pod))
			}
			if err := w.syncStatus(ctx, pod); err != nil && ctx.Err() == nil {
				w.log.WithError(err).Warn("update pod status")
				next.by(time.Now().Add(time.Second))
			}
		}
		if !next.at.IsZero() {
			if wake != nil {
				wake.Stop()
			}
			wake = time.NewTimer(time.Until(next.at))
		}
	}
}

// wakeup is when the worker next has something to do: the soonest of the
// times it is told about (zero for none).
type wakeup struct{ at time.Time }

// by asks for a wakeup at t at the latest (a zero t asks for none).
func (u *wakeup) by(t time.Time) {
	if !t.IsZero() && (u.at.IsZero() || t.Before(u.at)) {
		u.at = t
	}
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// start creates the sandbox: the network namespace, CNI ADD and CHECK,
// and the sandbox process; and the pod's containers, not yet started.
func (w *podWorker) start(ctx context.Context, pod *v1.Pod) error {
	k := w.k
	netns, podIPs := k.cfg.NodeNetns, []string(nil)
	if pod.Spec.HostNetwork {
		for _, ip := range k.cfg.NodeIPs {
			podIPs = append(podIPs, ip.String())
		}
		w.sandboxID = randomID()
	} else {
		node, err := k.waitPodCIDRs(ctx)
		if err != nil {
			return err
		}
		conf, err := k.netConf(ctx, node)
		if err != nil {
			return err
		}
		w.cniConf = conf
		w.sandboxID = randomID()
		netns = k.cfg.PodNetnsPrefix + strings.ReplaceAll(string(pod.UID), "-", "")[:12]
		if out, err := exec.CommandContext(ctx, "ip", "netns", "add", netns).CombinedOutput(); err != nil {
			return fmt.Errorf("create netns: %v: %s", err, strings.TrimSpace(string(out)))
		}
		w.setNetwork(netns, nil)
		res, err := w.cni(ctx, "ADD", pod, nil)
		if err != nil {
			return err
		}
		w.cniResult = res
		if podIPs, err = resultIPs(res); err != nil {
			return err
		}
		// A runtime may CHECK at any time; doing it once here exercises it.
		if _, err := w.cni(ctx, "CHECK", pod, res); err != nil {
			return err
		}
	}
	w.setNetwork(netns, podIPs)
	var cs []*container
	for i, spec := range append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		c := &container{spec: spec, init: i < len(pod.Spec.InitContainers)}
		if c.img, c.imgErr = k.cfg.Images.Resolve(spec.Image); c.imgErr != nil {
			c.waitReason, c.waitMessage = "ErrImagePull", c.imgErr.Error()
			k.recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", spec.Image, c.imgErr)
		}
		cs = append(cs, c)
	}
	sb, err := w.startSandbox(ctx, pod, cs)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.sandbox, w.containers = sb, cs
	w.mu.Unlock()
	w.started = true
	w.startedAt = metav1.Now()
	if err := w.writeRecord(pod); err != nil {
		w.log.WithError(err).Warn("write pod record")
	}
	w.log.WithFields(logrus.Fields{"ips": podIPs, "netns": netns}).Info("pod sandbox started")
	return nil
}

func (w *podWorker) isEvicted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.evicted != ""
}

func (w *podWorker) setNetwork(netns string, ips []string) {
	w.mu.Lock()
	w.netns, w.podIPs = netns, ips
	w.mu.Unlock()
}

// restartable reports whether a container that exited with code runs again.
func restartable(pod *v1.Pod, c *container, code int32) bool {
	if c.init && c.spec.RestartPolicy != nil && *c.spec.RestartPolicy == v1.ContainerRestartPolicyAlways {
		return true // a sidecar
	}
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return code != 0
	}
	return !c.init || code != 0
}

// syncContainers starts what should run: the init containers one after
// the other, then every app container; a container that exited runs
// again after its back-off if the restart policy says so. It returns when
// it next has something to do (zero for nothing).
func (w *podWorker) syncContainers(ctx context.Context, pod *v1.Pod) time.Time {
	w.mu.Lock()
	cs := w.containers
	w.mu.Unlock()
	var next wakeup
	// ensure starts c if it has no process and should have one; it reports
	// whether c has finished for good with exit code 0.
	ensure := func(c *container) (done bool) {
		if c.imgErr != nil || c.running() {
			return false
		}
		c.mu.Lock()
		term, until := c.term, c.backoffUntil
		c.mu.Unlock()
		if term != nil && !restartable(pod, c, term.ExitCode) {
			return term.ExitCode == 0
		}
		if time.Now().Before(until) {
			next.by(until)
			return false
		}
		if err := w.startContainer(ctx, pod, c); err != nil {
			w.log.WithError(err).WithField("container", c.spec.Name).Error("start container")
			w.k.recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
			stopContainer(c, time.Second)
			c.mu.Lock()
			c.waitReason, c.waitMessage = "CreateContainerError", err.Error()
			c.backoffUntil = time.Now().Add(restartBackoff)
			c.mu.Unlock()
			next.by(time.Now().Add(restartBackoff))
			return false
		}
		verb := "Started"
		if term != nil {
			verb = "Restarted"
		}
		w.k.recorder.Eventf(pod, v1.EventTypeNormal, "Started", "%s container %s (%s)", verb, c.spec.Name, c.img.Name)
		if l := c.spec.Lifecycle; l != nil && l.PostStart != nil {
			// As a kubelet: the hook runs before anything else happens to
			// the container, and its failure kills the container.
			hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := w.runHook(hctx, pod, c, l.PostStart)
			cancel()
			if err != nil {
				w.k.recorder.Eventf(pod, v1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed: %v", err)
				stopContainer(c, time.Second)
				return false
			}
		}
		w.startProbes(ctx, pod, c)
		return false
	}
	// A container that exited is backed off before it runs again.
	for _, c := range cs {
		c.mu.Lock()
		if c.proc == nil && c.term != nil && c.backoffUntil.Before(c.term.FinishedAt.Time) && restartable(pod, c, c.term.ExitCode) {
			c.backoff = min(max(2*c.backoff, restartBackoff), restartBackoffMax)
			c.backoffUntil = time.Now().Add(c.backoff)
			c.waitReason = "CrashLoopBackOff"
			c.waitMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s", c.backoff, c.spec.Name, pod.Name, pod.Namespace)
		}
		c.mu.Unlock()
		if !c.running() {
			if cancel := w.probeCancel[c]; cancel != nil {
				cancel()
				delete(w.probeCancel, c)
			}
		}
	}
	for _, c := range cs {
		if !c.init {
			continue
		}
		sidecar := c.spec.RestartPolicy != nil && *c.spec.RestartPolicy == v1.ContainerRestartPolicyAlways
		done := ensure(c)
		if sidecar {
			if !c.running() {
				return next.at
			}
			continue
		}
		if !done {
			return next.at
		}
	}
	for _, c := range cs {
		if !c.init {
			ensure(c)
		}
	}
	return next.at
}

// stopContainers stops every container, app containers first, each
// within grace.
func (w *podWorker) stopContainers(grace time.Duration) {
	for _, cancel := range w.probeCancel {
		cancel()
	}
	clear(w.probeCancel)
	w.mu.Lock()
	cs := w.containers
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		if !c.init {
			wg.Add(1)
			go func() { defer wg.Done(); stopContainer(c, grace) }()
		}
	}
	wg.Wait()
	for _, c := range cs {
		if c.init {
			stopContainer(c, grace)
		}
	}
}

// removeSandbox stops the sandbox process, runs CNI DEL (when del is set)
// and deletes the namespace.
func (w *podWorker) removeSandbox(del bool) error {
	w.mu.Lock()
	sb, netns := w.sandbox, w.netns
	w.sandbox = nil
	w.mu.Unlock()
	sb.stop()
	var errs []error
	pod, _ := w.snapshot()
	if w.cniResult != nil && del {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if _, err = w.cni(ctx, "DEL", pod, w.cniResult); err == nil {
				break
			}
			w.log.WithError(err).Warn("CNI DEL failed; retrying")
			time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
		}
		cancel()
		if err != nil {
			errs = append(errs, err)
		}
	}
	if netns != "" && netns != w.k.cfg.NodeNetns {
		if out, err := exec.Command("ip", "netns", "delete", netns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete netns %s: %v: %s", netns, err, strings.TrimSpace(string(out))))
		}
	}
	w.setNetwork("", nil)
	w.sandboxID, w.cniResult = "", nil
	w.started = false
	_ = os.Remove(RecordPath(w.k.cfg.StateDir, pod.Namespace, pod.Name))
	_ = os.RemoveAll(w.k.podDir(string(pod.UID)))
	return errors.Join(errs...)
}

// terminate stops everything and, unless the pod is already gone from the
// API, deletes it for good.
func (w *podWorker) terminate(ctx context.Context, pod *v1.Pod, gone bool) {
	grace := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	w.k.recorder.Eventf(pod, v1.EventTypeNormal, "Killing", "Stopping the pod's containers")
	w.drain(ctx, grace, !gone)
	w.stopContainers(time.Second)
	if err := w.removeSandbox(true); err != nil {
		w.log.WithError(err).Error("remove sandbox")
	}
	w.log.Info("pod stopped")
	if gone {
		return
	}
	err := w.k.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.log.WithError(err).Error("delete pod")
	}
}

// drain asks every container to stop (SIGTERM) and waits up to grace for
// them, then kills what is left. Meanwhile the probes go on and, with
// report, the pod's status follows them, as a kubelet's does: a server
// that fails its readiness once told to stop (agnhost netexec
// --delay-shutdown) turns the pod unready while it still serves.
func (w *podWorker) drain(ctx context.Context, grace time.Duration, report bool) {
	w.mu.Lock()
	cs := w.containers
	w.mu.Unlock()
	signal := func(sig syscall.Signal) (running int) {
		for _, c := range cs {
			if sig == syscall.SIGTERM && !c.preStopDone() {
				continue // its preStop hook runs first
			}
			c.mu.Lock()
			if c.proc != nil {
				_ = syscall.Kill(-c.proc.Process.Pid, sig)
				running++
			}
			c.mu.Unlock()
		}
		return running
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	// preStop hooks first, each container's SIGTERM when its hook is done.
	pod, _ := w.snapshot()
	for _, c := range cs {
		w.runPreStop(ctx, pod, c, grace)
	}
	if signal(syscall.SIGTERM) == 0 && !w.anyRunning(cs) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			signal(syscall.SIGKILL)
			return
		case <-deadline.C:
			signal(syscall.SIGKILL)
			return
		case <-w.notify:
		}
		if report {
			pod, _ := w.snapshot()
			if err := w.syncStatus(ctx, pod); err != nil && ctx.Err() == nil {
				w.log.WithError(err).Debug("update the status of a terminating pod")
			}
		}
		signal(syscall.SIGTERM) // containers whose preStop hook finished since
		if !w.anyRunning(cs) {
			return
		}
	}
}

func (w *podWorker) anyRunning(cs []*container) bool {
	for _, c := range cs {
		if c.running() {
			return true
		}
	}
	return false
}

// buildStatus computes the pod's status from the worker's state.
func (w *podWorker) buildStatus(pod *v1.Pod) *v1.PodStatus {
	st := pod.Status.DeepCopy()
	st.HostIP, st.HostIPs = "", nil
	for i, ip := range w.k.cfg.NodeIPs {
		if i == 0 {
			st.HostIP = ip.String()
		}
		st.HostIPs = append(st.HostIPs, v1.HostIP{IP: ip.String()})
	}
	w.mu.Lock()
	podIPs, cs := w.podIPs, w.containers
	w.mu.Unlock()
	st.PodIP, st.PodIPs = "", nil
	for i, ip := range podIPs {
		if i == 0 {
			st.PodIP = ip
		}
		st.PodIPs = append(st.PodIPs, v1.PodIP{IP: ip})
	}
	st.StartTime = &w.startedAt
	st.QOSClass = v1.PodQOSBestEffort

	st.ContainerStatuses, st.InitContainerStatuses = nil, nil
	initialized, allReady := true, true
	appRan, appLive, appFailed := false, false, false
	for _, c := range cs {
		cst := c.status()
		if c.init {
			st.InitContainerStatuses = append(st.InitContainerStatuses, cst)
			sidecar := c.spec.RestartPolicy != nil && *c.spec.RestartPolicy == v1.ContainerRestartPolicyAlways
			if sidecar {
				initialized = initialized && cst.State.Running != nil && ptr.Deref(cst.Started, false)
			} else {
				initialized = initialized && cst.State.Terminated != nil && cst.State.Terminated.ExitCode == 0
			}
			continue
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cst)
		allReady = allReady && cst.Ready
		if cst.State.Running != nil || cst.State.Terminated != nil || cst.LastTerminationState.Terminated != nil {
			appRan = true
		}
		if cst.State.Terminated == nil {
			appLive = true
		} else if cst.State.Terminated.ExitCode != 0 {
			appFailed = true
		}
	}
	initFailed := false
	for _, c := range cs {
		if c.init {
			c.mu.Lock()
			t := c.term
			c.mu.Unlock()
			if !c.running() && t != nil && t.ExitCode != 0 && !restartable(pod, c, t.ExitCode) {
				initFailed = true
			}
		}
	}
	switch {
	case initFailed:
		st.Phase = v1.PodFailed
	case !initialized:
		st.Phase = v1.PodPending
	case appRan && !appLive && appFailed:
		st.Phase = v1.PodFailed
	case appRan && !appLive:
		st.Phase = v1.PodSucceeded
	case appRan:
		st.Phase = v1.PodRunning
	default:
		st.Phase = v1.PodPending
	}
	setCond := func(t v1.PodConditionType, ok bool, reason string) {
		s := v1.ConditionFalse
		if ok {
			s = v1.ConditionTrue
			reason = ""
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != s {
					st.Conditions[i].Status = s
					st.Conditions[i].LastTransitionTime = metav1.Now()
				}
				st.Conditions[i].Reason = reason
				return
			}
		}
		st.Conditions = append(st.Conditions, v1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()})
	}
	w.mu.Lock()
	if w.evicted != "" {
		st.Phase, st.Reason, st.Message = v1.PodFailed, "Evicted", w.evicted
	}
	w.mu.Unlock()
	ready := allReady && st.Phase == v1.PodRunning
	containersReady := ready
	// A readiness gate holds the pod's Ready condition until someone sets
	// the gate's condition True.
	for _, g := range pod.Spec.ReadinessGates {
		gate := false
		for _, c := range st.Conditions {
			if c.Type == g.ConditionType {
				gate = c.Status == v1.ConditionTrue
			}
		}
		ready = ready && gate
	}
	setCond(v1.PodReadyToStartContainers, w.started, "")
	setCond(v1.PodInitialized, initialized, "ContainersNotInitialized")
	setCond(v1.ContainersReady, containersReady, "ContainersNotReady")
	reason := "ContainersNotReady"
	if containersReady {
		reason = "ReadinessGatesNotReady"
	}
	setCond(v1.PodReady, ready, reason)
	return st
}
