package deploy

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// TestVirtualNetworksOverlay applies deploy/virtual-networks/'s patch to
// the base DaemonSet as kustomize does (a strategic merge patch) and checks
// the agent it gives: privileged, the host's /run/netns mounted
// bidirectionally, virtual networks on, and nothing of the base lost.
func TestVirtualNetworksOverlay(t *testing.T) {
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	b, err := os.ReadFile("virtual-networks/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k, yaml.DisallowUnknownFields); err != nil {
		t.Fatalf("virtual-networks/kustomization.yaml: %v", err)
	}
	if k.Kind != "Kustomization" || !slices.Equal(k.Resources, []string{".."}) || len(k.Patches) != 1 {
		t.Fatalf("virtual-networks/kustomization.yaml: resources %v, patches %v: want the base and one patch", k.Resources, k.Patches)
	}
	var base *appsv1.DaemonSet
	for _, o := range objects(t) {
		if ds, ok := o.(*appsv1.DaemonSet); ok && ds.Name == "nodeflow-agent" {
			base = ds
		}
	}
	if base == nil {
		t.Fatal("no DaemonSet nodeflow-agent in the base")
	}
	patchYAML, err := os.ReadFile("virtual-networks/" + k.Patches[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSONStrict(patchYAML)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, patch, appsv1.DaemonSet{})
	if err != nil {
		t.Fatalf("apply the patch: %v", err)
	}
	var ds appsv1.DaemonSet
	if err := json.Unmarshal(merged, &ds); err != nil {
		t.Fatal(err)
	}
	find := func(cs []v1.Container, name string) *v1.Container {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
		t.Fatalf("no container %s", name)
		return nil
	}
	c, bc := find(ds.Spec.Template.Spec.Containers, "agent"), find(base.Spec.Template.Spec.Containers, "agent")
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.AllowPrivilegeEscalation == nil || !*sc.AllowPrivilegeEscalation {
		t.Errorf("agent's securityContext %+v: want privileged, with privilege escalation allowed (the API server refuses privileged without it)", sc)
	}
	if !slices.Contains(c.Args, "--virtual-networks=true") {
		t.Errorf("agent's args %v: want --virtual-networks=true", c.Args)
	}
	var netns *v1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == "/run/netns" {
			netns = &c.VolumeMounts[i]
		}
	}
	if netns == nil || netns.MountPropagation == nil || *netns.MountPropagation != v1.MountPropagationBidirectional {
		t.Errorf("agent's /run/netns mount %+v: want it, bidirectional", netns)
	}
	if len(c.VolumeMounts) != len(bc.VolumeMounts)+1 || len(ds.Spec.Template.Spec.Volumes) != len(base.Spec.Template.Spec.Volumes)+1 {
		t.Errorf("the patch replaced the base's mounts or volumes instead of adding one: %d mounts, %d volumes", len(c.VolumeMounts), len(ds.Spec.Template.Spec.Volumes))
	}
	if len(c.Env) != len(bc.Env) || c.Image != bc.Image || c.ReadinessProbe == nil {
		t.Errorf("the patch lost the base container's env, image or probes")
	}
}
