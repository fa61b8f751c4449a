package e2e

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/deploy"
	"nodeflow/testbed"
)

// TestManifestsServerDryRun applies every manifest of deploy/ (what
// `kubectl apply -k deploy/` applies) to the testbed's API server with a
// server-side dry run: the real API server checks each object's schema,
// defaults and admission, and stores nothing. (The namespace, the RBAC and
// the CRDs are also applied for real when the testbed starts.)
func TestManifestsServerDryRun(t *testing.T) {
	e := up(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testbed.DryRunManifests(ctx, e.state.Kubeconfig, deploy.All,
		"crds/*.yaml", "namespace.yaml", "rbac/*.yaml", "agent.yaml", "unidler.yaml"); err != nil {
		t.Fatal(err)
	}
}

// TestProcessesRunAsServiceAccounts checks who the testbed's agents and
// unidler are to the API server: the ServiceAccounts of deploy/rbac, so
// that every other e2e test proves the manifests' roles sufficient; and
// that those roles stop short of Secrets.
func TestProcessesRunAsServiceAccounts(t *testing.T) {
	e := up(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(kubeconfig, want string) {
		t.Helper()
		cfg, err := clientcmd.BuildConfigFromFlags(e.state.APIServer, kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: who am I: %v", kubeconfig, err)
		}
		if got := r.Status.UserInfo.Username; got != want {
			t.Errorf("%s authenticates as %q, want %q", kubeconfig, got, want)
		}
		a, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: can I list secrets: %v", kubeconfig, err)
		}
		if a.Status.Allowed {
			t.Errorf("%s (%s) may list Secrets", kubeconfig, want)
		}
	}
	for _, m := range e.state.Members {
		if m.Kubeconfig != "" {
			check(m.Kubeconfig, "system:serviceaccount:nodeflow:nodeflow-agent")
		}
	}
	check(e.state.UnidlerKubeconfig, "system:serviceaccount:nodeflow:nodeflow-unidler")
	check(e.state.IPAMKubeconfig, "system:serviceaccount:nodeflow:nodeflow-ipam")
}
