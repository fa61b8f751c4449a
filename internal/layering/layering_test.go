package layering

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "nodeflow/"

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// under reports whether p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func anyUnder(p string, dirs ...string) bool {
	for _, d := range dirs {
		if under(p, d) {
			return true
		}
	}
	return false
}

// isFeature reports whether p is one of the agent's features.
func isFeature(p string) bool { return strings.HasPrefix(p, "agent/features/") }

// featureList names the packages that may import the features, besides the
// commands: the one list of features.
var featureList = []string{"agent/features"}

// allowed says whether product package from (its non-test files) may
// import project package to; both are relative to the module. It returns
// the rule broken, or "".
func allowed(from, to string) string {
	if anyUnder(to, "internal/testutil", "testbed") && !anyUnder(from, "internal/testutil", "testbed", "cmd/testbed") {
		return "product code imports no test helper and not the testbed"
	}
	if under(to, "cmd") {
		return "nothing imports a command"
	}
	switch {
	case under(from, "cmd"), under(from, "testbed"), under(from, "internal/testutil"):
		return ""
	case under(from, "lib"):
		if !under(to, "lib") {
			return "lib imports only lib"
		}
	case under(from, "model"):
		if !anyUnder(to, "lib", "model") {
			return "model imports only lib and model"
		}
	case under(from, "datapath"):
		if !anyUnder(to, "lib", "model", "datapath") {
			return "datapath imports only lib, model and datapath"
		}
	case under(from, "host"):
		if !anyUnder(to, "lib", "model", "host", "datapath/plan", "datapath/conntrack") {
			return "host imports only lib, model, host and the plan (no flow builder)"
		}
	case under(from, "cluster"):
		if !anyUnder(to, "lib", "model", "cluster", "internal") {
			return "cluster imports only lib, model, cluster and internal"
		}
	case under(from, "internal"):
		if !anyUnder(to, "lib", "model", "internal") {
			return "internal imports only lib, model and internal"
		}
	case under(from, "deploy"):
		return "deploy imports nothing of the project"
	case from == "agent/feature":
		if !anyUnder(to, "lib", "model", "datapath", "host") {
			return "the seam imports no feature and not the agent"
		}
	case isFeature(from) && from != "agent/features":
		if under(to, "agent") && to != "agent/feature" && !under(to, from) {
			return "a feature imports the seam, never the agent or another feature"
		}
	case under(from, "agent"):
		if isFeature(to) && !anyUnder(from, featureList...) {
			return "only the feature list imports the features"
		}
	default:
		return "package " + from + " stands on no known floor: add it to package layering's rules"
	}
	return ""
}

// kubernetesAPI reports whether imp speaks Kubernetes: its API types,
// clients, informers and listers. The Kubernetes modules' generic tools
// (clocks, rate limiters, wait loops) are not that, and lib may use them.
func kubernetesAPI(imp string) bool {
	for _, generic := range []string{"k8s.io/utils/", "k8s.io/apimachinery/pkg/util/", "k8s.io/client-go/util/"} {
		if strings.HasPrefix(imp, generic) {
			return false
		}
	}
	return strings.HasPrefix(imp, "k8s.io/") || strings.HasPrefix(imp, "sigs.k8s.io/")
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		n++
		from := strings.TrimPrefix(p.ImportPath, module)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				if under(from, "lib") && kubernetesAPI(imp) {
					t.Errorf("%s imports %s: lib knows nothing of Kubernetes", from, imp)
				}
				continue
			}
			if rule := allowed(from, strings.TrimPrefix(imp, module)); rule != "" {
				t.Errorf("%s imports %s: %s", from, strings.TrimPrefix(imp, module), rule)
			}
		}
		// Tests may reach anywhere (a test of a cluster controller loads
		// the manifests, a model's test checks what a controller agrees
		// with), but never into a command.
		for _, imp := range append(p.TestImports, p.XTestImports...) {
			if to := strings.TrimPrefix(imp, module); strings.HasPrefix(imp, module) && under(to, "cmd") {
				t.Errorf("a test of %s imports command %s", from, to)
			}
		}
	}
	if n < 40 {
		t.Fatalf("go list found %d packages; the module has many more", n)
	}
}

// TestRules checks the rules themselves on imports they must refuse.
func TestRules(t *testing.T) {
	for _, c := range []struct{ from, to string }{
		{"lib/openflow", "model/service"},
		{"model/service", "datapath/plan"},
		{"datapath/plan", "host/netstack"},
		{"host/netstack", "datapath/nodeflows"},
		{"agent/feature", "agent/features/servicefeature"},
		{"agent/features/servicefeature", "agent"},
		{"agent/features/servicefeature", "agent/features/idlingfeature"},
		{"agent/cleanup", "agent/features/vnetfeature"},
		{"model/service", "internal/testutil/featuretest"},
		{"agent", "cmd/nodeflow"},
		{"newfloor/x", "lib/openflow"},
	} {
		if allowed(c.from, c.to) == "" {
			t.Errorf("%s may import %s; the rules must refuse it", c.from, c.to)
		}
	}
	for _, imp := range []string{"k8s.io/api/core/v1", "k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/apimachinery/pkg/apis/meta/v1"} {
		if !kubernetesAPI(imp) {
			t.Errorf("lib may import %s; the rules must refuse it", imp)
		}
	}
	for _, imp := range []string{"k8s.io/utils/clock", "k8s.io/client-go/util/workqueue", "k8s.io/apimachinery/pkg/util/wait", "github.com/sirupsen/logrus"} {
		if kubernetesAPI(imp) {
			t.Errorf("lib may not import %s; the rules must allow it", imp)
		}
	}
	for _, c := range []struct{ from, to string }{
		{"model/idling", "model/service"},
		{"agent/features/servicefeature", "agent/feature"},
		{"agent", "agent/feature"},
		{"cmd/nodeflow", "agent/features/servicefeature"},
	} {
		if r := allowed(c.from, c.to); r != "" {
			t.Errorf("%s may not import %s (%s); the rules must allow it", c.from, c.to, r)
		}
	}
}
