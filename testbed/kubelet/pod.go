package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

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

func (w *podWorker) writeRecord(pod *v1.Pod) error {
	rec := PodRecord{
		Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Node: w.k.cfg.NodeName,
		HostNetwork: pod.Spec.HostNetwork, Sandbox: w.sandboxID,
	}
	w.mu.Lock()
	if w.sandbox != nil {
		rec.PID = w.sandbox.pid
	}
	rec.Netns, rec.IPs = w.netns, w.podIPs
	w.mu.Unlock()
	b, _ := json.MarshalIndent(rec, "", "  ")
	p := RecordPath(w.k.cfg.StateDir, pod.Namespace, pod.Name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
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
