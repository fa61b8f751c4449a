package kubelet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestResolveImages(t *testing.T) {
	m := Images{Self: "/bin/testbed", Agnhost: "/cache/agnhost", Busybox: "/usr/bin/busybox", BinDir: "/state/images"}
	for _, tc := range []struct {
		ref, name string
		argv      []string // for no command and no args
	}{
		{"registry.k8s.io/e2e-test-images/agnhost:2.53", "agnhost", []string{"/cache/agnhost", "pause"}},
		{"k8s.gcr.io/e2e-test-images/agnhost@sha256:0123", "agnhost", []string{"/cache/agnhost", "pause"}},
		{"registry.k8s.io/pause:3.10", "pause", []string{"/bin/testbed", "pause"}},
		{"busybox", "busybox", []string{"sh"}},
		{"registry.k8s.io/e2e-test-images/busybox:1.37.0-1", "busybox", []string{"sh"}},
		{"testbed/web", "testbed workload", []string{"/bin/testbed", "serve"}},
	} {
		img, err := m.Resolve(tc.ref)
		if err != nil {
			t.Fatalf("%s: %v", tc.ref, err)
		}
		if img.Name != tc.name {
			t.Errorf("%s: image %q, want %q", tc.ref, img.Name, tc.name)
		}
		if img.Builtin {
			continue
		}
		argv, err := img.argv(nil, nil, nil)
		if err != nil || !slices.Equal(argv, tc.argv) {
			t.Errorf("%s: argv %q (%v), want %q", tc.ref, argv, err, tc.argv)
		}
	}
	for _, ref := range []string{"registry.k8s.io/e2e-test-images/httpd:2.4.38-4", "nginx"} {
		_, err := m.Resolve(ref)
		if !errors.Is(err, ErrImageNotMapped) || !strings.Contains(err.Error(), ref) {
			t.Errorf("%s: error %v, want ErrImageNotMapped naming the image", ref, err)
		}
	}
	if _, err := (Images{}).Resolve("registry.k8s.io/e2e-test-images/agnhost:2.53"); !errors.Is(err, ErrImageNotMapped) || !strings.Contains(err.Error(), "not built") {
		t.Errorf("agnhost without a binary: %v", err)
	}
}

func TestArgvAsKubelet(t *testing.T) {
	img := Image{Name: "agnhost", Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Files: map[string][]string{"/agnhost": {"/cache/agnhost"}}}
	env := map[string]string{"PORT": "8080", "POD": "web-0"}
	for _, tc := range []struct {
		command, args, want []string
	}{
		{nil, []string{"netexec", "--http-port=$(PORT)"}, []string{"/cache/agnhost", "netexec", "--http-port=8080"}},
		{[]string{"/agnhost", "serve-hostname"}, nil, []string{"/cache/agnhost", "serve-hostname"}},
		{[]string{"sh", "-c"}, []string{"echo $(POD) $(MISSING) $$(POD) $$$(POD)"}, []string{"sh", "-c", "echo web-0 $(MISSING) $(POD) $web-0"}},
	} {
		got, err := img.argv(tc.command, tc.args, env)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("command %q args %q: %q (%v), want %q", tc.command, tc.args, got, err, tc.want)
		}
	}
	if _, err := (Image{Name: "empty"}).argv(nil, nil, nil); err == nil {
		t.Error("no entrypoint and no command: no error")
	}
}

func TestRestartable(t *testing.T) {
	pod := func(p v1.RestartPolicy) *v1.Pod { return &v1.Pod{Spec: v1.PodSpec{RestartPolicy: p}} }
	app, initC := &container{}, &container{init: true}
	sidecar := &container{init: true, spec: v1.Container{RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}}
	for _, tc := range []struct {
		policy v1.RestartPolicy
		c      *container
		code   int32
		want   bool
	}{
		{v1.RestartPolicyAlways, app, 0, true},
		{v1.RestartPolicyAlways, initC, 0, false},
		{v1.RestartPolicyAlways, initC, 1, true},
		{v1.RestartPolicyOnFailure, app, 0, false},
		{v1.RestartPolicyOnFailure, app, 2, true},
		{v1.RestartPolicyNever, app, 2, false},
		{v1.RestartPolicyNever, initC, 1, false},
		{v1.RestartPolicyNever, sidecar, 0, true},
	} {
		if got := restartable(pod(tc.policy), tc.c, tc.code); got != tc.want {
			t.Errorf("%s, init %v, exit %d: restartable %v, want %v", tc.policy, tc.c.init, tc.code, got, tc.want)
		}
	}
}

func TestPodFiles(t *testing.T) {
	dir := t.TempDir()
	nodeConf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(nodeConf, []byte("nameserver 10.255.255.53\nsearch example.test\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k := New(Config{NodeName: "node1", ResolvConf: nodeConf})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns1"}, Spec: v1.PodSpec{
		Subdomain: "web", HostAliases: []v1.HostAlias{{IP: "192.0.2.7", Hostnames: []string{"foo", "bar"}}},
		DNSConfig: &v1.PodDNSConfig{Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}},
	}}
	w := newPodWorker(k, pod)
	w.podIPs = []string{"10.244.0.5", "fd00:10:244::5"}
	hosts, err := w.hostsFile(pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10.244.0.5\tweb-0.web.ns1.svc.cluster.local\tweb-0\n", "fd00:10:244::5\tweb-0.web.ns1.svc.cluster.local\tweb-0\n", "192.0.2.7\tfoo\tbar\n", "127.0.0.1\tlocalhost\n"} {
		if !strings.Contains(string(hosts), want) {
			t.Errorf("hosts file lacks %q:\n%s", want, hosts)
		}
	}
	// No cluster DNS Service: the node's resolver, then dnsConfig.
	resolv, err := k.resolvConf(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := "nameserver 10.255.255.53\nsearch example.test\noptions edns0 ndots:2\n"; string(resolv) != want {
		t.Errorf("resolv.conf:\n%s\nwant:\n%s", resolv, want)
	}
	if h := podHostname(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 62) + "-b"}}, "node1"); len(h) > 63 || strings.HasSuffix(h, "-") {
		t.Errorf("long pod name: hostname %q", h)
	}
	if h := podHostname(&v1.Pod{Spec: v1.PodSpec{HostNetwork: true}}, "node1"); h != "node1" {
		t.Errorf("hostNetwork pod: hostname %q, want the node's", h)
	}
}

func TestLogs(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	out := &logWriter{mu: &mu, f: f, stream: "stdout"}
	errw := &logWriter{mu: &mu, f: f, stream: "stderr"}
	_, _ = out.Write([]byte("one\ntw"))
	_, _ = errw.Write([]byte("oops\n"))
	_, _ = out.Write([]byte("o\nthree"))
	out.flush()
	read := func(o logOptions) string {
		t.Helper()
		g, err := os.Open(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		var b strings.Builder
		writeLogs(context.Background(), &b, g, o, nil)
		return b.String()
	}
	if got, want := read(logOptions{tail: -1}), "one\noops\ntwo\nthree"; got != want {
		t.Errorf("logs %q, want %q", got, want)
	}
	if got, want := read(logOptions{tail: 2}), "two\nthree"; got != want {
		t.Errorf("tail 2: %q, want %q", got, want)
	}
	if got, want := read(logOptions{tail: -1, limit: 6}), "one\noo"; got != want {
		t.Errorf("limit 6: %q, want %q", got, want)
	}
	if got := read(logOptions{tail: -1, since: time.Now().Add(time.Hour)}); got != "" {
		t.Errorf("since the future: %q", got)
	}
	got := read(logOptions{tail: 1, timestamps: true})
	if ts, text, _ := strings.Cut(got, " "); text != "three" {
		t.Errorf("timestamps: %q", got)
	} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("timestamps: %q: %v", got, err)
	}
	if _, err := parseLogOptions(map[string][]string{"tailLines": {"x"}}); err == nil {
		t.Error("tailLines x: no error")
	}
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"run", "etc/real", "usr/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"var/run": "/run", "etc/alias": "real", "lib": "usr/lib", "loop": "/loop"} {
		_ = os.MkdirAll(filepath.Dir(filepath.Join(root, link)), 0o755)
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for in, want := range map[string]string{
		"/var/run/secrets/token": "/run/secrets/token", // absolute link: inside root, not the node's /run
		"/etc/alias/x":           "/etc/real/x",
		"/lib/../etc":            "/usr/etc",
		"/results":               "/results",
		"../../escape":           "/escape",
	} {
		got, err := resolveIn(root, in)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("resolveIn(%q) = %q, %v; want %q", in, got, err, filepath.Join(root, want))
		}
	}
	if _, err := resolveIn(root, "/loop/x"); err == nil {
		t.Error("a link to itself: no error")
	}
}
