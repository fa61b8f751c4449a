package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"nodeflow/deploy"
	"nodeflow/internal/ociimage"
)

// podman runs the image with its own storage, so that the test touches
// neither the machine's images nor its containers. runc, not crun: crun
// refuses machines whose cgroups are in hybrid mode.
type podman struct {
	root, runroot string
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
				t.Fatalf("%s is missing (make deps installs it): %v", tool, err)
			}
			t.Skipf("%s is missing (make deps installs it)", tool)
		}
	}
	dir := t.TempDir()
	p := &podman{root: filepath.Join(dir, "root"), runroot: filepath.Join(dir, "run")}
	t.Cleanup(func() {
		// The image's layers are mounted under root: remove them with
		// podman before the directory goes.
		_, _ = p.run("rm", "--all", "--force")
		_, _ = p.run("rmi", "--all", "--force")
	})
	return p
}

func (p *podman) command(args ...string) *exec.Cmd {
	global := []string{"--root", p.root, "--runroot", p.runroot, "--runtime", "runc",
		"--cgroup-manager", "cgroupfs", "--events-backend", "file"}
	return exec.Command("podman", append(global, args...)...)
}

func (p *podman) run(args ...string) (string, error) {
	out, err := p.command(args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ulimits are limits the container may have: podman asks for large ones
// by default, which a process without CAP_SYS_RESOURCE may not raise to.
func ulimits() []string {
	var out []string
	for _, l := range []struct {
		name     string
		resource int
		most     uint64
	}{{"nofile", unix.RLIMIT_NOFILE, 16384}, {"nproc", unix.RLIMIT_NPROC, 16384}} {
		var r unix.Rlimit
		n := l.most
		if unix.Getrlimit(l.resource, &r) == nil && r.Cur < n {
			n = r.Cur
		}
		out = append(out, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	return out
}

// buildTestImage builds this tree's image for this machine's platform, as
// `make image` does for each (a static binary, ociimage), and returns its
// OCI archive and the version stamped into it.
func buildTestImage(t *testing.T) (archive, version string) {
	t.Helper()
	dir := t.TempDir()
	version = "e2e-image"
	bin := filepath.Join(dir, "nodeflow")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "nodeflow/cmd/nodeflow")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	idx, err := ociimage.Build(ociimage.Options{
		Binaries: []ociimage.Binary{{Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, Path: bin}},
		Version:  version, Created: time.Unix(0, 0).UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(dir, "layout")
	if err := ociimage.WriteLayout(layout, idx, "nodeflow:"+version); err != nil {
		t.Fatal(err)
	}
	archive = filepath.Join(dir, "nodeflow-image.tar")
	if err := ociimage.WriteArchive(archive, layout, time.Unix(0, 0).UTC()); err != nil {
		t.Fatal(err)
	}
	return archive, version
}

// agentManifest reads the agent's ConfigMap and DaemonSet from deploy/.
func agentManifest(t *testing.T) (*corev1.ConfigMap, *appsv1.DaemonSet) {
	t.Helper()
	b, err := deploy.All.ReadFile("agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	var ds *appsv1.DaemonSet
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("deploy/agent.yaml: %v", err)
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			cm = o
		case *appsv1.DaemonSet:
			ds = o
		}
	}
	if cm == nil || ds == nil {
		t.Fatal("deploy/agent.yaml: no ConfigMap or no DaemonSet")
	}
	return cm, ds
}

// daemonSetRun turns one container of the DaemonSet into podman run's
// arguments for node m: its mounts (each host path mapped to the
// testbed's stand-in for it: the node's OVS run directory for
// /var/run/openvswitch, and so on), its environment, privileges and
// arguments. A host path the test does not know fails the test, so that
// the test follows the manifest.
func daemonSetRun(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, cm *corev1.ConfigMap, hostPaths map[string]string, configDir, node string) []string {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Fatal("the DaemonSet is not on the host's network")
	}
	sources := map[string]string{}
	for _, v := range spec.Volumes {
		switch {
		case v.HostPath != nil:
			p, ok := hostPaths[v.HostPath.Path]
			if !ok {
				t.Fatalf("the DaemonSet mounts host path %s, which this test does not map", v.HostPath.Path)
			}
			sources[v.Name] = p
		case v.ConfigMap != nil && v.ConfigMap.Name == cm.Name:
			sources[v.Name] = configDir
		default:
			t.Fatalf("the DaemonSet's volume %s is of a kind this test does not map", v.Name)
		}
	}
	args := securityArgs(c.SecurityContext)
	for _, vm := range c.VolumeMounts {
		src, ok := sources[vm.Name]
		if !ok {
			t.Fatalf("container %s mounts unknown volume %s", c.Name, vm.Name)
		}
		opt := ""
		if vm.ReadOnly {
			opt = ":ro"
		}
		args = append(args, "--volume", src+":"+vm.MountPath+opt)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			args = append(args, "--env", e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			args = append(args, "--env", e.Name+"="+node)
		case e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == cm.Name:
			if v, ok := cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]; ok {
				args = append(args, "--env", e.Name+"="+v)
			} else if o := e.ValueFrom.ConfigMapKeyRef.Optional; o == nil || !*o {
				t.Fatalf("env %s: the ConfigMap has no key %s", e.Name, e.ValueFrom.ConfigMapKeyRef.Key)
			}
		default:
			t.Fatalf("env %s: a source this test does not map", e.Name)
		}
	}
	return args
}

// securityArgs are podman's equivalents of a container's security
// context: the user, privileges, capabilities, no privilege escalation and
// a read-only root.
func securityArgs(sc *corev1.SecurityContext) []string {
	if sc == nil {
		return nil
	}
	var args []string
	if sc.RunAsUser != nil {
		args = append(args, "--user", strconv.FormatInt(*sc.RunAsUser, 10))
	}
	if sc.Privileged != nil && *sc.Privileged {
		args = append(args, "--privileged")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if caps := sc.Capabilities; caps != nil {
		for _, c := range caps.Drop {
			args = append(args, "--cap-drop", string(c))
		}
		for _, c := range caps.Add {
			args = append(args, "--cap-add", string(c))
		}
	}
	return args
}

// TestImageAgent runs the agent from nodeflow's image, as the DaemonSet
// of deploy/agent.yaml runs it, in place of one node's agent: podman
// loads the image built as `make image` builds it; the init container's
// command installs the CNI plugin; the agent container runs in
// the node's network namespace (the node's host network) with the
// DaemonSet's mounts, environment, arguments and security context (not
// privileged: NET_ADMIN alone, a read-only root), its configuration from
// the manifest's ConfigMap, and in-cluster credentials: a token of its
// ServiceAccount where the kubelet mounts it, and the API server's
// address from the ConfigMap's apiServerHost and apiServerPort, as a
// cluster without kube-proxy sets them. Traffic through a Service flows
// throughout, from the node's own agent to the container and back.
func TestImageAgent(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	pm := newPodman(t)
	archive, version := buildTestImage(t)
	out, err := pm.run("load", "--input", archive)
	if err != nil {
		t.Fatal(err)
	}
	image := ociimage.FullName("nodeflow:" + version)
	if !strings.Contains(out, image) {
		t.Fatalf("podman load: no %s in\n%s", image, out)
	}
	cm, ds := agentManifest(t)
	if len(ds.Spec.Template.Spec.InitContainers) != 1 || len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the DaemonSet has %d init containers and %d containers, want 1 and 1",
			len(ds.Spec.Template.Spec.InitContainers), len(ds.Spec.Template.Spec.Containers))
	}
	m, _ := e.state.Member("node1")
	ags := newAgents(t, e)
	// A test before may have left a node without its agent.
	for _, n := range []string{"node1", "node2"} {
		ags.ensure(n)
	}

	// What the ConfigMap holds, with the API server's address that an
	// operator sets for a cluster without kube-proxy: here the API
	// server's proxy on the node's loopback.
	cm = cm.DeepCopy()
	cm.Data["apiServerHost"] = "127.0.0.1"
	cm.Data["apiServerPort"] = strconv.Itoa(6443)
	configDir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(configDir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The ServiceAccount's token, where the kubelet would mount it.
	saDir := t.TempDir()
	tr, err := e.client.CoreV1().ServiceAccounts("nodeflow").CreateToken(context.Background(), ds.Spec.Template.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(e.state.Dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte("nodeflow")} {
		if err := os.WriteFile(filepath.Join(saDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cniBin := t.TempDir()
	hostPaths := map[string]string{
		"/var/run/openvswitch": m.OVSRundir,
		"/run/nodeflow":        t.TempDir(),
		"/etc/cni/net.d":       filepath.Join(m.Dir, "net.d"),
		"/opt/cni/bin":         cniBin,
		"/var/lib/cni":         t.TempDir(),
		"/etc/resolv.conf":     filepath.Join(e.state.Dir, "resolv.conf"),
		// What it shows follows the reader's network namespace: the node's
		// own, in the container.
		"/proc/sys/net": "/proc/sys/net",
	}

	t.Run("install-cni", func(t *testing.T) {
		c := ds.Spec.Template.Spec.InitContainers[0]
		args := append([]string{"run", "--rm"}, ulimits()...)
		args = append(args, daemonSetRun(t, ds, c, cm, hostPaths, configDir, m.Name)...)
		args = append(args, "--entrypoint", c.Command[0], image)
		if _, err := pm.run(append(args, append(c.Command[1:], c.Args...)...)...); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(cniBin, "nodeflow"), "version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "nodeflow "+version+" ") {
			t.Fatalf("the installed plugin: %v: %s", err, out)
		}
	})

	ns := createNamespace(t, e, "e2e-image")
	clients, vips := serviceUnderTraffic(t, e, ns)
	traffic := startServiceTraffic(t, clients, vips)
	ags.stop(m.Name)
	t.Cleanup(func() { ags.ensure(m.Name) })

	// A sysctl the agent sets, put back as the kernel has it: the agent
	// in its container must write it through the mounted /proc/sys/net.
	const arpIgnore = "net.ipv4.conf.eth0.arp_ignore"
	if out, err := exec.Command("ip", "netns", "exec", m.Netns, "sysctl", "-w", arpIgnore+"=0").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	args := append([]string{"run", "--rm", "--name", "nodeflow-agent-" + m.Name, "--network", "ns:/run/netns/" + m.Netns}, ulimits()...)
	args = append(args, daemonSetRun(t, ds, c, cm, hostPaths, configDir, m.Name)...)
	args = append(args,
		"--volume", saDir+":/var/run/secrets/kubernetes.io/serviceaccount:ro",
		// The testbed's CNI plugin runs on the host with the testbed's
		// IPAM directory, whose path the agent writes into the CNI
		// configuration: the same path inside and out, as /var/lib/cni is
		// on a node.
		"--volume", filepath.Join(m.Dir, "ipam")+":"+filepath.Join(m.Dir, "ipam"),
		"--env", "NODEFLOW_CNI_DATA_DIR="+filepath.Join(m.Dir, "ipam"))
	args = append(args, image)
	args = append(args, append(c.Command, c.Args...)...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "agent-container.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := pm.command(args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	recordAgent(e, m, cmd, func() { logf.Close() })
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("agent container log:\n%s", b)
		}
	}()
	eventually(t, 90*time.Second, "the agent in its container ready", func(ctx context.Context) error {
		if err := agentReady(ctx, m); err != nil {
			return err
		}
		if n := versionNote(t, m); n.Agent != version {
			return fmt.Errorf("br0's version note names agent %q", n.Agent)
		}
		return nil
	})
	traffic.settle(t, "the agent in its container")
	if out, err := exec.Command("ip", "netns", "exec", m.Netns, "sysctl", "-n", arpIgnore).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("%s after the agent in its container started: %s (%v), want 1", arpIgnore, out, err)
	}
	checkMetrics(t, m)
	// A Service created while the container runs works through it.
	web2 := createService(t, e, ns, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web2"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: webPorts},
	})
	for _, cl := range clients {
		if cl.node == m.Name {
			eventually(t, 20*time.Second, "the new Service from "+cl.node, func(ctx context.Context) error {
				_, _, err := httpGet(ctx, cl.netns, svcAddrs(t, web2)[0], 80)
				return err
			})
		}
	}
	ags.stop(m.Name)
	ags.ensure(m.Name)
	traffic.settle(t, "the node's agent back")
	traffic.finish(t, "the agent to its container and back")
}
