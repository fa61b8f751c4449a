package kubelet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// A pod's sandbox is one process, as a pause container is: it runs in the
// pod's network namespace, in UTS and mount namespaces of its own, where it
// sets the pod's hostname and builds the pod's root: an overlay of the
// node's root (writes go to the pod's own upper layer), the node's other
// mounts bound in (shared with the node), the pod's /etc/hosts and
// /etc/resolv.conf, and its volumes mounted. Then it changes root into
// it. Every container of the pod, and every exec into it, enters its
// three namespaces and its root (nsenter --target --root).

// sandboxReady is the line a sandbox prints, with its pid, once it is set up.
const sandboxReady = "sandbox ready pid="

// SandboxSpec is what RunSandbox sets up.
type SandboxSpec struct {
	// Hostname is the pod's hostname.
	Hostname string
	// RootDir holds the overlay's upper, work and merged directories.
	RootDir string
	// Files are TARGET=SOURCE: SOURCE's content becomes the root's TARGET.
	Files []string
	// Dirs are directories to make in the root.
	Dirs []string
	// Mounts are TARGET=SOURCE or TARGET=SOURCE:ro, bound into the root.
	Mounts []string
}

// RunSandbox is the sandbox process (the testbed's `sandbox` subcommand,
// started under `unshare --uts --mount`): it sets the hostname, builds the
// pod's root and changes into it, reports ready on out, and waits for
// SIGTERM.
func RunSandbox(spec SandboxSpec, out io.Writer) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("sandbox: set hostname %q: %w", spec.Hostname, err)
		}
	}
	if spec.RootDir != "" {
		root, err := buildRoot(spec)
		if err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		if err := unix.Chroot(root); err != nil {
			return fmt.Errorf("sandbox: chroot %s: %w", root, err)
		}
		if err := os.Chdir("/"); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	fmt.Fprintf(out, "%s%d\n", sandboxReady, os.Getpid())
	<-sig
	return nil
}

// buildRoot makes the pod's root under spec.RootDir and returns it.
func buildRoot(spec SandboxSpec) (string, error) {
	upper, work, root := filepath.Join(spec.RootDir, "upper"), filepath.Join(spec.RootDir, "work"), filepath.Join(spec.RootDir, "merged")
	for _, d := range []string{upper, work, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := unix.Mount("overlay", root, "overlay", 0, "lowerdir=/,upperdir="+upper+",workdir="+work); err != nil {
		return "", fmt.Errorf("overlay of / on %s: %w", root, err)
	}
	// The overlay shows the root file system alone: bind the other mounts
	// (/proc, /sys, /dev, /run, ...) with what is mounted below them.
	tops, err := topMounts()
	if err != nil {
		return "", err
	}
	for _, m := range tops {
		target := filepath.Join(root, m)
		if err := mkTarget(target, m); err != nil {
			return "", err
		}
		if err := unix.Mount(m, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", fmt.Errorf("bind %s: %w", m, err)
		}
	}
	for _, f := range spec.Files {
		target, source, ok := strings.Cut(f, "=")
		if !ok {
			return "", fmt.Errorf("file %q is not TARGET=SOURCE", f)
		}
		data, err := os.ReadFile(source)
		if err != nil {
			return "", err
		}
		// The node's file may be a link (resolv.conf often is): replace
		// it in the pod's layer, never write through it.
		dir, err := resolveIn(root, filepath.Dir(target))
		if err != nil {
			return "", err
		}
		p := filepath.Join(dir, filepath.Base(target))
		_ = os.Remove(p)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return "", err
		}
	}
	for _, d := range spec.Dirs {
		p, err := resolveIn(root, d)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(p, 0o777); err != nil {
			return "", err
		}
	}
	for _, m := range spec.Mounts {
		target, source, ok := strings.Cut(m, "=")
		if !ok {
			return "", fmt.Errorf("mount %q is not TARGET=SOURCE", m)
		}
		source, ro := strings.CutSuffix(source, ":ro")
		p, err := resolveIn(root, target)
		if err != nil {
			return "", err
		}
		if err := mkTarget(p, source); err != nil {
			return "", err
		}
		if err := unix.Mount(source, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", fmt.Errorf("mount %s on %s: %w", source, target, err)
		}
		if ro {
			if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return "", fmt.Errorf("mount %s read-only: %w", target, err)
			}
		}
	}
	return root, nil
}

// resolveIn resolves path inside root as if root were /: symbolic links
// are followed within root (an absolute link starts again at root), so that
// nothing outside root is ever made or mounted on. Components that do not
// exist are kept as they are.
func resolveIn(root, path string) (string, error) {
	rest := strings.Split(strings.Trim(path, "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		link, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			cur = next // not a link, or not there yet
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many links", path)
		}
		if filepath.IsAbs(link) {
			cur = "/"
		}
		rest = append(strings.Split(strings.Trim(link, "/"), "/"), rest...)
	}
	return filepath.Join(root, cur), nil
}

// mkTarget makes a mount point for source at target: a directory, or an
// empty file for a file.
func mkTarget(target, source string) error {
	if fi, err := os.Stat(source); err == nil && !fi.IsDir() {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}
	return os.MkdirAll(target, 0o755)
}

// topMounts returns the mount points below / that no other mount point
// (but /) contains, from /proc/self/mountinfo.
func topMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var all []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] == "/" {
			continue
		}
		all = append(all, unescapeMount(f[4]))
	}
	sort.Strings(all)
	var tops []string
	for _, m := range all {
		if len(tops) > 0 {
			last := tops[len(tops)-1]
			if m == last || strings.HasPrefix(m, last+"/") {
				continue
			}
		}
		tops = append(tops, m)
	}
	return tops, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// RunPause is the pause image's program: it waits for SIGTERM or SIGINT
// and exits 0.
func RunPause() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

// sandbox is a running sandbox process.
type sandbox struct {
	cmd    *exec.Cmd
	pid    int
	exited chan struct{}
}

// podDir is where the kubelet keeps a pod's files (hosts, resolv.conf).
func (k *Kubelet) podDir(uid string) string {
	return filepath.Join(k.cfg.StateDir, "pods", "by-uid", uid)
}

// startSandbox writes the pod's hosts and resolv.conf and starts its
// sandbox process in netns.
func (w *podWorker) startSandbox(ctx context.Context, pod *v1.Pod, cs []*container) (*sandbox, error) {
	dir := w.k.podDir(string(pod.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hosts, resolv := filepath.Join(dir, "hosts"), filepath.Join(dir, "resolv.conf")
	hostsData, err := w.hostsFile(pod)
	if err != nil {
		return nil, err
	}
	resolvData, err := w.k.resolvConf(ctx, pod)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(hosts, hostsData, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(resolv, resolvData, 0o644); err != nil {
		return nil, err
	}
	mounts, err := w.prepareVolumes(ctx, pod)
	if err != nil {
		w.k.recorder.Eventf(pod, v1.EventTypeWarning, "FailedMount", "%v", err)
		return nil, err
	}
	argv := []string{"netns", "exec", w.netns, "unshare", "--uts", "--mount", "--propagation", "private", "--",
		w.k.cfg.Images.Self, "sandbox", "--hostname", podHostname(pod, w.k.cfg.NodeName), "--root-dir", filepath.Join(dir, "rootfs"),
		"--file", "/etc/hosts=" + hosts, "--file", "/etc/resolv.conf=" + resolv}
	// The images' own files first, the volumes over them.
	images := map[string]string{}
	for _, c := range cs {
		for p, src := range c.img.rootFiles() {
			images[p] = src
		}
	}
	paths := make([]string, 0, len(images))
	for p := range images {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if images[p] == "" {
			argv = append(argv, "--dir", p)
		} else {
			argv = append(argv, "--mount", p+"="+images[p]+":ro")
		}
	}
	for _, m := range mounts {
		src := m.source
		if m.readOnly {
			src += ":ro"
		}
		argv = append(argv, "--mount", m.target+"="+src)
	}
	cmd := exec.Command("ip", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	sb := &sandbox{cmd: cmd, exited: make(chan struct{})}
	pid := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), sandboxReady); ok {
				n, _ := strconv.Atoi(p)
				pid <- n
			}
		}
		_ = cmd.Wait()
		close(sb.exited)
	}()
	select {
	case sb.pid = <-pid:
		return sb, nil
	case <-sb.exited:
		return nil, fmt.Errorf("sandbox exited at start: %s", strings.TrimSpace(stderr.String()))
	case <-time.After(30 * time.Second):
		sb.stop()
		return nil, fmt.Errorf("sandbox not ready within 30s")
	case <-ctx.Done():
		sb.stop()
		return nil, ctx.Err()
	}
}

// stop ends the sandbox process and waits for it.
func (sb *sandbox) stop() {
	if sb == nil {
		return
	}
	_ = syscall.Kill(-sb.cmd.Process.Pid, syscall.SIGKILL)
	<-sb.exited
}

// podHostname is the hostname a pod's containers see: spec.hostname or
// the pod's name (at most 63 characters, as a kubelet truncates it); a
// hostNetwork pod sees its node's name.
func podHostname(pod *v1.Pod, node string) string {
	if pod.Spec.HostNetwork {
		return node
	}
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// hostsFile is the pod's /etc/hosts, as a kubelet writes it: localhost, the
// pod's addresses under its hostname (and FQDN with a subdomain), and its
// hostAliases. A hostNetwork pod gets the node's file.
func (w *podWorker) hostsFile(pod *v1.Pod) ([]byte, error) {
	if pod.Spec.HostNetwork {
		return os.ReadFile("/etc/hosts")
	}
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (testbed).\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
	host := podHostname(pod, w.k.cfg.NodeName)
	names := host
	if pod.Spec.Subdomain != "" {
		names = fmt.Sprintf("%s.%s.%s.svc.%s\t%s", host, pod.Spec.Subdomain, pod.Namespace, clusterDomain, host)
	}
	for _, ip := range w.podIPs {
		fmt.Fprintf(&b, "%s\t%s\n", ip, names)
	}
	for _, a := range pod.Spec.HostAliases {
		fmt.Fprintf(&b, "\n# Entries added by HostAliases.\n%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return []byte(b.String()), nil
}

// clusterDomain is the cluster's DNS domain.
const clusterDomain = "cluster.local"

// resolvConf is the pod's /etc/resolv.conf, after its dnsPolicy and
// dnsConfig: ClusterFirst (and ClusterFirstWithHostNet for a hostNetwork
// pod) points at the cluster DNS Service, kube-system/kube-dns, with the
// cluster's search domains and ndots:5; without that Service, and for
// Default, the node's resolver configuration (as a kubelet falls back when
// it has no cluster DNS); None takes dnsConfig alone.
func (k *Kubelet) resolvConf(ctx context.Context, pod *v1.Pod) ([]byte, error) {
	var servers, searches, options []string
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	cluster := policy == v1.DNSClusterFirstWithHostNet || (policy == v1.DNSClusterFirst && !pod.Spec.HostNetwork)
	if cluster {
		if dns := k.clusterDNS(ctx); dns != "" {
			servers = []string{dns}
			searches = []string{pod.Namespace + ".svc." + clusterDomain, "svc." + clusterDomain, clusterDomain}
			options = []string{"ndots:5"}
		} else {
			cluster = false
		}
	}
	if !cluster && policy != v1.DNSNone {
		node, err := os.ReadFile(k.nodeResolvConf())
		if err != nil {
			return nil, fmt.Errorf("read the node's resolv.conf: %w", err)
		}
		for _, line := range strings.Split(string(node), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "nameserver":
				servers = append(servers, f[1])
			case "search":
				searches = append(searches, f[1:]...)
			case "options":
				options = append(options, f[1:]...)
			}
		}
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = append(servers, c.Nameservers...)
		searches = append(searches, c.Searches...)
		for _, o := range c.Options {
			if o.Value != nil {
				options = append(options, o.Name+":"+*o.Value)
			} else {
				options = append(options, o.Name)
			}
		}
	}
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(searches, " "))
	}
	if len(options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(options, " "))
	}
	return []byte(b.String()), nil
}

// nodeResolvConf is the resolver configuration of the node's processes.
func (k *Kubelet) nodeResolvConf() string {
	if k.cfg.ResolvConf != "" {
		return k.cfg.ResolvConf
	}
	return "/etc/resolv.conf"
}
