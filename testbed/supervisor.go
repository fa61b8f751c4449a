package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/testbed/kubelet"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/pki"
	"nodeflow/testbed/topology"
)

// MarkerEnv is set, to the state directory, in the environment of the
// supervisor and so of every process of the testbed. Down finds leftovers by it.
const MarkerEnv = "NODEFLOW_TESTBED"

// Options configure Run.
type Options struct {
	Topology *topology.Topology
	// Dir is the testbed's state directory.
	Dir string
	// BinDir holds the control-plane binaries.
	BinDir string
	// Nodeflow is the nodeflow binary (CNI plugin, and agent if it has one).
	Nodeflow string
	// Self is the testbed binary, whose `serve` subcommand is the pod
	// workload. Empty means this executable.
	Self string
	// Agnhost is the upstream agnhost binary the e2e-test-images agnhost
	// image maps to ("" leaves that image unmapped).
	Agnhost string
	// CoreDNS is the CoreDNS binary of the cluster DNS ("" for no cluster
	// DNS).
	CoreDNS string
	// NoAgent skips `nodeflow agent` even if the binary has it.
	NoAgent bool
	// Log receives the supervisor's log.
	Log logrus.FieldLogger
}

// supervisor owns a running testbed.
type supervisor struct {
	opts  Options
	top   *topology.Topology
	log   logrus.FieldLogger
	state *State
	mu    sync.Mutex

	sandboxes map[string]*ovs.Sandbox
	cp        *controlPlane
	proxies   []*nodeProxy
	agents    []*proc
	dns       *dnsService
	kubelets  sync.WaitGroup
	kubeStop  context.CancelFunc
}

// Run brings the testbed up, marks it ready in its state file, and keeps it
// running until ctx ends; then it tears everything down. It returns an error
// if the bring-up failed (after tearing down what was started).
func Run(ctx context.Context, opts Options) error {
	if opts.Log == nil {
		opts.Log = logrus.StandardLogger()
	}
	if opts.Self == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		opts.Self = self
	}
	top := opts.Topology
	s := &supervisor{opts: opts, top: top, log: opts.Log, sandboxes: map[string]*ovs.Sandbox{}}
	s.state = &State{
		Name: top.Name, Dir: opts.Dir, Phase: PhaseStarting, SupervisorPID: os.Getpid(),
		BinDir: opts.BinDir, Nodeflow: opts.Nodeflow, NetnsPrefix: NetnsPrefix(top.Name),
		Kubeconfig: filepath.Join(opts.Dir, "admin.kubeconfig"), UnidlerKubeconfig: filepath.Join(opts.Dir, UnidlerKubeconfig),
		IPAMKubeconfig: filepath.Join(opts.Dir, IPAMKubeconfig),
		Timings:        map[string]string{},
	}
	os.Setenv(MarkerEnv, opts.Dir)
	err := s.up(ctx)
	if err != nil {
		s.log.WithError(err).Error("bring-up failed")
		s.state.Phase, s.state.Error = PhaseFailed, err.Error()
		_ = s.state.write()
		s.down()
		return err
	}
	<-ctx.Done()
	s.log.Info("stopping")
	s.state.Phase = PhaseStopping
	_ = s.state.write()
	s.down()
	return nil
}

func (s *supervisor) timing(name string, since time.Time) {
	d := time.Since(since).Round(time.Millisecond)
	s.mu.Lock()
	s.state.Timings[name] = d.String()
	s.mu.Unlock()
	s.log.WithField("took", d).Info(name)
}

func (s *supervisor) up(ctx context.Context) error {
	start := time.Now()
	top := s.top
	if left := netnsWithPrefix(NetnsPrefix(top.Name)); len(left) > 0 {
		return fmt.Errorf("testbed %s: network namespaces %s exist: another testbed of that name runs, or one was not taken down (run `testbed down`)", top.Name, strings.Join(left, ", "))
	}
	for _, d := range []string{"logs", "nodes"} {
		if err := os.MkdirAll(filepath.Join(s.opts.Dir, d), 0o755); err != nil {
			return err
		}
	}
	var nodeNames []string
	for _, n := range top.K8sNodes() {
		nodeNames = append(nodeNames, n.Name)
		for _, d := range []string{"cni", "net.d"} {
			if err := os.MkdirAll(filepath.Join(s.nodeDir(n.Name), d), 0o755); err != nil {
				return err
			}
		}
	}
	for _, m := range top.Members() {
		mem := Member{Name: m.Name, Kind: m.Kind, Netns: memberNetns(top.Name, m.Name)}
		for _, a := range m.Addresses() {
			mem.Addresses = append(mem.Addresses, a.Addr().String())
		}
		if m.Kind == topology.KindK8sNode {
			mem.Dir = s.nodeDir(m.Name)
			mem.Kubeconfig = filepath.Join(mem.Dir, "agent.kubeconfig")
		}
		s.state.Members = append(s.state.Members, mem)
	}
	if err := s.state.write(); err != nil {
		return err
	}

	t := time.Now()
	if err := buildNetwork(ctx, top); err != nil {
		return fmt.Errorf("testbed: network: %w", err)
	}
	s.timing("network", t)
	if err := s.startDNS(); err != nil {
		return err
	}

	// The control plane and the nodes' OVS start side by side.
	s.cp = &controlPlane{dir: s.opts.Dir, binDir: s.opts.BinDir, logDir: filepath.Join(s.opts.Dir, "logs")}
	egress, err := startEgressProxy(s.cp.egressSocket(), s.egressNetns)
	if err != nil {
		return err
	}
	s.proxies = append(s.proxies, egress)
	var wg sync.WaitGroup
	errs := make([]error, len(nodeNames)+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.Now()
		k := top.Kubernetes
		errs[0] = s.cp.start(ctx, top.Name, nodeNames, k)
		if errs[0] == nil {
			s.timing("control plane ready", t)
		}
	}()
	for i, n := range nodeNames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			sb, err := ovs.Start(ctx, ovs.Options{Netns: memberNetns(top.Name, n), BaseDir: s.nodeDir(n)})
			if err != nil {
				errs[i+1] = fmt.Errorf("testbed: node %s: %w", n, err)
				return
			}
			s.mu.Lock()
			s.sandboxes[n] = sb
			s.mu.Unlock()
			s.timing("ovs "+n, t)
		}()
	}
	wg.Wait()
	for _, p := range s.cp.procs {
		s.state.Processes = append(s.state.Processes, Process{Name: p.name, PID: p.pid()})
	}
	for _, n := range nodeNames {
		if sb := s.sandboxes[n]; sb != nil {
			m, _ := s.state.Member(n)
			m.OVSRundir = sb.Dir
			s.state.Processes = append(s.state.Processes, Process{Name: "ovs-vswitchd " + n, PID: sb.VswitchdPid()})
		}
	}
	s.state.APIServer = s.cp.apiURL
	_ = s.state.write()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	for _, n := range nodeNames {
		p, err := startNodeProxy(memberNetns(top.Name, n), "127.0.0.1:"+strconv.Itoa(nodeAPIPort), "127.0.0.1:"+strconv.Itoa(s.cp.apiPort))
		if err != nil {
			return fmt.Errorf("testbed: node %s: api proxy: %w", n, err)
		}
		s.proxies = append(s.proxies, p)
	}

	if err := s.startAgents(ctx, nodeNames); err != nil {
		return err
	}
	if err := s.startKubelets(nodeNames); err != nil {
		return err
	}
	t = time.Now()
	if err := s.waitNodes(ctx, nodeNames, 2*time.Minute); err != nil {
		return err
	}
	s.timing("nodes ready", t)
	if err := s.publishAPIServer(ctx, nodeNames); err != nil {
		return err
	}
	if err := s.startClusterDNS(ctx); err != nil {
		return err
	}
	t = time.Now()
	if err := s.waitClusterDNS(ctx, time.Minute); err != nil {
		return err
	}
	s.timing("cluster DNS ready", t)
	s.timing("up", start)
	s.state.Phase = PhaseReady
	return s.state.write()
}

func (s *supervisor) nodeDir(n string) string { return filepath.Join(s.opts.Dir, "nodes", n) }

// HasAgent reports whether the nodeflow binary has an `agent` subcommand.
func HasAgent(nodeflow string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, nodeflow, "agent", "--help").CombinedOutput()
	return err == nil && !strings.Contains(string(out), "No help topic")
}

// startAgents starts `nodeflow agent` in every node's namespace, if the
// binary has that subcommand.
func (s *supervisor) startAgents(ctx context.Context, nodes []string) error {
	switch {
	case s.opts.NoAgent:
		s.state.AgentReason = "disabled (--no-agent)"
	case !HasAgent(s.opts.Nodeflow):
		s.state.AgentReason = s.opts.Nodeflow + " has no `agent` subcommand yet"
	}
	if s.state.AgentReason != "" {
		s.log.Info("not starting nodeflow agent: " + s.state.AgentReason)
		return nil
	}
	s.snapshotNodes(nodes)
	s.state.AgentEnv = append(s.agentDNSEnv(), s.agentPolicyEnv()...)
	for _, n := range nodes {
		sb := s.sandboxes[n]
		env := []string{
			"KUBECONFIG=" + filepath.Join(s.nodeDir(n), "agent.kubeconfig"),
			"NODE_NAME=" + n,
			"NODEFLOW_NODE_NAME=" + n,
			"NODEFLOW_CNI_CONF_DIR=" + filepath.Join(s.nodeDir(n), "net.d"),
		}
		env = append(env, sb.Env()...)
		env = append(env, s.state.AgentEnv...)
		p, err := startInNetns("agent "+n, filepath.Join(s.nodeDir(n), "agent.log"), memberNetns(s.top.Name, n), env, s.opts.Nodeflow, "agent")
		if err != nil {
			return err
		}
		s.agents = append(s.agents, p)
		s.state.Processes = append(s.state.Processes, Process{Name: p.name, PID: p.pid()})
	}
	s.state.Agent = true
	return s.state.write()
}

// agentPolicyEnv is the agents' address policies: the topology's
// service-address-cidrs are where Services may take external and ingress
// IPs from.
func (s *supervisor) agentPolicyEnv() []string {
	cidrs := strings.Join(s.top.Kubernetes.ServiceAddressCIDRs, ",")
	return []string{"NODEFLOW_EXTERNAL_IP_ALLOWED_CIDRS=" + cidrs, "NODEFLOW_LOAD_BALANCER_IP_ALLOWED_CIDRS=" + cidrs}
}

func (s *supervisor) startKubelets(nodes []string) error {
	images := s.images()
	if err := images.Prepare(); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	s.kubeStop = cancel
	for _, n := range nodes {
		dir := s.nodeDir(n)
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubelet.kubeconfig"))
		if err != nil {
			return err
		}
		cfg.QPS, cfg.Burst = 50, 100
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		logf, err := os.OpenFile(filepath.Join(dir, "kubelet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		l := logrus.New()
		l.SetOutput(logf)
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano})
		var ips []netip.Addr
		for _, a := range s.top.Topology.Nodes[n].Addresses() {
			ips = append(ips, a.Addr())
		}
		serving, key, err := s.cp.ca.Issue(pki.Request{CommonName: "system:node:" + n, DNSNames: []string{n}, IPs: netIPs(ips), Server: true})
		if err != nil {
			return fmt.Errorf("testbed: node %s: kubelet serving certificate: %w", n, err)
		}
		k := kubelet.New(kubelet.Config{
			NodeName:       n,
			Client:         client,
			NodeIPs:        ips,
			Labels:         s.top.Topology.Nodes[n].Labels,
			NodeNetns:      memberNetns(s.top.Name, n),
			PodNetnsPrefix: podNetnsPrefix(s.top.Name),
			CNIPlugin:      []string{s.opts.Nodeflow, "cni"},
			CNIConfDir:     filepath.Join(dir, "net.d"),
			WaitForCNIConf: s.state.Agent,
			OVSDB:          "unix:" + s.sandboxes[n].DBSock(),
			DatapathType:   "netdev",
			CNIDataDir:     filepath.Join(dir, "cni"),
			Images:         images,
			ResolvConf:     s.nodeResolvConf(),
			Server:         &kubelet.ServerConfig{CertPEM: serving, KeyPEM: key, ClientCAPEM: s.cp.ca.CertPEM},
			StateDir:       dir,
			Log:            l,
		})
		s.kubelets.Add(1)
		go func() {
			defer s.kubelets.Done()
			defer logf.Close()
			if err := k.Run(kctx); err != nil {
				l.WithError(err).Error("kubelet failed")
				s.log.WithError(err).WithField("node", n).Error("kubelet failed")
			}
		}()
	}
	return nil
}

// nodeResolvConf is the resolver configuration of the nodes, which pods
// without cluster DNS get: the testbed's DNS server if there is one.
func (s *supervisor) nodeResolvConf() string {
	if s.dns == nil {
		return ""
	}
	return filepath.Join(s.opts.Dir, resolvConfName)
}

// images are the programs the kubelets map images to.
func (s *supervisor) images() kubelet.Images {
	img := kubelet.Images{Self: s.opts.Self, Agnhost: s.opts.Agnhost, CoreDNS: s.opts.CoreDNS, BinDir: filepath.Join(s.opts.Dir, "images")}
	if p, err := exec.LookPath("busybox"); err == nil {
		img.Busybox = p
	}
	if p := DefaultRegressionIssue74839(); p != "" {
		img.Programs = map[string]string{"regression-issue-74839": p}
	}
	return img
}

// egressNetns is the network namespace the API server's egress proxy
// dials addr from: the node that has the address, or else the first node
// (pod and Service addresses, which every node reaches).
func (s *supervisor) egressNetns(addr netip.Addr) string {
	nodes := s.top.K8sNodes()
	for _, n := range nodes {
		for _, a := range n.Addresses() {
			if a.Addr() == addr {
				return memberNetns(s.top.Name, n.Name)
			}
		}
	}
	return memberNetns(s.top.Name, nodes[0].Name)
}

func netIPs(addrs []netip.Addr) []net.IP {
	out := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.IP(a.AsSlice()))
	}
	return out
}

// waitNodes waits until every node is Ready with its podCIDRs, and the
// default service account exists (pods cannot be created before).
func (s *supervisor) waitNodes(ctx context.Context, nodes []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	families := 0
	for _, c := range s.top.Kubernetes.PodCIDRs {
		if c != "" {
			families++
		}
	}
	last := ""
	for time.Now().Before(deadline) {
		pending := []string{}
		for _, n := range nodes {
			node, err := s.cp.admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			switch {
			case err != nil:
				pending = append(pending, n+": not registered")
			case len(node.Spec.PodCIDRs) < families:
				pending = append(pending, n+": no podCIDRs yet")
			case !nodeReady(node):
				pending = append(pending, n+": not Ready")
			}
		}
		if _, err := s.cp.admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			pending = append(pending, "service account default/default: "+err.Error())
		}
		if len(pending) == 0 {
			return nil
		}
		last = strings.Join(pending, "; ")
		for _, p := range s.cp.procs {
			if p.exited() {
				return fmt.Errorf("testbed: %s exited (%v); see %s", p.name, p.err, filepath.Join(s.cp.logDir, p.name+".log"))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("testbed: cluster not ready after %s: %s", timeout, last)
}

func nodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// down stops everything the supervisor started, in reverse order, and
// deletes the testbed's network namespaces.
func (s *supervisor) down() {
	if s.kubeStop != nil {
		s.kubeStop()
		s.kubelets.Wait()
	}
	for _, a := range s.agents {
		a.stop(10 * time.Second)
	}
	for _, p := range s.proxies {
		p.close()
	}
	if s.dns != nil {
		s.dns.close()
	}
	if s.cp != nil {
		s.cp.stop()
	}
	for n, sb := range s.sandboxes {
		if err := sb.Stop(); err != nil {
			s.log.WithError(err).WithField("node", n).Warn("stop OVS")
		}
	}
	if err := deleteNetnsWithPrefix(NetnsPrefix(s.top.Name)); err != nil {
		s.log.WithError(err).Warn("delete namespaces")
	}
	s.log.Info("stopped")
}
