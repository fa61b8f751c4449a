package vnetbench

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

func TestQuantiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if q := quantiles(d); q[0] != 50*time.Millisecond || q[1] != 99*time.Millisecond {
		t.Errorf("quantiles of 1..100 ms: %v, want [50ms 99ms]", q)
	}
	if q := quantiles(nil); q != [2]time.Duration{} {
		t.Errorf("quantiles of nothing: %v", q)
	}
	if q := quantiles([]time.Duration{7}); q != [2]time.Duration{7, 7} {
		t.Errorf("quantiles of one: %v", q)
	}
}

func TestLabelValue(t *testing.T) {
	labels := `code="201",component="apiserver",group="vnet.nodeflow.io",resource="networkattachments",subresource="status",verb="PATCH",version="v1alpha1"`
	for name, want := range map[string]string{"resource": "networkattachments", "subresource": "status", "verb": "PATCH", "code": "201", "dry_run": "", "source": ""} {
		if got := labelValue(labels, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// TestRunRefusesBadOptions checks that bad options are refused before
// anything is created.
func TestRunRefusesBadOptions(t *testing.T) {
	base := Options{Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Kube: kubefake.NewSimpleClientset(),
		Namespace: "b", Attachments: 10, VNIs: 2, SubnetCIDR: "10.0.0.0/24", Concurrency: 1, Nodes: []string{"n1"}}
	for name, c := range map[string]struct {
		edit func(*Options)
		want string
	}{
		"no attachments":     {func(o *Options) { o.Attachments = 0 }, "must be positive"},
		"VNI out of range":   {func(o *Options) { o.FirstVNI = 5 }, "VNI"},
		"VNIs past the last": {func(o *Options) { o.FirstVNI = 0xffffff }, "VNI"},
		"bad CIDR":           {func(o *Options) { o.SubnetCIDR = "10.0.0/8" }, "subnet CIDR"},
		"CIDR too small":     {func(o *Options) { o.SubnetCIDR = "10.0.0.0/30" }, "fewer than"},
		"no clients":         {func(o *Options) { o.Kube = nil }, "required"},
	} {
		t.Run(name, func(t *testing.T) {
			o := base
			c.edit(&o)
			_, err := Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
			if o.Kube != nil {
				if ns, _ := o.Kube.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); len(ns.Items) != 0 {
					t.Errorf("namespaces created for refused options: %d", len(ns.Items))
				}
			}
		})
	}
}

// TestNodeOf checks the spread: every node gets its share, and each VNI
// spans three nodes.
func TestNodeOf(t *testing.T) {
	const n, vnis, nodes = 1000, 100, 10
	perNode := map[int]int{}
	perVNI := map[int]map[int]bool{}
	for i := range n {
		nd := nodeOf(i, vnis, nodes)
		perNode[nd]++
		if perVNI[i%vnis] == nil {
			perVNI[i%vnis] = map[int]bool{}
		}
		perVNI[i%vnis][nd] = true
	}
	for nd := range nodes {
		if perNode[nd] < 80 || perNode[nd] > 120 {
			t.Errorf("node %d: %d attachments, want about 100", nd, perNode[nd])
		}
	}
	for v, ns := range perVNI {
		if len(ns) != 3 {
			t.Errorf("VNI %d spans %d nodes, want 3", v, len(ns))
		}
	}
}
