package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"nodeflow/agent/config"
	"nodeflow/agent/features"
	"nodeflow/internal/ociimage"
)

// objects decodes every manifest but the CRDs (the testbed's API server
// checks those) into typed objects, strictly: an unknown or misspelled
// field fails.
func objects(t *testing.T) []runtime.Object {
	t.Helper()
	dec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Yaml: true, Strict: true})
	var out []runtime.Object
	for _, f := range []string{"namespace.yaml", "rbac/agent.yaml", "rbac/ipam.yaml", "rbac/unidler.yaml", "agent.yaml", "ipam.yaml", "unidler.yaml"} {
		b, err := fs.ReadFile(All, f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for doc := 1; ; doc++ {
			d, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, doc, err)
			}
			if len(bytes.TrimSpace(d)) == 0 || strings.TrimSpace(string(d)) == "---" {
				continue
			}
			obj, _, err := dec.Decode(d, nil, nil)
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, doc, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

// The kustomization lists every manifest, and only those.
func TestKustomizationListsEveryManifest(t *testing.T) {
	b, err := fs.ReadFile(All, "kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var files []string
	if err := fs.WalkDir(All, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") && p != "kustomization.yaml" {
			files = append(files, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(files, listed) {
		t.Errorf("kustomization lists %v, the manifests are %v", listed, files)
	}
}

// The agent's DaemonSet is what a node's network needs: every node, host
// network, node-critical, one node at a time, probed, with its
// configuration file mounted from a ConfigMap that the agent accepts; the
// cluster controllers (the unidler, the IPAM controller) run two replicas
// each, their command named in their args; every ServiceAccount a
// workload uses exists and is bound.
func TestWorkloads(t *testing.T) {
	var ds *appsv1.DaemonSet
	deps := map[string]*appsv1.Deployment{}
	cms := map[string]*v1.ConfigMap{}
	sas := map[string]bool{}
	bound := map[string]bool{}
	for _, o := range objects(t) {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			ds = o
		case *appsv1.Deployment:
			deps[o.Name] = o
		case *v1.ConfigMap:
			cms[o.Name] = o
		case *v1.ServiceAccount:
			sas[o.Namespace+"/"+o.Name] = true
		case *rbacv1.ClusterRoleBinding:
			for _, s := range o.Subjects {
				bound[s.Namespace+"/"+s.Name] = true
			}
		}
	}
	if ds == nil || deps["nodeflow-unidler"] == nil || deps["nodeflow-ipam"] == nil || len(deps) != 2 {
		t.Fatalf("DaemonSet %v, Deployments %v", ds != nil, slices.Sorted(maps.Keys(deps)))
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("agent: hostNetwork %v, priority class %q", spec.HostNetwork, spec.PriorityClassName)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != v1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("agent: tolerations %v, want one that tolerates every taint", spec.Tolerations)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("agent: update strategy %+v, want a rolling update of one node at a time", ds.Spec.UpdateStrategy)
	}
	c := spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("agent: probes %+v %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("agent: requests %v", c.Resources.Requests)
	}
	// The --config file is in a mounted ConfigMap the agent accepts.
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("agent: args %v lack --config", c.Args)
	}
	path := c.Args[i+1]
	var found bool
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, m.MountPath+"/") {
			continue
		}
		for _, vol := range spec.Volumes {
			if vol.Name != m.Name || vol.ConfigMap == nil {
				continue
			}
			cm := cms[vol.ConfigMap.Name]
			if cm == nil {
				t.Fatalf("agent: ConfigMap %s is not among the manifests", vol.ConfigMap.Name)
			}
			key := strings.TrimPrefix(path, m.MountPath+"/")
			if _, err := config.Parse([]byte(cm.Data[key]), features.FileFields()); err != nil {
				t.Errorf("agent: %s in ConfigMap %s: %v", key, cm.Name, err)
			}
			found = true
		}
	}
	if !found {
		t.Errorf("agent: --config %s is not in a mounted ConfigMap", path)
	}
	workloads := []struct{ ns, sa string }{{ds.Namespace, spec.ServiceAccountName}}
	for name, cmd := range map[string]string{"nodeflow-unidler": "unidler", "nodeflow-ipam": "ipam"} {
		dep := deps[name]
		if r := dep.Spec.Replicas; r == nil || *r != 2 {
			t.Errorf("%s: replicas %v, want 2", name, r)
		}
		if cs := dep.Spec.Template.Spec.Containers; len(cs) != 1 || len(cs[0].Args) == 0 || cs[0].Args[0] != cmd {
			t.Errorf("%s: containers %+v, want one running nodeflow %s", name, cs, cmd)
		}
		workloads = append(workloads, struct{ ns, sa string }{dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName})
	}
	for _, w := range workloads {
		if k := w.ns + "/" + w.sa; !sas[k] || !bound[k] {
			t.Errorf("ServiceAccount %s: defined %v, bound %v", k, sas[k], bound[k])
		}
	}
}

// The kind cluster of kind/ is one nodeflow can run: no CNI and no
// kube-proxy, the address ranges of the agent's ConfigMap, and the
// overlay naming the image kind/create-cluster.sh loads.
func TestKindMatchesManifests(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "kind", "kind-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Networking struct {
			DisableDefaultCNI bool   `json:"disableDefaultCNI"`
			KubeProxyMode     string `json:"kubeProxyMode"`
			PodSubnet         string `json:"podSubnet"`
			ServiceSubnet     string `json:"serviceSubnet"`
		} `json:"networking"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		t.Fatal(err)
	}
	n := kc.Networking
	if !n.DisableDefaultCNI || n.KubeProxyMode != "none" {
		t.Errorf("kind-config.yaml: disableDefaultCNI %v, kubeProxyMode %q: want true and none", n.DisableDefaultCNI, n.KubeProxyMode)
	}
	var cfg *config.AgentConfiguration
	for _, o := range objects(t) {
		if cm, ok := o.(*v1.ConfigMap); ok && cm.Name == "nodeflow-agent-config" {
			if cfg, err = config.Parse([]byte(cm.Data["config.yaml"]), features.FileFields()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cfg == nil {
		t.Fatal("no nodeflow-agent-config ConfigMap")
	}
	if got, want := n.PodSubnet, strings.Join(cfg.ClusterCIDRs, ","); got != want {
		t.Errorf("kind podSubnet %q, the agent's clusterCIDRs %q", got, want)
	}
	if got, want := n.ServiceSubnet, strings.Join(cfg.ServiceCIDRs, ","); got != want {
		t.Errorf("kind serviceSubnet %q, the agent's serviceCIDRs %q", got, want)
	}

	b, err = os.ReadFile(filepath.Join("..", "kind", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Images     []struct {
			Name, NewName, NewTag string
		} `json:"images"`
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.Resources, []string{"../deploy"}) || len(k.Images) != 1 ||
		k.Images[0].Name != "nodeflow" || k.Images[0].NewName+":"+k.Images[0].NewTag != ociimage.FullName("nodeflow:kind") {
		t.Errorf("kind/kustomization.yaml: %+v: want ../deploy with nodeflow as %s", k, ociimage.FullName("nodeflow:kind"))
	}
}
