package testbed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/deploy"
	"nodeflow/testbed/pki"
	"nodeflow/testbed/topology"
)

// Versions of the control plane the testbed runs. testbed/tools pins them;
// a test checks that the two agree.
const (
	KubernetesVersion = "v1.36.3"
	EtcdVersion       = "v3.6.16"
)

// ControlPlaneBinaries are the programs `make testbed-deps` builds.
var ControlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// DefaultBinDir is where `make testbed-deps` puts the control-plane
// binaries: $NODEFLOW_TESTBED_CACHE, else $XDG_CACHE_HOME/nodeflow/testbed,
// else ~/.cache/nodeflow/testbed, then kube-VERSION-etcd-VERSION/bin.
func DefaultBinDir() string {
	return filepath.Join(cacheRoot(), "kube-"+KubernetesVersion+"-etcd-"+EtcdVersion, "bin")
}

// DefaultAgnhost is where testbed/tools/build.sh puts the upstream agnhost
// test server (`make testbed-deps`), "" if it is not there.
func DefaultAgnhost() string {
	return cachedTool("agnhost", "agnhost")
}

// cachedTool returns the program name that testbed/tools/build.sh built
// into the cache directory dir-VERSION, "" if it is not there (the
// version is the newest there is).
func cachedTool(dir, name string) string {
	matches, _ := filepath.Glob(filepath.Join(cacheRoot(), dir+"-v*", "bin", name))
	sort.Strings(matches)
	for i := len(matches) - 1; i >= 0; i-- {
		if fi, err := os.Stat(matches[i]); err == nil && fi.Mode()&0o111 != 0 {
			return matches[i]
		}
	}
	return ""
}

// cacheRoot is where testbed/tools/build.sh caches what it builds.
func cacheRoot() string {
	if root := os.Getenv("NODEFLOW_TESTBED_CACHE"); root != "" {
		return root
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "/root"
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "nodeflow", "testbed")
}

// CheckBinaries reports which control-plane binaries are missing from dir.
func CheckBinaries(dir string) error {
	var missing []string
	for _, b := range ControlPlaneBinaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("testbed: control-plane binaries missing from %s: %s (run `make testbed-deps`)", dir, strings.Join(missing, ", "))
	}
	return nil
}

// nodeAPIPort is the port on which the API server is reachable on the
// loopback of every node's namespace (a proxy to the host's loopback).
const nodeAPIPort = 6443

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// controlPlane is the running control plane.
type controlPlane struct {
	dir, binDir, logDir string
	procs               []*proc
	apiPort             int
	apiURL              string
	ca                  *pki.CA
	adminKubeconfig     string
	admin               kubernetes.Interface
}

// controllers are the kube-controller-manager controllers the testbed runs:
// what Deployments, DaemonSets, StatefulSets, Jobs, Services (EndpointSlices
// and Endpoints), namespaces, service accounts, node CIDRs and node health
// need, and the garbage collector for cascading deletion. Leaving out the
// rest (resource quota, volumes, certificates, autoscaling...) saves seconds
// of start-up.
var controllers = []string{
	"clusterrole-aggregation-controller",
	"daemonset-controller",
	"deployment-controller",
	"endpoints-controller",
	"endpointslice-controller",
	"endpointslice-mirroring-controller",
	"garbage-collector-controller",
	"job-controller",
	"namespace-controller",
	"node-ipam-controller",
	"node-lifecycle-controller",
	"pod-garbage-collector-controller",
	"replicaset-controller",
	"root-ca-certificate-publisher-controller",
	"service-cidr-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"statefulset-controller",
	"taint-eviction-controller",
}

// UnidlerKubeconfig is the unidler's kubeconfig in the testbed's directory:
// a token of the ServiceAccount deploy/rbac/unidler.yaml creates.
const UnidlerKubeconfig = "unidler.kubeconfig"

// IPAMKubeconfig is the IPAM controller's kubeconfig in the testbed's
// directory: a token of the ServiceAccount deploy/rbac/ipam.yaml creates.
const IPAMKubeconfig = "ipam.kubeconfig"

// The ServiceAccounts of deploy/rbac whose tokens the testbed's agents and
// unidler use, and how long a token the testbed asks for lasts.
const (
	deployNamespace     = "nodeflow"
	agentAccount        = "nodeflow-agent"
	unidlerAccount      = "nodeflow-unidler"
	ipamAccount         = "nodeflow-ipam"
	accountTokenSeconds = 7 * 24 * 3600
)

// writePKI makes the CA, certificates, keys, tokens and kubeconfigs.
func (cp *controlPlane) writePKI(clusterName string, nodes []string, serviceCIDRs []string) error {
	dir := filepath.Join(cp.dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA(clusterName + "-ca")
	if err != nil {
		return err
	}
	cp.ca = ca
	if _, err := pki.WriteFile(dir, "ca.crt", ca.CertPEM, false); err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	for _, c := range serviceCIDRs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			return err
		}
		first := append(net.IP(nil), n.IP...)
		first[len(first)-1]++
		ips = append(ips, first)
	}
	crt, key, err := ca.Issue(pki.Request{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        ips,
		Server:     true,
	})
	if err != nil {
		return err
	}
	if _, err := pki.WriteFile(dir, "apiserver.crt", crt, false); err != nil {
		return err
	}
	if _, err := pki.WriteFile(dir, "apiserver.key", key, true); err != nil {
		return err
	}
	pub, priv, err := pki.NewKeyPair()
	if err != nil {
		return err
	}
	if _, err := pki.WriteFile(dir, "sa.pub", pub, false); err != nil {
		return err
	}
	if _, err := pki.WriteFile(dir, "sa.key", priv, true); err != nil {
		return err
	}

	// The API server's client certificate for the kubelets' API.
	kcrt, kkey, err := ca.Issue(pki.Request{CommonName: kubeletClientUser, Client: true})
	if err != nil {
		return err
	}
	if _, err := pki.WriteFile(dir, "apiserver-kubelet-client.crt", kcrt, false); err != nil {
		return err
	}
	if _, err := pki.WriteFile(dir, "apiserver-kubelet-client.key", kkey, true); err != nil {
		return err
	}

	client := func(cn string, orgs ...string) (pki.Credentials, error) {
		crt, key, err := ca.Issue(pki.Request{CommonName: cn, Organizations: orgs, Client: true})
		return pki.Credentials{User: cn, CertPEM: crt, KeyPEM: key}, err
	}
	kubeconfigs := []struct {
		path, cn string
		orgs     []string
	}{
		{filepath.Join(cp.dir, "admin.kubeconfig"), "testbed-admin", []string{"system:masters"}},
		{filepath.Join(dir, "kube-controller-manager.kubeconfig"), "system:kube-controller-manager", nil},
		{filepath.Join(dir, "kube-scheduler.kubeconfig"), "system:kube-scheduler", nil},
	}
	for _, n := range nodes {
		kubeconfigs = append(kubeconfigs, struct {
			path, cn string
			orgs     []string
		}{filepath.Join(cp.dir, "nodes", n, "kubelet.kubeconfig"), "system:node:" + n, []string{"system:nodes"}})
	}
	for _, kc := range kubeconfigs {
		cred, err := client(kc.cn, kc.orgs...)
		if err != nil {
			return err
		}
		if err := pki.WriteKubeconfig(kc.path, clusterName, cp.apiURL, ca.CertPEM, cred); err != nil {
			return err
		}
	}
	cp.adminKubeconfig = kubeconfigs[0].path

	return nil
}

// start launches etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, and returns when the API server is ready.
func (cp *controlPlane) start(ctx context.Context, clusterName string, nodes []string, k topology.Kubernetes) error {
	podCIDRs, serviceCIDRs, maskV4, maskV6 := k.PodCIDRs, k.ServiceCIDRs, k.NodeCIDRMaskIPv4, k.NodeCIDRMaskIPv6
	var err error
	if cp.apiPort, err = freePort(); err != nil {
		return err
	}
	cp.apiURL = "https://127.0.0.1:" + strconv.Itoa(cp.apiPort)
	if err := cp.writePKI(clusterName, nodes, serviceCIDRs); err != nil {
		return err
	}
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	etcdClient := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	etcdPeer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	pkiDir := filepath.Join(cp.dir, "pki")
	egressConfig := filepath.Join(cp.dir, "egress-selector.yaml")
	if err := os.WriteFile(egressConfig, []byte(egressSelectorConfig(cp.egressSocket())), 0o644); err != nil {
		return err
	}
	bin := func(n string) string { return filepath.Join(cp.binDir, n) }
	logf := func(n string) string { return filepath.Join(cp.logDir, n+".log") }

	etcd, err := startProc("etcd", logf("etcd"), "", nil, bin("etcd"),
		"--name", "testbed",
		"--data-dir", filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", etcdPeer, "--initial-advertise-peer-urls", etcdPeer,
		"--initial-cluster", "testbed="+etcdPeer,
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, etcd)

	api, err := startProc("kube-apiserver", logf("kube-apiserver"), "", nil, bin("kube-apiserver"),
		"--etcd-servers", etcdClient,
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(cp.apiPort),
		"--cert-dir", pkiDir,
		"--tls-cert-file", filepath.Join(pkiDir, "apiserver.crt"),
		"--tls-private-key-file", filepath.Join(pkiDir, "apiserver.key"),
		"--client-ca-file", filepath.Join(pkiDir, "ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pkiDir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pkiDir, "sa.key"),
		"--service-cluster-ip-range", strings.Join(serviceCIDRs, ","),
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		// The API server listens on loopback only; an endpoint of 127.0.0.1
		// for the kubernetes Service would be rejected: the testbed keeps
		// its endpoints (apiendpoints.go).
		"--endpoint-reconciler-type", "none",
		// The kubelets' API (logs, exec, port-forward), reached through
		// the egress proxy (egress.go) at the nodes' InternalIPs.
		"--kubelet-client-certificate", filepath.Join(pkiDir, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key", filepath.Join(pkiDir, "apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority", filepath.Join(pkiDir, "ca.crt"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--egress-selector-config-file", egressConfig,
		"--profiling=false")
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, api)

	// The controller manager and the scheduler wait for the API server by
	// themselves; starting them now saves their start-up time.
	kcm, err := startProc("kube-controller-manager", logf("kube-controller-manager"), "", nil, bin("kube-controller-manager"),
		"--kubeconfig", filepath.Join(pkiDir, "kube-controller-manager.kubeconfig"),
		"--bind-address", "127.0.0.1", "--secure-port", "0",
		"--leader-elect=false",
		// OpenShift's figures rather than the upstream 20/30: at 20 a
		// second, the EndpointSlice controller takes seconds to update a
		// hundred Services' slices when their pods turn ready.
		"--kube-api-qps=150", "--kube-api-burst=300",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file", filepath.Join(pkiDir, "sa.key"),
		"--root-ca-file", filepath.Join(pkiDir, "ca.crt"),
		"--cluster-name", clusterName,
		"--allocate-node-cidrs=true",
		"--cluster-cidr", strings.Join(podCIDRs, ","),
		"--node-cidr-mask-size-ipv4", strconv.Itoa(maskV4),
		"--node-cidr-mask-size-ipv6", strconv.Itoa(maskV6),
		"--service-cluster-ip-range", strings.Join(serviceCIDRs, ","),
		"--controllers", strings.Join(controllers, ","))
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, kcm)
	sched, err := startProc("kube-scheduler", logf("kube-scheduler"), "", nil, bin("kube-scheduler"),
		"--kubeconfig", filepath.Join(pkiDir, "kube-scheduler.kubeconfig"),
		"--bind-address", "127.0.0.1", "--secure-port", "0",
		"--leader-elect=false")
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, sched)

	if err := cp.waitReady(ctx, 90*time.Second); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.adminKubeconfig)
	if err != nil {
		return err
	}
	if cp.admin, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	// nodeflow's CRDs (deploy/crds) are served before any agent starts,
	// then its namespace and RBAC (deploy/namespace.yaml, deploy/rbac).
	if err := installCRDs(ctx, cfg, 30*time.Second); err != nil {
		return err
	}
	objs, err := readManifests(deploy.Manifests, addressPolicyParams(k), "namespace.yaml", "rbac/*.yaml", "service-address-policy.yaml")
	if err != nil {
		return err
	}
	if err := applyManifests(ctx, cfg, objs, false); err != nil {
		return err
	}
	// The API server may use every kubelet's API, as kubeadm sets it up.
	_, err = cp.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed:kube-apiserver-kubelet-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeletClientUser}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: bind the kubelet API's client: %w", err)
	}
	return cp.writeAccountKubeconfigs(ctx, clusterName, nodes)
}

// LoadBalancerController is the identity of the testbed's stand-in for a
// load-balancer controller: the only one besides the admin that the
// admission policy of deploy/service-address-policy.yaml lets set
// load-balancer ingress IPs.
const LoadBalancerController = "system:serviceaccount:kube-system:service-controller"

// addressPolicyParams fills in the parameters of the admission policy of
// the addresses Services claim from the topology: the same ranges as the
// agents' policies (agentPolicyEnv), the cluster's networks, and
// LoadBalancerController as the writer of ingress IPs.
func addressPolicyParams(k topology.Kubernetes) func(*unstructured.Unstructured) error {
	return func(u *unstructured.Unstructured) error {
		if u.GetKind() != "ConfigMap" || u.GetName() != "nodeflow-service-address-policy" {
			return nil
		}
		cidrs := strings.Join(k.ServiceAddressCIDRs, ",")
		for key, v := range map[string]string{
			"externalIPAllowedCIDRs": cidrs, "loadBalancerIPAllowedCIDRs": cidrs, "loadBalancerStatusWriters": LoadBalancerController,
			"clusterCIDRs": strings.Join(k.PodCIDRs, ","), "serviceCIDRs": strings.Join(k.ServiceCIDRs, ","),
		} {
			if err := unstructured.SetNestedField(u.Object, v, "data", key); err != nil {
				return err
			}
		}
		return nil
	}
}

// kubeletClientUser is the API server's identity at the kubelets' API.
const kubeletClientUser = "kube-apiserver-kubelet-client"

// egressSocket is the unix socket of the API server's egress proxy.
func (cp *controlPlane) egressSocket() string { return filepath.Join(cp.dir, "egress.sock") }

// writeAccountKubeconfigs writes the kubeconfigs of the node agents, the
// unidler and the IPAM controller with tokens of their ServiceAccounts (deploy/rbac), asked
// for as the kubelet asks for a pod's: so every e2e test runs them with
// the manifests' roles and bindings and nothing more. The agents reach the
// API server through the proxy on their namespace's loopback.
func (cp *controlPlane) writeAccountKubeconfigs(ctx context.Context, clusterName string, nodes []string) error {
	agentTok, err := cp.accountToken(ctx, agentAccount)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		err := pki.WriteKubeconfig(filepath.Join(cp.dir, "nodes", n, "agent.kubeconfig"), clusterName,
			"https://127.0.0.1:"+strconv.Itoa(nodeAPIPort), cp.ca.CertPEM, pki.Credentials{User: agentAccount, Token: agentTok})
		if err != nil {
			return err
		}
	}
	for file, account := range map[string]string{UnidlerKubeconfig: unidlerAccount, IPAMKubeconfig: ipamAccount} {
		tok, err := cp.accountToken(ctx, account)
		if err != nil {
			return err
		}
		err = pki.WriteKubeconfig(filepath.Join(cp.dir, file), clusterName, cp.apiURL, cp.ca.CertPEM,
			pki.Credentials{User: account, Token: tok})
		if err != nil {
			return err
		}
	}
	return nil
}

// accountToken returns a token of the ServiceAccount name in nodeflow's
// namespace (TokenRequest).
func (cp *controlPlane) accountToken(ctx context.Context, name string) (string, error) {
	exp := int64(accountTokenSeconds)
	tr, err := cp.admin.CoreV1().ServiceAccounts(deployNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("testbed: token of ServiceAccount %s/%s: %w", deployNamespace, name, err)
	}
	return tr.Status.Token, nil
}

// waitReady polls the API server's /readyz with the admin credentials.
func (cp *controlPlane) waitReady(ctx context.Context, timeout time.Duration) error {
	cfg, err := clientcmd.LoadFromFile(cp.adminKubeconfig)
	if err != nil {
		return err
	}
	auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	cert, err := tls.X509KeyPair(auth.ClientCertificateData, auth.ClientKeyData)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cp.ca.Cert)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		for _, p := range cp.procs {
			if p.exited() {
				return fmt.Errorf("testbed: %s exited during start-up (%v); see %s", p.name, p.err, filepath.Join(cp.logDir, p.name+".log"))
			}
		}
		resp, err := hc.Get(cp.apiURL + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("testbed: kube-apiserver not ready after %s: %s", timeout, last)
}

// stop stops the control plane, last started first.
func (cp *controlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].stop(10 * time.Second)
	}
}
