package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"nodeflow/agent/feature"
	"nodeflow/datapath/plan"
	"nodeflow/host/netstack"
	"nodeflow/host/repair"
)

func testAgent(t *testing.T) (*Agent, *logtest.Hook) {
	t.Helper()
	log, hook := logtest.NewNullLogger()
	a, err := New(Config{NodeName: "node1", OVSRundir: "/r", PodBridge: "br0", GatewayBridge: "breth0", Uplink: "eth0",
		DatapathType: "netdev", MTU: 1400, Kubeconfig: "/etc/nodeflow/kubeconfig",
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, HostCheckInterval: 30 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	a.rest = &rest.Config{Host: "https://api.test:6443"}
	return a, hook
}

// firewallish is a feature that declares what it needs of the API.
type firewallish struct{}

func (firewallish) Name() string               { return "firewallish" }
func (firewallish) Owns() []plan.Feature       { return nil }
func (firewallish) Init(feature.Host) error    { return nil }
func (firewallish) Sync(context.Context) error { return nil }
func (firewallish) Run(context.Context)        {}
func (firewallish) APIAccess() []feature.APIAccess {
	return []feature.APIAccess{{Verb: "watch", Group: "k8s.ovn.org", Resource: "egressfirewalls"}, {Verb: "list", Resource: "pods"}}
}

// TestCheckAPI is what the agent finds out before it touches the node,
// each case with the message an operator reads.
func TestCheckAPI(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}}}
	bare := node.DeepCopy()
	bare.Spec.PodCIDRs = nil
	getNodes := func(err error) func(*fake.Clientset) {
		return func(c *fake.Clientset) {
			c.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
		}
	}
	deny := func(denied ...string) func(*fake.Clientset) {
		return func(c *fake.Clientset) {
			c.PrependReactor("create", "selfsubjectaccessreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
				r := act.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				ra := r.Spec.ResourceAttributes
				r.Status.Allowed = true
				for _, d := range denied {
					if d == ra.Verb+" "+ra.Resource {
						r.Status.Allowed = false
					}
				}
				return true, r, nil
			})
			c.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
					UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:nodeflow:nodeflow-agent"}}}, nil
			})
		}
	}
	gr := schema.GroupResource{Resource: "nodes"}
	for _, tc := range []struct {
		name  string
		objs  []runtime.Object
		setup []func(*fake.Clientset)
		want  string // "" for none
	}{
		{name: "everything in place", objs: []runtime.Object{node}, setup: []func(*fake.Clientset){deny()}},
		{name: "unreachable", setup: []func(*fake.Clientset){getNodes(errors.New("dial tcp 10.0.0.1:6443: connect: connection refused"))},
			want: "cannot reach the API server at https://api.test:6443 (from kubeconfig /etc/nodeflow/kubeconfig): dial tcp"},
		{name: "credentials refused", setup: []func(*fake.Clientset){getNodes(apierrors.NewUnauthorized("invalid bearer token"))},
			want: "the API server at https://api.test:6443 does not accept the agent's credentials from kubeconfig /etc/nodeflow/kubeconfig"},
		{name: "not allowed to read its node", setup: []func(*fake.Clientset){getNodes(apierrors.NewForbidden(gr, "node1", errors.New("no RBAC")))},
			want: "may not get its Node node1"},
		{name: "no such node", want: "Node node1 does not exist: is the node name right"},
		{name: "no pod subnets yet", objs: []runtime.Object{bare}, want: "Node node1 has no podCIDRs yet"},
		{name: "permissions missing, the agent's and a feature's", objs: []runtime.Object{node}, setup: []func(*fake.Clientset){deny("list pods", "watch egressfirewalls")},
			want: "system:serviceaccount:nodeflow:nodeflow-agent may not list pods, watch egressfirewalls.k8s.ovn.org (its ClusterRole"},
		{name: "reviews not answered: going on", objs: []runtime.Object{node}, setup: []func(*fake.Clientset){func(c *fake.Clientset) {
			c.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}, "", errors.New("no"))
			})
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := testAgent(t)
			a.Use(firewallish{})
			c := fake.NewClientset(tc.objs...)
			for _, s := range tc.setup {
				s(c)
			}
			a.kube = c
			err := a.checkAPI(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestAPIAccessDeduplicated: a feature's permission the agent needs anyway
// is asked once.
func TestAPIAccessDeduplicated(t *testing.T) {
	a, _ := testAgent(t)
	a.Use(firewallish{})
	n := 0
	for _, p := range a.apiAccess() {
		if p.String() == "list pods" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("list pods asked %d times", n)
	}
}

// TestWaitAPI waits through two different problems, saying each once and
// on /readyz, then goes on; cancelled, it says the node was not touched.
func TestWaitAPI(t *testing.T) {
	a, hook := testAgent(t)
	var calls atomic.Int32
	var seen []string
	errs := []error{errors.New("cannot reach the API server"), errors.New("cannot reach the API server"), errors.New("Node node1 has no podCIDRs yet")}
	check := func(context.Context) error {
		i := int(calls.Add(1)) - 1
		if msg, _ := a.waitingFor.Load().(string); msg != "" {
			seen = append(seen, msg)
		}
		if i < len(errs) {
			return errs[i]
		}
		return nil
	}
	if err := a.waitAPI(context.Background(), check, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 4 || len(seen) != 3 || !strings.Contains(seen[2], "waiting before touching the node's network: Node node1 has no podCIDRs yet") {
		t.Errorf("%d checks; /readyz said %q", calls.Load(), seen)
	}
	warned := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warned++
		}
	}
	if warned != 2 {
		t.Errorf("%d warnings, want one per problem (2)", warned)
	}
	if msg, _ := a.waitingFor.Load().(string); msg != "" {
		t.Errorf("still waiting for %q", msg)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	err := a.waitAPI(ctx, func(context.Context) error { return errors.New("cannot reach the API server") }, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "the node's network untouched") || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("cancelled: %v", err)
	}
}

// TestLoadKubeconfig: a kubeconfig that cannot be loaded is an error that
// names it.
func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.conf")
	os.WriteFile(typo, []byte("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: c\n users: []\n"), 0o644)
	for name, path := range map[string]string{"missing": filepath.Join(dir, "nope.conf"), "typo": typo} {
		a, _ := testAgent(t)
		a.cfg.Kubeconfig = path
		err := a.loadKubeconfig()
		if err == nil || !strings.Contains(err.Error(), "kubeconfig "+path) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, path)
		}
	}
}

// TestReadyz: /readyz fails while a repair keeps failing and says which;
// /healthz does not.
func TestReadyz(t *testing.T) {
	a, _ := testAgent(t)
	clock := clocktesting.NewFakeClock(time.Now())
	a.repairs = repair.New(repair.Options{Log: a.log, Clock: clock})
	get := func(h http.HandlerFunc) (int, string) {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest("GET", "/", nil))
		return rec.Code, rec.Body.String()
	}
	a.lastLoop.Store(time.Now().UnixNano())
	a.waitingFor.Store("waiting before touching the node's network: cannot reach the API server")
	if code, body := get(a.readyz); code != 503 || !strings.Contains(body, "cannot reach the API server") {
		t.Errorf("waiting: %d %q", code, body)
	}
	close(a.reconciled)
	if code, _ := get(a.readyz); code != 200 {
		t.Errorf("reconciled: %d", code)
	}
	a.repairs.Observe(netstack.RepairNodeAddress, 0, errors.New("hostnet: restore fd00:172:30::11/64 on breth0: permission denied"))
	clock.Step(repair.DefaultGrace)
	if code, body := get(a.readyz); code != 503 || !strings.Contains(body, "node-address: failing for 2s (1 attempts): hostnet: restore fd00:172:30::11/64") {
		t.Errorf("failing repair: %d %q", code, body)
	}
	if code, _ := get(a.healthz); code != 200 {
		t.Errorf("healthz with a failing repair: %d", code)
	}
	a.repairs.Observe(netstack.RepairNodeAddress, 1, nil)
	if code, _ := get(a.readyz); code != 200 {
		t.Errorf("repaired: %d", code)
	}
}
