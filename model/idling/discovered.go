package idling

import (
	"context"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
)

// Discovered scales the kinds beyond the four built in, found through the
// API server's discovery: any kind whose resource has a scale subresource,
// such as OpenShift's DeploymentConfig (apps.openshift.io), which `oc
// idle` records as the target of a Service whose pods a
// ReplicationController of a DeploymentConfig runs, or a custom resource.
type Discovered struct {
	// Mapper maps a kind to its resource.
	Mapper meta.RESTMapper
	// Scales reads and writes scale subresources.
	Scales scale.ScalesGetter
	// ScaleKinds says whether a resource has a scale subresource (a
	// DaemonSet, a Job has none).
	ScaleKinds scale.ScaleKindResolver
	// Dynamic patches the objects' annotations.
	Dynamic dynamic.Interface
}

// NewDiscovered builds a Discovered that talks to the API server of cfg.
func NewDiscovered(cfg *rest.Config) (*Discovered, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	kinds := scale.NewDiscoveryScaleKindResolver(cached)
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, kinds)
	if err != nil {
		return nil, fmt.Errorf("scale client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return &Discovered{Mapper: mapper, Scales: scales, ScaleKinds: kinds, Dynamic: dyn}, nil
}

// resetter is a RESTMapper whose cache can be dropped (a kind installed
// after the first lookup).
type resetter interface{ Reset() }

// mapping returns the resource of r's kind, looking again once when the
// cached discovery does not know the kind.
func (d *Discovered) mapping(r Ref) (*meta.RESTMapping, error) {
	gk := schema.GroupKind{Group: r.Group, Kind: r.Kind}
	m, err := d.Mapper.RESTMapping(gk)
	if rs, ok := d.Mapper.(resetter); ok && meta.IsNoMatchError(err) {
		rs.Reset()
		m, err = d.Mapper.RESTMapping(gk)
	}
	return m, err
}

// ops returns the calls for r's kind.
func (d *Discovered) ops(r Ref) (kindOps, error) {
	m, err := d.mapping(r)
	if err != nil {
		return kindOps{}, fmt.Errorf("%s: %w: %v", r, ErrUnsupportedKind, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return kindOps{}, fmt.Errorf("%s: %w: not namespaced", r, ErrUnsupportedKind)
	}
	if _, err := d.ScaleKinds.ScaleForResource(m.Resource); err != nil {
		return kindOps{}, fmt.Errorf("%s: %w: no scale subresource", r, ErrUnsupportedKind)
	}
	gr := m.Resource.GroupResource()
	return kindOps{
		getScale: func(ctx context.Context, ns, name string) (*autoscalingv1.Scale, error) {
			return d.Scales.Scales(ns).Get(ctx, gr, name, metav1.GetOptions{})
		},
		updateScale: func(ctx context.Context, ns, name string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
			return d.Scales.Scales(ns).Update(ctx, gr, s, metav1.UpdateOptions{})
		},
		patch: func(ctx context.Context, ns, name string, p []byte) error {
			_, err := d.Dynamic.Resource(m.Resource).Namespace(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		},
	}, nil
}
