package vnet

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"nodeflow/internal/testutil/crdtest"
)

// TestDocExample checks the example objects of docs/virtual-networks.md:
// the CRDs accept them, the lock is named LockName of its spec, and the
// attachment's MAC is MACOf its address.
func TestDocExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/virtual-networks.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatal("docs/virtual-networks.md has no yaml example")
	}
	block, _, _ = strings.Cut(block, "```")
	validators := map[string]*crdtest.Validator{}
	for _, tc := range crdFiles {
		_, validators[tc.kind] = crdtest.Load(t, tc.file)
	}
	kinds := map[string]bool{}
	for i, doc := range strings.Split(block, "---\n") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		u := &unstructured.Unstructured{}
		if err := utiljson.Unmarshal(j, &u.Object); err != nil {
			t.Fatal(err)
		}
		kinds[u.GetKind()] = true
		v := validators[u.GetKind()]
		if v == nil {
			t.Fatalf("document %d: kind %q", i, u.GetKind())
		}
		if errs := v.Validate(u, nil); len(errs) > 0 {
			t.Errorf("%s %s: the API server would refuse it: %v", u.GetKind(), u.GetName(), errs.ToAggregate())
		}
		switch u.GetKind() {
		case KindIPLock:
			l, err := FromUnstructured[*IPLock](u)
			if err != nil {
				t.Fatal(err)
			}
			if want := LockName(l.Spec.VNI, netip.MustParseAddr(l.Spec.IP)); l.Name != want {
				t.Errorf("the lock is named %s, want %s", l.Name, want)
			}
		case KindNetworkAttachment:
			a, err := FromUnstructured[*NetworkAttachment](u)
			if err != nil {
				t.Fatal(err)
			}
			if want := MACOf(a.Spec.VNI, netip.MustParseAddr(a.Status.IP)).String(); a.Status.MAC != want {
				t.Errorf("the attachment's MAC is %s, want %s", a.Status.MAC, want)
			}
		}
	}
	if len(kinds) != 3 {
		t.Errorf("the example has the kinds %v, want all three", kinds)
	}
}
