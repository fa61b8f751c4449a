package vnetipam

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"nodeflow/deploy"
)

var (
	rbacOnce  sync.Once
	rbacRules []rbacv1.PolicyRule
	rbacErr   error
)

// ipamRules returns the rules of the ClusterRole nodeflow-ipam in
// deploy/rbac/ipam.yaml.
func ipamRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	rbacOnce.Do(func() {
		b, err := deploy.Manifests.ReadFile("rbac/ipam.yaml")
		if err != nil {
			rbacErr = err
			return
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rbacErr = err
				return
			}
			var role rbacv1.ClusterRole
			if err := yaml.Unmarshal(doc, &role); err != nil {
				rbacErr = err
				return
			}
			if role.Kind == "ClusterRole" && role.Name == "nodeflow-ipam" {
				rbacRules = role.Rules
			}
		}
		if rbacRules == nil {
			rbacErr = errors.New("rbac/ipam.yaml has no ClusterRole nodeflow-ipam")
		}
	})
	if rbacErr != nil {
		t.Fatal(rbacErr)
	}
	return rbacRules
}

func allowed(rules []rbacv1.PolicyRule, verb, group, resource string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) && len(r.ResourceNames) == 0 {
			return true
		}
	}
	return false
}

// checkRBAC fails the test when the controllers made a request that the
// ClusterRole of deploy/rbac/ipam.yaml does not allow. The test's own
// requests as the user go through another client; on the clientset,
// only the Node creates are the test's.
func checkRBAC(t *testing.T, actions ...[]k8stesting.Action) {
	rules := ipamRules(t)
	seen := map[string]bool{}
	for _, list := range actions {
		for _, a := range list {
			res := a.GetResource()
			r := res.Resource
			if a.GetSubresource() != "" {
				r += "/" + a.GetSubresource()
			}
			if r == "nodes" && a.GetVerb() == "create" {
				continue
			}
			what := a.GetVerb() + " " + res.Group + "/" + r
			if seen[what] {
				continue
			}
			seen[what] = true
			if !allowed(rules, a.GetVerb(), res.Group, r) {
				t.Errorf("RBAC: deploy/rbac/ipam.yaml does not allow %s, which the controller did", what)
			}
		}
	}
}

// TestRBACCoversTheController runs the paths that make every kind of
// request (assign, default spec.vni, report, re-lock, free) and checks
// them against the ClusterRole; every other test checks its own too.
func TestRBACCoversTheController(t *testing.T) {
	cl := newCluster(t, "n1")
	cl.start("c1")
	cl.subnet("ns", "blue", vniA, "10.0.0.0/24")
	cl.subnet("ns", "blue2", vniA, "10.0.0.0/25") // overlaps: a Subnet status write
	cl.attach("ns", "a", "n1", "blue", 0)
	cl.attach("ns", "b", "n9", "nope", vniA)
	cl.addressed("ns", "a")
	cl.ipamErrors("ns", "b", "not found")
	cl.eventually("Subnet status", func() error {
		if len(cl.subnetStatus("ns", "blue2")) == 0 {
			return errors.New("no errors")
		}
		return nil
	})
	want := []string{"get vnet.nodeflow.io/subnets", "update vnet.nodeflow.io/networkattachments",
		"update vnet.nodeflow.io/networkattachments/status", "update vnet.nodeflow.io/subnets/status",
		"create vnet.nodeflow.io/iplocks", "get /nodes", "list vnet.nodeflow.io/iplocks", "watch /nodes"}
	got := map[string]bool{}
	for _, list := range [][]k8stesting.Action{cl.ctrlDyn.Actions(), cl.kube.Actions()} {
		for _, a := range list {
			r := a.GetResource().Resource
			if a.GetSubresource() != "" {
				r += "/" + a.GetSubresource()
			}
			got[a.GetVerb()+" "+a.GetResource().Group+"/"+r] = true
		}
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("the scenario made no %s request", w)
		}
	}
}
