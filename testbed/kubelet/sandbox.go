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
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// A pod's sandbox is one process, as a pause container is: it runs in the
// pod's network namespace, in UTS and mount namespaces of its own, where it
// sets the pod's hostname and mounts the pod's /etc/hosts and
// /etc/resolv.conf over the node's. Every container of the pod, and every
// exec into it, enters its three namespaces (nsenter --target).

// sandboxReady is the line a sandbox prints, with its pid, once it is set up.
const sandboxReady = "sandbox ready pid="

// RunSandbox is the sandbox process (the testbed's `sandbox` subcommand,
// started under `unshare --uts --mount`): it sets the hostname, mounts
// each bind (target=source), reports ready on out, and waits for SIGTERM.
func RunSandbox(hostname string, binds []string, out io.Writer) error {
	if hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("sandbox: set hostname %q: %w", hostname, err)
		}
	}
	for _, b := range binds {
		target, source, ok := strings.Cut(b, "=")
		if !ok {
			return fmt.Errorf("sandbox: bind %q is not TARGET=SOURCE", b)
		}
		if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("sandbox: bind %s over %s: %w", source, target, err)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Fprintf(out, "%s%d\n", sandboxReady, os.Getpid())
	<-sig
	return nil
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
func (w *podWorker) startSandbox(ctx context.Context, pod *v1.Pod) (*sandbox, error) {
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
	argv := []string{"netns", "exec", w.netns, "unshare", "--uts", "--mount", "--propagation", "private", "--",
		w.k.cfg.Images.Self, "sandbox", "--hostname", podHostname(pod, w.k.cfg.NodeName),
		"--bind", "/etc/hosts=" + hosts, "--bind", "/etc/resolv.conf=" + resolv}
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
