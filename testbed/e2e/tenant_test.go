package e2e

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// tenant is a namespace user, as a shared cluster has them: a
// ServiceAccount of its own namespace, bound to the built-in "admin"
// ClusterRole in that namespace only (it may create Services, pods,
// Deployments, NetworkPolicies and Roles there, and nothing elsewhere),
// acting with its own token. Hostile-tenant tests act through it, never
// through the testbed's admin.
type tenant struct {
	// ns is the tenant's namespace.
	ns string
	// user is the tenant's user name, as the API server sees it.
	user string
	// client acts with the tenant's token.
	client kubernetes.Interface
	// rest is the client's configuration.
	rest *rest.Config
}

// newTenant creates namespace ns (which must not exist) and its user, and
// checks that the user cannot act outside it. extra rules, if any, are
// granted to the user in its namespace on top of "admin" (a cluster that
// lets namespace users write their Services' status, say).
func newTenant(t testing.TB, e *env, ns string, extra ...rbacv1.PolicyRule) *tenant {
	t.Helper()
	ctx := context.Background()
	createNamespace(t, e, ns)
	const account = "tenant"
	if _, err := e.client.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: ns}}
	if _, err := e.client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(extra) > 0 {
		if _, err := e.client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-extra"}, Rules: extra,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-extra"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant-extra"},
			Subjects:   subject,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kc, cfg := accountClient(t, e, ns, account)
	tn := &tenant{ns: ns, user: "system:serviceaccount:" + ns + ":" + account, client: kc, rest: cfg}
	// The user is what the tests say it is: admin of its namespace, and
	// nothing outside it.
	tn.mustBeAllowed(t, true, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "services"})
	tn.mustBeAllowed(t, false, authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Resource: "services"})
	tn.mustBeAllowed(t, false, authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"})
	return tn
}

// accountClient returns a client that acts with a token of the
// ServiceAccount ns/name (which must exist), and its configuration.
func accountClient(t testing.TB, e *env, ns, name string) (kubernetes.Interface, *rest.Config) {
	t.Helper()
	tr, err := e.client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin := adminConfig(t, e, 0)
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	cfg.UserAgent = ns + "/" + name
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc, cfg
}

// as returns e with the tenant's client in place of the admin's, for the
// helpers that create objects through e.client (deployPods): the tenant
// creates them itself.
func (tn *tenant) as(e *env) *env {
	c := *e
	c.client = tn.client
	return &c
}

// mustBeAllowed checks, with a SelfSubjectAccessReview made with the
// tenant's own token, that it may (or may not) do what attrs say.
func (tn *tenant) mustBeAllowed(t testing.TB, want bool, attrs authorizationv1.ResourceAttributes) {
	t.Helper()
	r, err := tn.client.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status.Allowed != want {
		t.Fatalf("tenant %s: %s %s in %q: allowed=%v, want %v (%s)", tn.user, attrs.Verb, attrs.Resource, attrs.Namespace, r.Status.Allowed, want, r.Status.Reason)
	}
}
