package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/agent/feature"
	"nodeflow/cluster/namespaceid"
	"nodeflow/host/netstack"
	"nodeflow/internal/kubeclient"
)

// Check before taking the node.
//
// The agent's first change to the node moves its addresses onto a bridge
// that forwards nothing until the agent has read the cluster and installed
// its flows. Whatever would stop it in between must be found before: the
// agent checks, reading only, that its configuration fits the node (the
// uplink exists and holds the node's addresses, or breth0 does already;
// the record of those addresses is readable), loads its kubeconfig,
// reaches the API server, reads its own Node (it exists and has its pod
// subnets), and asks whether its identity may do what it must (a
// SelfSubjectAccessReview each). Only then does it connect to Open
// vSwitch and touch the node: no bridge, no address moved, no sysctl
// written before.
//
// A configuration that does not fit, or a kubeconfig that cannot be
// loaded, stops the agent with an error that names it: that does not
// change by waiting (the DaemonSet's restart reads it again). Everything
// the API server answers, or does not, is waited for instead, for as long
// as it takes, with a pause growing from apiRetryFirst to apiRetryMost: at
// boot the API server may not be up yet, the agent's ClusterRoleBinding
// may be applied a moment after its DaemonSet, the Node may be registered,
// or given its pod subnets, after the agent starts. The agent logs what it
// waits for at once, when that changes and every apiWaitLogEvery; /readyz
// says it, /healthz stays well (waiting is alive). A restarted agent waits
// the same way and tears nothing down: the flows of the agent before it
// keep forwarding.

const (
	apiRetryFirst   = time.Second
	apiRetryMost    = 30 * time.Second
	apiWaitLogEvery = 30 * time.Second
	// apiCheckTimeout bounds one check (a black-holed API server would
	// otherwise hold it for the TCP connect's minutes).
	apiCheckTimeout = 15 * time.Second
)

// kubeconfigSource says where the agent's API client configuration comes
// from, for errors.
func (a *Agent) kubeconfigSource() string {
	switch {
	case a.cfg.Kubeconfig != "":
		return "kubeconfig " + a.cfg.Kubeconfig
	case os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "":
		return "kubeconfig " + os.Getenv(clientcmd.RecommendedConfigPathEnvVar) + " (KUBECONFIG)"
	default:
		return "the in-cluster configuration (KUBERNETES_SERVICE_HOST and the pod's ServiceAccount token)"
	}
}

// loadKubeconfig makes the agent's API client from its kubeconfig.
func (a *Agent) loadKubeconfig() error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if a.cfg.Kubeconfig != "" {
		rules.ExplicitPath = a.cfg.Kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("controller: %s: %w", a.kubeconfigSource(), err)
	}
	rc.UserAgent = "nodeflow-agent/" + a.cfg.NodeName
	rc.QPS, rc.Burst = a.cfg.KubeAPIQPS, a.cfg.KubeAPIBurst
	feature.DefaultIfUnset(&rc.QPS, DefaultKubeAPIQPS)
	feature.DefaultIfUnset(&rc.Burst, DefaultKubeAPIBurst)
	kc, err := kubeclient.NewTyped(rc)
	if err != nil {
		return fmt.Errorf("controller: %s: kubernetes client: %w", a.kubeconfigSource(), err)
	}
	a.kube, a.rest = kc, rc
	return nil
}

// preflight checks what the agent can check on the node without changing
// it (checkHost) and loads the kubeconfig, then waits until the API access
// checks pass (checkAPI).
func (a *Agent) preflight(ctx context.Context) error {
	if err := a.checkHost(); err != nil {
		return err
	}
	if err := a.loadKubeconfig(); err != nil {
		return err
	}
	// A node whose gateway bridge holds the uplink already but no flow
	// (it rebooted with Open vSwitch's database on disk, or ovs-vswitchd
	// restarted while no agent ran) is off its network, and may not reach
	// the API server: the bridge switches again first. That changes no
	// address and no setting of the node; it gives back what a bridge
	// without its agent had taken.
	if _, err := os.Stat(filepath.Join(a.cfg.OVSRundir, a.cfg.GatewayBridge+".mgmt")); err == nil {
		log := a.log.WithField("bridge", a.cfg.GatewayBridge)
		if put, err := switchWhileEmpty(ctx, a.cfg.MgmtSocket(a.cfg.GatewayBridge), log); err != nil {
			log.WithError(err).Warn("cannot read the gateway bridge's flows")
		} else if put {
			log.Info("the gateway bridge has no flows: it switches as a plain bridge until its pipeline is installed")
		}
	}
	return a.waitAPI(ctx, a.checkAPI, apiRetryFirst)
}

// checkHost checks, reading only, that the configuration fits the node:
// the uplink exists, the record of the node's addresses is readable, and
// there are addresses to keep (on the uplink, to move, or on the gateway
// bridge already), so that a wrong uplink is found before it is put in a
// bridge.
func (a *Agent) checkHost() error {
	if _, err := netlink.LinkByName(a.cfg.Uplink); err != nil {
		return fmt.Errorf("controller: uplink %s: %w: is the uplink right (--uplink)?", a.cfg.Uplink, err)
	}
	rec, err := netstack.LoadNodeL3(netstack.NodeL3Path(a.cfg.CNIDataDir))
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if rec == nil {
		if _, err := netstack.NodeIPs(a.cfg.Uplink, a.cfg.GatewayBridge, a.cfg.Masquerade); err != nil {
			return fmt.Errorf("controller: uplink %s: %w: is the uplink right (--uplink)?", a.cfg.Uplink, err)
		}
	}
	a.l3Record = rec
	return nil
}

// waitAPI runs check until it passes or ctx ends, pausing first, then
// twice as long each time up to apiRetryMost, with a fifth of jitter.
func (a *Agent) waitAPI(ctx context.Context, check func(context.Context) error, first time.Duration) error {
	pause := first
	var since, logged time.Time
	var last string
	for attempt := 1; ; attempt++ {
		a.lastLoop.Store(time.Now().UnixNano())
		err := check(ctx)
		if err == nil {
			if attempt > 1 {
				a.log.WithFields(logrus.Fields{"waited": time.Since(since).Round(time.Millisecond).String(), "attempts": attempt}).
					Info("API access checked; taking the node's network")
			}
			a.waitingFor.Store("")
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("controller: %w (the node's network untouched; waiting for: %v)", ctx.Err(), err)
		}
		if since.IsZero() {
			since = time.Now()
		}
		a.waitingFor.Store("waiting before touching the node's network: " + err.Error())
		if msg := err.Error(); msg != last || time.Since(logged) >= apiWaitLogEvery {
			a.log.WithError(err).WithFields(logrus.Fields{"attempts": attempt, "waiting": time.Since(since).Round(time.Second).String()}).
				Warn("waiting for the API server before touching the node's network")
			logged, last = time.Now(), msg
		}
		jittered := time.Duration(float64(pause) * (0.9 + 0.2*rand.Float64()))
		select {
		case <-ctx.Done():
		case <-time.After(jittered):
		}
		pause = min(2*pause, apiRetryMost)
	}
}

// checkAPI checks, once, what the agent needs of the API before it takes
// the node: the API server answers and accepts its credentials, its Node
// exists and has pod subnets, and it may do what it must. The error says
// what is wrong, for the operator.
func (a *Agent) checkAPI(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiCheckTimeout)
	defer cancel()
	host := a.rest.Host
	n, err := a.kube.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("controller: the API server at %s does not accept the agent's credentials from %s: %w", host, a.kubeconfigSource(), err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("controller: the agent may not get its Node %s: %w (its ClusterRole: deploy/rbac/agent.yaml)", a.cfg.NodeName, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("controller: Node %s does not exist: is the node name right (--node-name, NODE_NAME)?", a.cfg.NodeName)
	case err != nil:
		return fmt.Errorf("controller: cannot reach the API server at %s (from %s): %w", host, a.kubeconfigSource(), err)
	case len(n.Spec.PodCIDRs) == 0:
		return fmt.Errorf("controller: Node %s has no podCIDRs yet (the controller manager gives them with --allocate-node-cidrs)", a.cfg.NodeName)
	}
	denied, err := a.reviewAccess(ctx, a.apiAccess())
	if err != nil {
		// The API server would not say: the informers will.
		a.log.WithError(err).Info("cannot review the agent's permissions before it starts; going on")
		return nil
	}
	if len(denied) > 0 {
		who := "the agent's identity"
		if r, err := a.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil && r.Status.UserInfo.Username != "" {
			who = r.Status.UserInfo.Username
		}
		names := make([]string, len(denied))
		for i, d := range denied {
			names[i] = d.String()
		}
		return fmt.Errorf("controller: %s may not %s (its ClusterRole: deploy/rbac/agent.yaml)", who, strings.Join(names, ", "))
	}
	return nil
}

// apiAccess is what the agent's identity must be allowed: what the agent
// itself watches and writes, and what its features declare
// (feature.APIUser).
func (a *Agent) apiAccess() []feature.APIAccess {
	need := []feature.APIAccess{
		{Verb: "list", Resource: "nodes"}, {Verb: "watch", Resource: "nodes"},
		// The node's namespace-id release watermark.
		{Verb: "patch", Resource: "nodes", Name: a.cfg.NodeName},
		{Verb: "list", Resource: "pods"}, {Verb: "watch", Resource: "pods"},
		{Verb: "list", Resource: "namespaces"}, {Verb: "watch", Resource: "namespaces"},
		{Verb: "list", Group: namespaceid.Group, Resource: namespaceid.Resource}, {Verb: "watch", Group: namespaceid.Group, Resource: namespaceid.Resource},
		{Verb: "update", Group: namespaceid.Group, Resource: namespaceid.Resource},
		{Verb: "create", Resource: "events"},
	}
	for _, f := range a.features {
		if u, ok := f.(feature.APIUser); ok {
			for _, p := range u.APIAccess() {
				if !slices.Contains(need, p) {
					need = append(need, p)
				}
			}
		}
	}
	return need
}

// reviewAccess asks the API server, with one SelfSubjectAccessReview each
// (at once), whether the agent may do each of need, and returns those it
// may not do, in need's order.
func (a *Agent) reviewAccess(ctx context.Context, need []feature.APIAccess) ([]feature.APIAccess, error) {
	allowed := make([]bool, len(need))
	errs := make([]error, len(need))
	var wg sync.WaitGroup
	for i, p := range need {
		wg.Go(func() {
			r, err := a.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource, Namespace: p.Namespace, Name: p.Name,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				errs[i] = fmt.Errorf("review %s: %w", p, err)
				return
			}
			allowed[i] = r.Status.Allowed
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	var denied []feature.APIAccess
	for i, p := range need {
		if !allowed[i] {
			denied = append(denied, p)
		}
	}
	return denied, nil
}
