package kubelet

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// execIn runs argv inside container c, as `kubectl exec` and exec probes
// do: in the pod's namespaces, with the container's environment and
// working directory, the image's paths mapped. It returns the command's
// error (an *exec.ExitError for a non-zero exit).
func (w *podWorker) execIn(ctx context.Context, pod *v1.Pod, c *container, argv []string, in io.Reader, out, errw io.Writer) error {
	cmd, err := w.execCommand(ctx, pod, c, argv)
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
	return cmd.Run()
}

// execCommand builds the command execIn runs.
func (w *podWorker) execCommand(ctx context.Context, pod *v1.Pod, c *container, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("exec: empty command")
	}
	w.mu.Lock()
	sb := w.sandbox
	w.mu.Unlock()
	if sb == nil || !c.running() {
		return nil, fmt.Errorf("container %s is not running", c.spec.Name)
	}
	env, err := w.env(pod, c)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nsenter", inSandbox(sb, c.img.workingDir(c.spec.WorkingDir), c.img.mapCommand(argv))...)
	cmd.Env = environ(env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd, nil
}

// serviceEnv returns the variables a kubelet gives a container for the
// Services of its namespace (enableServiceLinks) and for the API server's
// Service, kubernetes in default (always): NAME_SERVICE_HOST,
// NAME_SERVICE_PORT, NAME_PORT and the Docker-link style NAME_PORT_P_PROTO*.
func (k *Kubelet) serviceEnv(pod *v1.Pod) map[string]string {
	env := map[string]string{}
	if k.services == nil {
		return env
	}
	svcs, err := k.services.List(labels.Everything())
	if err != nil {
		return env
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	for _, s := range svcs {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == v1.ClusterIPNone {
			continue
		}
		master := s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes"
		if !master && (!links || s.Namespace != pod.Namespace) {
			continue
		}
		name := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		env[name+"_SERVICE_HOST"] = s.Spec.ClusterIP
		if len(s.Spec.Ports) == 0 {
			continue
		}
		p0 := s.Spec.Ports[0]
		env[name+"_SERVICE_PORT"] = strconv.Itoa(int(p0.Port))
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				env[name+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))] = strconv.Itoa(int(p.Port))
			}
		}
		proto := strings.ToLower(string(p0.Protocol))
		env[name+"_PORT"] = fmt.Sprintf("%s://%s", proto, hostPort(s.Spec.ClusterIP, p0.Port))
		for _, p := range s.Spec.Ports {
			prefix := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(string(p.Protocol)))
			env[prefix] = fmt.Sprintf("%s://%s", strings.ToLower(string(p.Protocol)), hostPort(s.Spec.ClusterIP, p.Port))
			env[prefix+"_PROTO"] = strings.ToLower(string(p.Protocol))
			env[prefix+"_PORT"] = strconv.Itoa(int(p.Port))
			env[prefix+"_ADDR"] = s.Spec.ClusterIP
		}
	}
	return env
}

func hostPort(ip string, port int32) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + strconv.Itoa(int(port))
	}
	return ip + ":" + strconv.Itoa(int(port))
}

// clusterDNS returns the ClusterIP of the cluster DNS Service,
// kube-system/kube-dns, "" if there is none.
func (k *Kubelet) clusterDNS(context.Context) string {
	if k.services == nil {
		return ""
	}
	s, err := k.services.Services(metav1.NamespaceSystem).Get("kube-dns")
	if err != nil || s.Spec.ClusterIP == "" || s.Spec.ClusterIP == v1.ClusterIPNone {
		return ""
	}
	return s.Spec.ClusterIP
}

// envFrom returns the variables of a ConfigMap or Secret (envFrom).
func (k *Kubelet) envFrom(ctx context.Context, ns string, from v1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.ConfigMapRef != nil:
		cm, err := k.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
				return out, nil
			}
			return nil, fmt.Errorf("envFrom configMap %s: %w", from.ConfigMapRef.Name, err)
		}
		for key, v := range cm.Data {
			out[key] = v
		}
	case from.SecretRef != nil:
		s, err := k.cfg.Client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
				return out, nil
			}
			return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
		}
		for key, v := range s.Data {
			out[key] = string(v)
		}
	}
	return out, nil
}

// keyRef returns one key of a ConfigMap or Secret (valueFrom).
func (k *Kubelet) keyRef(ctx context.Context, ns string, s *v1.EnvVarSource) (string, error) {
	if r := s.ConfigMapKeyRef; r != nil {
		cm, err := k.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := cm.Data[r.Key]; ok {
				return v, nil
			}
			err = fmt.Errorf("no key %q", r.Key)
		}
		if r.Optional != nil && *r.Optional {
			return "", nil
		}
		return "", fmt.Errorf("configMap %s: %w", r.Name, err)
	}
	r := s.SecretKeyRef
	sec, err := k.cfg.Client.CoreV1().Secrets(ns).Get(ctx, r.Name, metav1.GetOptions{})
	if err == nil {
		if v, ok := sec.Data[r.Key]; ok {
			return string(v), nil
		}
		err = fmt.Errorf("no key %q", r.Key)
	}
	if r.Optional != nil && *r.Optional {
		return "", nil
	}
	return "", fmt.Errorf("secret %s: %w", r.Name, err)
}
