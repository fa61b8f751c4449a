package kubelet

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/workload"
)

// PodRecord is the index file the kubelet keeps for each running pod, so that
// tools (`testbed exec NS/POD`) find its namespace without the API server.
type PodRecord struct {
	Namespace   string   `json:"namespace"`
	Name        string   `json:"name"`
	UID         string   `json:"uid"`
	Node        string   `json:"node"`
	Netns       string   `json:"netns"`
	HostNetwork bool     `json:"hostNetwork"`
	Sandbox     string   `json:"sandbox,omitempty"`
	IPs         []string `json:"ips"`
	PID         int      `json:"pid,omitempty"`
}

// RecordPath is where the kubelet with state directory dir keeps the record
// of pod namespace/name.
func RecordPath(dir, namespace, name string) string {
	return filepath.Join(dir, "pods", namespace+"_"+name+".json")
}

// podWorker drives one pod through its life. Only run's goroutine touches
// the runtime fields; update and the probes use mu.
type podWorker struct {
	k   *Kubelet
	log logrus.FieldLogger

	mu     sync.Mutex
	pod    *v1.Pod
	gone   bool
	ready  map[string]bool // container name -> readiness probe result
	notify chan struct{}

	started     bool
	sandboxID   string
	netns       string
	cniConf     map[string]any
	cniResult   json.RawMessage
	podIPs      []string
	startedAt   metav1.Time
	restarts    int32
	proc        *exec.Cmd
	procExit    chan struct{}
	probeCancel context.CancelFunc
	lastStatus  *v1.PodStatus
}

func newPodWorker(k *Kubelet, pod *v1.Pod) *podWorker {
	return &podWorker{
		k:      k,
		log:    k.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "uid": pod.UID}),
		pod:    pod,
		ready:  map[string]bool{},
		notify: make(chan struct{}, 1),
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

func (w *podWorker) run(ctx context.Context) {
	backoff := time.Second
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			w.stopWorkload(2 * time.Second)
			w.removeSandbox(false)
			return
		case <-w.notify:
		case <-retry:
			retry = nil
		case <-w.procExit:
			// The test server died: restart it (restartPolicy is not
			// consulted; the server is not meant to exit).
			w.proc, w.procExit = nil, nil
			w.restarts++
			pod, _ := w.snapshot()
			w.log.WithField("restarts", w.restarts).Warn("workload exited; restarting")
			w.k.recorder.Eventf(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting the test server")
		}
		pod, gone := w.snapshot()
		if gone || pod.DeletionTimestamp != nil {
			w.terminate(ctx, pod, gone)
			return
		}
		if !w.started && retry == nil {
			if err := w.start(ctx, pod); err != nil {
				if ctx.Err() != nil {
					continue
				}
				w.log.WithError(err).Error("start pod")
				w.k.recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
				w.stopWorkload(time.Second)
				w.removeSandbox(true)
				retry = time.After(backoff)
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = time.Second
		}
		if w.started && w.proc == nil && retry == nil {
			if err := w.startWorkload(ctx, pod); err != nil {
				w.log.WithError(err).Error("restart workload")
				retry = time.After(backoff)
				backoff = min(2*backoff, 30*time.Second)
			} else if err := w.writeRecord(pod); err != nil {
				w.log.WithError(err).Warn("write pod record")
			}
		}
		if w.started {
			if err := w.syncStatus(ctx, pod); err != nil && ctx.Err() == nil {
				w.log.WithError(err).Warn("update pod status")
				if retry == nil {
					retry = time.After(time.Second)
				}
			}
		}
	}
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// start creates the sandbox (namespace + CNI ADD/CHECK) and the workload.
func (w *podWorker) start(ctx context.Context, pod *v1.Pod) error {
	k := w.k
	if pod.Spec.HostNetwork {
		w.netns = k.cfg.NodeNetns
		w.podIPs = nil
		for _, ip := range k.cfg.NodeIPs {
			w.podIPs = append(w.podIPs, ip.String())
		}
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
		w.netns = k.cfg.PodNetnsPrefix + strings.ReplaceAll(string(pod.UID), "-", "")[:12]
		if out, err := exec.CommandContext(ctx, "ip", "netns", "add", w.netns).CombinedOutput(); err != nil {
			w.netns = ""
			return fmt.Errorf("create netns: %v: %s", err, strings.TrimSpace(string(out)))
		}
		res, err := w.cni(ctx, "ADD", pod, nil)
		if err != nil {
			return err
		}
		w.cniResult = res
		ips, err := resultIPs(res)
		if err != nil {
			return err
		}
		w.podIPs = ips
		// A runtime may CHECK at any time; doing it once here exercises it.
		if _, err := w.cni(ctx, "CHECK", pod, res); err != nil {
			return err
		}
	}
	if err := w.startWorkload(ctx, pod); err != nil {
		return err
	}
	w.started = true
	w.startedAt = metav1.Now()
	if err := w.writeRecord(pod); err != nil {
		w.log.WithError(err).Warn("write pod record")
	}
	w.startProbes(ctx, pod)
	w.log.WithFields(logrus.Fields{"ips": w.podIPs, "netns": w.netns}).Info("pod started")
	w.k.recorder.Eventf(pod, v1.EventTypeNormal, "Started", "Started the test server in %s with IPs %s", w.netns, strings.Join(w.podIPs, ","))
	return nil
}

// resultIPs returns the addresses of a CNI result, IPv4 first as the plugin
// orders them.
func resultIPs(res []byte) ([]string, error) {
	var r struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, fmt.Errorf("cni result: %w", err)
	}
	var out []string
	for _, ip := range r.IPs {
		a, _, ok := strings.Cut(ip.Address, "/")
		if !ok {
			return nil, fmt.Errorf("cni result: address %q has no prefix length", ip.Address)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cni result has no addresses: %s", res)
	}
	return out, nil
}

// ports returns the pod's TCP and UDP containerPorts (8080/TCP if none).
func ports(pod *v1.Pod) (tcp, udp []int) {
	seen := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = v1.ProtocolTCP
			}
			key := string(proto) + "/" + strconv.Itoa(int(p.ContainerPort))
			if seen[key] {
				continue
			}
			seen[key] = true
			switch proto {
			case v1.ProtocolUDP:
				udp = append(udp, int(p.ContainerPort))
			case v1.ProtocolTCP:
				tcp = append(tcp, int(p.ContainerPort))
			}
		}
	}
	if len(tcp) == 0 && len(udp) == 0 {
		tcp = []int{workload.DefaultPort}
	}
	return tcp, udp
}

// startWorkload starts the test server in the pod's namespace and waits
// until it listens.
func (w *podWorker) startWorkload(ctx context.Context, pod *v1.Pod) error {
	tcp, udp := ports(pod)
	argv := append([]string{"netns", "exec", w.netns}, w.k.cfg.Workload...)
	argv = append(argv, "--pod", pod.Name)
	for _, p := range tcp {
		argv = append(argv, "--tcp", strconv.Itoa(p))
	}
	for _, p := range udp {
		argv = append(argv, "--udp", strconv.Itoa(p))
	}
	logf, err := os.OpenFile(filepath.Join(w.k.logsDir(), pod.Namespace+"_"+pod.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start test server: %w", err)
	}
	listening := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if !once && strings.Contains(line, "serving pod") {
				once = true
				close(listening)
			}
		}
		_, _ = io.Copy(logf, stdout)
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	select {
	case <-listening:
	case <-exited:
		return fmt.Errorf("test server exited at start (see %s)", logf.Name())
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("test server did not listen within 30s")
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		return ctx.Err()
	}
	w.proc = cmd
	w.procExit = exited
	return nil
}

// stopWorkload stops the test server: SIGTERM, then SIGKILL after grace.
func (w *podWorker) stopWorkload(grace time.Duration) {
	if w.probeCancel != nil {
		w.probeCancel()
		w.probeCancel = nil
	}
	if w.proc == nil {
		return
	}
	exited := w.procExit
	pgid := w.proc.Process.Pid
	w.proc, w.procExit = nil, nil
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if exited == nil {
		return
	}
	select {
	case <-exited:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
}

// removeSandbox runs CNI DEL (when del is set) and deletes the namespace.
func (w *podWorker) removeSandbox(del bool) error {
	var errs []error
	if w.sandboxID != "" && del {
		pod, _ := w.snapshot()
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
	if w.netns != "" && w.netns != w.k.cfg.NodeNetns {
		if out, err := exec.Command("ip", "netns", "delete", w.netns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete netns %s: %v: %s", w.netns, err, strings.TrimSpace(string(out))))
		}
	}
	w.netns, w.sandboxID, w.cniResult = "", "", nil
	pod, _ := w.snapshot()
	_ = os.Remove(RecordPath(w.k.cfg.StateDir, pod.Namespace, pod.Name))
	return errors.Join(errs...)
}

// terminate stops everything and, unless the pod is already gone from the
// API, deletes it for good.
func (w *podWorker) terminate(ctx context.Context, pod *v1.Pod, gone bool) {
	grace := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	if w.proc != nil {
		w.k.recorder.Eventf(pod, v1.EventTypeNormal, "Killing", "Stopping the test server")
	}
	w.stopWorkload(grace)
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

func (w *podWorker) writeRecord(pod *v1.Pod) error {
	rec := PodRecord{
		Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Node: w.k.cfg.NodeName,
		Netns: w.netns, HostNetwork: pod.Spec.HostNetwork, Sandbox: w.sandboxID, IPs: w.podIPs,
	}
	if w.proc != nil {
		rec.PID = w.proc.Process.Pid
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	p := RecordPath(w.k.cfg.StateDir, pod.Namespace, pod.Name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// buildStatus computes the pod's status from the worker's state.
func (w *podWorker) buildStatus(pod *v1.Pod) *v1.PodStatus {
	st := pod.Status.DeepCopy()
	st.Phase = v1.PodRunning
	st.HostIP = ""
	st.HostIPs = nil
	for i, ip := range w.k.cfg.NodeIPs {
		if i == 0 {
			st.HostIP = ip.String()
		}
		st.HostIPs = append(st.HostIPs, v1.HostIP{IP: ip.String()})
	}
	st.PodIP, st.PodIPs = "", nil
	for i, ip := range w.podIPs {
		if i == 0 {
			st.PodIP = ip
		}
		st.PodIPs = append(st.PodIPs, v1.PodIP{IP: ip})
	}
	st.StartTime = &w.startedAt
	st.QOSClass = v1.PodQOSBestEffort

	w.mu.Lock()
	allReady := true
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		ready := c.ReadinessProbe == nil || w.ready[c.Name]
		allReady = allReady && ready
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{
			Name:         c.Name,
			Image:        c.Image,
			ImageID:      "testbed://workload",
			ContainerID:  "testbed://" + w.sandboxID + "/" + c.Name,
			Ready:        ready,
			Started:      ptr.To(true),
			RestartCount: w.restarts,
			State:        v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: w.startedAt}},
		})
	}
	w.mu.Unlock()
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
	setCond(v1.PodReadyToStartContainers, true, "")
	setCond(v1.PodInitialized, true, "")
	setCond(v1.ContainersReady, allReady, "ContainersNotReady")
	setCond(v1.PodReady, allReady, "ContainersNotReady")
	return st
}

// syncStatus writes the pod's status if it changed.
func (w *podWorker) syncStatus(ctx context.Context, pod *v1.Pod) error {
	st := w.buildStatus(pod)
	if w.lastStatus != nil && statusEqual(w.lastStatus, st) && statusEqual(&pod.Status, st) {
		return nil
	}
	pods := w.k.cfg.Client.CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil
		}
		cur.Status = *w.buildStatus(cur)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		w.lastStatus = st
	}
	return err
}

// statusEqual compares the fields the kubelet sets, ignoring timestamps.
func statusEqual(a, b *v1.PodStatus) bool {
	strip := func(s *v1.PodStatus) *v1.PodStatus {
		c := s.DeepCopy()
		for i := range c.Conditions {
			c.Conditions[i].LastTransitionTime = metav1.Time{}
			c.Conditions[i].LastProbeTime = metav1.Time{}
		}
		c.StartTime = nil
		for i := range c.ContainerStatuses {
			c.ContainerStatuses[i].State = v1.ContainerState{}
		}
		return c
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// cni executes the CNI plugin in the node's namespace, like a runtime.
func (w *podWorker) cni(ctx context.Context, command string, pod *v1.Pod, prevResult json.RawMessage) ([]byte, error) {
	k := w.k
	conf := map[string]any{}
	for key, v := range w.cniConf {
		conf[key] = v
	}
	if prevResult != nil {
		conf["prevResult"] = prevResult
	}
	stdin, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	argv := append([]string{"netns", "exec", k.cfg.NodeNetns}, k.cfg.CNIPlugin...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+command,
		"CNI_CONTAINERID="+w.sandboxID,
		"CNI_NETNS="+nsutil.Path(w.netns),
		"CNI_IFNAME=eth0",
		"CNI_PATH="+filepath.Dir(k.cfg.CNIPlugin[0]),
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
			pod.Namespace, pod.Name, w.sandboxID, pod.UID),
	)
	cmd.Stdin = strings.NewReader(string(stdin))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	log := w.log.WithFields(logrus.Fields{"cni": command, "took": time.Since(start).Round(time.Millisecond)})
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if line != "" {
			log.Info("plugin: " + line)
		}
	}
	if err != nil {
		var e struct {
			Code    uint   `json:"code"`
			Msg     string `json:"msg"`
			Details string `json:"details"`
		}
		if json.Unmarshal([]byte(stdout.String()), &e) == nil && e.Msg != "" {
			return nil, fmt.Errorf("cni %s: error %d: %s (%s)", command, e.Code, e.Msg, e.Details)
		}
		return nil, fmt.Errorf("cni %s: %v: %s", command, err, strings.TrimSpace(stdout.String()+stderr.String()))
	}
	log.Debug("plugin succeeded")
	return []byte(stdout.String()), nil
}

// netConf returns the network configuration for the CNI plugin.
func (k *Kubelet) netConf(ctx context.Context, node *v1.Node) (map[string]any, error) {
	if k.cfg.CNIConfDir != "" {
		for {
			if c, err := readConfDir(k.cfg.CNIConfDir); err != nil || c != nil {
				return c, err
			}
			if !k.cfg.WaitForCNIConf {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("network not ready: no CNI configuration in %s: %w", k.cfg.CNIConfDir, ctx.Err())
			case <-time.After(50 * time.Millisecond): // polling the directory
			}
		}
	}
	return map[string]any{
		"cniVersion":   "1.0.0",
		"name":         "nodeflow",
		"type":         "nodeflow",
		"ovsdb":        k.cfg.OVSDB,
		"datapathType": k.cfg.DatapathType,
		"ipam": map[string]any{
			"subnets": node.Spec.PodCIDRs,
			"dataDir": k.cfg.CNIDataDir,
		},
	}, nil
}

// readConfDir reads the first *.conf or *.conflist file (by name) of dir; a
// list contributes its first plugin, with the list's name and version.
func readConfDir(dir string) (map[string]any, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".conf") && !strings.HasSuffix(name, ".conflist") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("cni config %s: %w", name, err)
		}
		if strings.HasSuffix(name, ".conflist") {
			plugins, _ := m["plugins"].([]any)
			if len(plugins) == 0 {
				return nil, fmt.Errorf("cni config %s: no plugins", name)
			}
			p, _ := plugins[0].(map[string]any)
			if p == nil {
				return nil, fmt.Errorf("cni config %s: plugins[0] is not an object", name)
			}
			p["name"], p["cniVersion"] = m["name"], m["cniVersion"]
			return p, nil
		}
		return m, nil
	}
	return nil, nil
}
