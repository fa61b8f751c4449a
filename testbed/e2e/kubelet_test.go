package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
)

// agnhostImage is the upstream test image the Kubernetes e2e tests use.
const agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.53"

// requireTool skips t when a program `make testbed-deps` builds (agnhost,
// coredns) is not there, or fails it where the testbed must be complete.
func requireTool(t *testing.T, name, path string) {
	t.Helper()
	if path != "" {
		return
	}
	msg := name + " is not built (testbed/tools/build.sh " + name + "; `make testbed-deps` builds it)"
	if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// kubectl runs kubectl against the shared testbed.
func kubectl(t *testing.T, e *env, args ...string) (string, error) {
	t.Helper()
	return testbedCmd(t, e, append([]string{"kubectl"}, args...)...)
}

// TestKubeletRunsUpstreamImages runs pods of the upstream test images on
// the kubelet stand-in and uses them as the Kubernetes e2e tests do: through
// the API server, kubectl exec, logs and port-forward, a Service in front of
// agnhost, probes and restart policies.
func TestKubeletRunsUpstreamImages(t *testing.T) {
	e := up(t)
	requireTool(t, "agnhost", testbed.DefaultAgnhost())
	requireTool(t, "coredns", testbed.DefaultCoreDNS())
	ns := createNamespace(t, e, "kubelet-e2e")
	ctx := context.Background()
	pods := e.client.CoreV1().Pods(ns)
	agnhost := func(name, node string, args ...string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "netexec"}},
			Spec: v1.PodSpec{
				NodeName:                      node,
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
				Containers: []v1.Container{{
					Name: "agnhost", Image: agnhostImage, Args: args,
					Ports: []v1.ContainerPort{{ContainerPort: 8080}},
					Env: []v1.EnvVar{
						{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "GREETING", Value: "hello-$(POD_NAME)"},
					},
					ReadinessProbe: &v1.Probe{PeriodSeconds: 1, ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}},
					LivenessProbe:  &v1.Probe{PeriodSeconds: 2, ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"/agnhost", "connect", "127.0.0.1:8080", "--timeout=1s"}}}},
				}},
			},
		}
	}
	if _, err := e.client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "greeting"}, Data: map[string]string{"hello": "world"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*v1.Pod{
		agnhost("netexec-1", "node1", "netexec", "--http-port=8080"),
		agnhost("netexec-2", "node2", "netexec", "--http-port=8080"),
		{ // runs once and fails, with output on both streams
			ObjectMeta: metav1.ObjectMeta{Name: "once"},
			Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{
				Name: "bb", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo out; echo err >&2; exit 3"},
			}}},
		},
		{ // an init container, then an app container whose liveness always fails
			ObjectMeta: metav1.ObjectMeta{Name: "crashy"},
			Spec: v1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
				InitContainers:                []v1.Container{{Name: "init", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo initialized"}}},
				Containers: []v1.Container{{
					Name: "pause", Image: agnhostImage,
					LivenessProbe: &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "exit 1"}}}},
				}},
			},
		},
		{ // two containers sharing an emptyDir; a ConfigMap; the service account's token
			ObjectMeta: metav1.ObjectMeta{Name: "volumes"},
			Spec: v1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
				Containers: []v1.Container{
					{Name: "writer", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo shared > /results/x && exec sleep 3600"},
						VolumeMounts: []v1.VolumeMount{{Name: "results", MountPath: "/results"}, {Name: "cm", MountPath: "/etc/cm"}}},
					{Name: "reader", Image: agnhostImage, VolumeMounts: []v1.VolumeMount{{Name: "results", MountPath: "/results"}}},
				},
				Volumes: []v1.Volume{
					{Name: "results", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
					{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "greeting"}}}},
				},
			},
		},
		{ // an image the testbed does not map
			ObjectMeta: metav1.ObjectMeta{Name: "unmapped"},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "httpd", Image: "registry.k8s.io/e2e-test-images/httpd:2.4.38-4"}}},
		},
	} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podIPs := map[string]string{}
	for _, name := range []string{"netexec-1", "netexec-2"} {
		eventually(t, 60*time.Second, name+" ready", func(ctx context.Context) error {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !ready(p.Status.Conditions) {
				return fmt.Errorf("%s: %s, not ready: %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
			}
			podIPs[name] = p.Status.PodIP
			return nil
		})
	}

	// exec: the pod's hostname, its environment, a non-zero exit code.
	if out, err := kubectl(t, e, "exec", "-n", ns, "netexec-1", "--", "hostname"); err != nil || strings.TrimSpace(out) != "netexec-1" {
		t.Errorf("exec hostname: %v: %q, want netexec-1", err, out)
	}
	if out, err := kubectl(t, e, "exec", "-n", ns, "netexec-1", "--", "sh", "-c", "echo $GREETING"); err != nil || strings.TrimSpace(out) != "hello-netexec-1" {
		t.Errorf("exec env: %v: %q, want hello-netexec-1", err, out)
	}
	if out, err := kubectl(t, e, "exec", "-n", ns, "netexec-1", "--", "sh", "-c", "exit 7"); err == nil || !strings.Contains(out, "exit code 7") {
		t.Errorf("exec exit 7: %v: %q", err, out)
	}
	// exec -it gets a terminal (script gives kubectl one of its own).
	if _, err := exec.LookPath("script"); err == nil {
		cmd := exec.Command("script", "-qec", fmt.Sprintf("%s --state-root %s --name %s kubectl exec -it -n %s netexec-1 -- tty",
			filepath.Join(e.binDir, "testbed"), e.stateRoot, e.name, ns), "/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "/dev/pts/") {
			t.Errorf("exec -it: %v: %q, want a terminal", err, out)
		}
	}
	// Pod to pod across nodes, from inside the upstream image.
	if out, err := kubectl(t, e, "exec", "-n", ns, "netexec-1", "--", "curl", "-s", "-m", "5", "http://"+podIPs["netexec-2"]+":8080/hostname"); err != nil || out != "netexec-2" {
		t.Errorf("curl netexec-2 from netexec-1: %v: %q", err, out)
	}

	// A Service in front of both, reached from a pod: both answer.
	svc, err := e.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "netexec"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "netexec"},
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	eventually(t, 60*time.Second, "both backends answer through the Service", func(context.Context) error {
		out, err := kubectl(t, e, "exec", "-n", ns, "netexec-1", "--", "/agnhost", "connect", "--protocol=tcp", svc.Spec.ClusterIP+":80", "--timeout=2s")
		if err != nil {
			return fmt.Errorf("connect: %v: %s", err, out)
		}
		out, err = kubectl(t, e, "exec", "-n", ns, "netexec-2", "--", "curl", "-s", "-m", "2", "http://"+svc.Spec.ClusterIP+"/hostname")
		if err != nil {
			return fmt.Errorf("curl: %v: %s", err, out)
		}
		seen[out] = true
		if !seen["netexec-1"] || !seen["netexec-2"] {
			return fmt.Errorf("answers so far: %v", seen)
		}
		return nil
	})

	// Cluster DNS: the Service's name, short and full, from a ClusterFirst
	// pod; a name outside the cluster through the testbed's DNS server.
	for _, name := range []string{"netexec", "netexec." + ns + ".svc.cluster.local"} {
		eventually(t, 30*time.Second, "resolve "+name, func(context.Context) error {
			out, err := kubectl(t, e, "exec", "-n", ns, "netexec-1", "--", "dig", "+short", "+search", name)
			if err != nil || strings.TrimSpace(out) != svc.Spec.ClusterIP {
				return fmt.Errorf("%v: %q, want %s", err, out, svc.Spec.ClusterIP)
			}
			return nil
		})
	}
	dns, err := testbed.NewDNSClient(e.state)
	if err != nil {
		t.Fatal(err)
	}
	if err := dns.Set("outside.kubelet-e2e.test", 5, netip.MustParseAddr("192.0.2.55")); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, e, "exec", "-n", ns, "netexec-2", "--", "dig", "+short", "outside.kubelet-e2e.test"); err != nil || strings.TrimSpace(out) != "192.0.2.55" {
		t.Errorf("resolve an outside name: %v: %q", err, out)
	}
	if out, err := kubectl(t, e, "exec", "-n", ns, "netexec-2", "--", "cat", "/etc/resolv.conf"); err != nil ||
		!strings.Contains(out, "search "+ns+".svc.cluster.local svc.cluster.local cluster.local") || !strings.Contains(out, "ndots:5") {
		t.Errorf("resolv.conf of a ClusterFirst pod: %v:\n%s", err, out)
	}

	// Volumes: what one container wrote, the other reads; the ConfigMap's
	// key; and the API server through the kubernetes Service with the
	// pod's own token. Nothing a pod writes reaches the node's root.
	eventually(t, 60*time.Second, "pod volumes ready", func(ctx context.Context) error {
		p, err := pods.Get(ctx, "volumes", metav1.GetOptions{})
		if err != nil || !ready(p.Status.Conditions) {
			return fmt.Errorf("%v: %+v", err, p.Status.ContainerStatuses)
		}
		return nil
	})
	if out, err := kubectl(t, e, "exec", "-n", ns, "volumes", "-c", "reader", "--", "cat", "/results/x"); err != nil || out != "shared\n" {
		t.Errorf("emptyDir shared between containers: %v: %q", err, out)
	}
	if out, err := kubectl(t, e, "exec", "-n", ns, "volumes", "-c", "writer", "--", "cat", "/etc/cm/hello"); err != nil || out != "world" {
		t.Errorf("configMap volume: %v: %q", err, out)
	}
	if out, err := kubectl(t, e, "exec", "-n", ns, "volumes", "-c", "reader", "--", "sh", "-c",
		`curl -s -m 5 --cacert /var/run/secrets/kubernetes.io/serviceaccount/ca.crt -H "Authorization: Bearer $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)" https://kubernetes.default.svc/api/v1/namespaces/`+ns+`/pods/volumes -o /dev/null -w "%{http_code}"`); err != nil || (out != "200" && out != "403") {
		t.Errorf("the API server from a pod, with its token: %v: %q, want an answer (200 or 403)", err, out)
	}
	if out, err := kubectl(t, e, "exec", "-n", ns, "volumes", "-c", "writer", "--", "touch", "/kubelet-e2e-private"); err != nil {
		t.Errorf("write to the pod's root: %v: %s", err, out)
	} else if _, err := os.Stat("/kubelet-e2e-private"); err == nil {
		os.Remove("/kubelet-e2e-private")
		t.Error("a file a pod wrote to its root is on the node's root")
	}

	// port-forward, through the API server and the kubelet.
	pf := exec.Command(filepath.Join(e.binDir, "testbed"), "--state-root", e.stateRoot, "--name", e.name,
		"kubectl", "port-forward", "-n", ns, "pod/netexec-2", ":8080")
	stdout, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	local := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]
			}
		}
	}()
	select {
	case port := <-local:
		resp, err := http.Get("http://127.0.0.1:" + port + "/hostname")
		if err != nil {
			t.Errorf("through port-forward: %v", err)
			break
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "netexec-2" {
			t.Errorf("through port-forward: %q, want netexec-2", body)
		}
	case <-time.After(30 * time.Second):
		t.Error("kubectl port-forward did not start forwarding within 30s")
	}

	// Logs, status and exit code of a container that ran once.
	eventually(t, 30*time.Second, "pod once failed with exit code 3", func(ctx context.Context) error {
		p, err := pods.Get(ctx, "once", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil ||
			p.Status.ContainerStatuses[0].State.Terminated.ExitCode != 3 {
			return fmt.Errorf("phase %s, statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		return nil
	})
	// The two streams are two pipes: their lines may interleave either way.
	if out, err := kubectl(t, e, "logs", "-n", ns, "once"); err != nil || (out != "out\nerr\n" && out != "err\nout\n") {
		t.Errorf("logs once: %v: %q, want both streams", err, out)
	}
	if out, err := kubectl(t, e, "logs", "-n", ns, "netexec-1", "--tail=1"); err != nil || strings.Count(out, "\n") != 1 {
		t.Errorf("logs --tail=1: %v: %q", err, out)
	}

	// A failing liveness probe restarts the container; its init container
	// ran first, once.
	eventually(t, 60*time.Second, "crashy restarted by its liveness probe", func(ctx context.Context) error {
		p, err := pods.Get(ctx, "crashy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil ||
			p.Status.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
			return fmt.Errorf("init container: %+v", p.Status.InitContainerStatuses)
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount < 1 {
			return fmt.Errorf("container: %+v", p.Status.ContainerStatuses)
		}
		return nil
	})
	if out, err := kubectl(t, e, "logs", "-n", ns, "crashy", "-c", "init"); err != nil || out != "initialized\n" {
		t.Errorf("logs of the init container: %v: %q", err, out)
	}

	// An image the testbed cannot run: Waiting, with the reason.
	eventually(t, 30*time.Second, "pod unmapped waits with ErrImagePull", func(ctx context.Context) error {
		p, err := pods.Get(ctx, "unmapped", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("statuses %+v", p.Status.ContainerStatuses)
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		if p.Status.Phase != v1.PodPending || w == nil || w.Reason != "ErrImagePull" || !strings.Contains(w.Message, "httpd:2.4.38-4") {
			return fmt.Errorf("phase %s, state %+v", p.Status.Phase, p.Status.ContainerStatuses[0].State)
		}
		return nil
	})

	// The kubelet API refuses a client the cluster's CA did not sign.
	out, err := testbedCmd(t, e, "exec", "node1", "--", "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "https://172.30.0.11:10250/containerLogs/"+ns+"/once/bb")
	if err != nil || out != "401" {
		t.Errorf("kubelet API without a client certificate: %v: %q, want 401", err, out)
	}

	if err := e.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "namespace "+ns+" gone", func(ctx context.Context) error {
		if _, err := e.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
}
