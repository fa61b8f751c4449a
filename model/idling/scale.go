package idling

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// ErrUnsupportedKind is returned for a scalable of a kind this package
// cannot scale.
var ErrUnsupportedKind = errors.New("not a Deployment, ReplicaSet, ReplicationController or StatefulSet, nor a kind the API server scales")

// kindOps are the calls that read and write one kind's scale subresource
// and patch its objects.
type kindOps struct {
	getScale    func(ctx context.Context, ns, name string) (*autoscalingv1.Scale, error)
	updateScale func(ctx context.Context, ns, name string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error)
	patch       func(ctx context.Context, ns, name string, mergePatch []byte) error
}

// Scaler reads and sets the replicas of scalables through their scale
// subresource, and annotates them.
type Scaler struct {
	kinds map[Ref]kindOps // Name unset: keyed by kind and group
	other *Discovered
}

// NewScaler returns a Scaler that works through client, and through other
// for every other kind (nil: the four built-in kinds only).
func NewScaler(client kubernetes.Interface, other *Discovered) *Scaler {
	apps, core := client.AppsV1(), client.CoreV1()
	opts := metav1.UpdateOptions{}
	kinds := map[Ref]kindOps{
		{Kind: "Deployment", Group: "apps"}: {
			getScale: func(ctx context.Context, ns, name string) (*autoscalingv1.Scale, error) {
				return apps.Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
			},
			updateScale: func(ctx context.Context, ns, name string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
				return apps.Deployments(ns).UpdateScale(ctx, name, s, opts)
			},
			patch: func(ctx context.Context, ns, name string, p []byte) error {
				_, err := apps.Deployments(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
				return err
			},
		},
		{Kind: "ReplicaSet", Group: "apps"}: {
			getScale: func(ctx context.Context, ns, name string) (*autoscalingv1.Scale, error) {
				return apps.ReplicaSets(ns).GetScale(ctx, name, metav1.GetOptions{})
			},
			updateScale: func(ctx context.Context, ns, name string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
				return apps.ReplicaSets(ns).UpdateScale(ctx, name, s, opts)
			},
			patch: func(ctx context.Context, ns, name string, p []byte) error {
				_, err := apps.ReplicaSets(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
				return err
			},
		},
		{Kind: "StatefulSet", Group: "apps"}: {
			getScale: func(ctx context.Context, ns, name string) (*autoscalingv1.Scale, error) {
				return apps.StatefulSets(ns).GetScale(ctx, name, metav1.GetOptions{})
			},
			updateScale: func(ctx context.Context, ns, name string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
				return apps.StatefulSets(ns).UpdateScale(ctx, name, s, opts)
			},
			patch: func(ctx context.Context, ns, name string, p []byte) error {
				_, err := apps.StatefulSets(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
				return err
			},
		},
		{Kind: "ReplicationController", Group: ""}: {
			getScale: func(ctx context.Context, ns, name string) (*autoscalingv1.Scale, error) {
				return core.ReplicationControllers(ns).GetScale(ctx, name, metav1.GetOptions{})
			},
			updateScale: func(ctx context.Context, ns, name string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
				return core.ReplicationControllers(ns).UpdateScale(ctx, name, s, opts)
			},
			patch: func(ctx context.Context, ns, name string, p []byte) error {
				_, err := core.ReplicationControllers(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
				return err
			},
		},
	}
	// Old writers recorded Deployments and ReplicaSets in the extensions group.
	kinds[Ref{Kind: "Deployment", Group: "extensions"}] = kinds[Ref{Kind: "Deployment", Group: "apps"}]
	kinds[Ref{Kind: "ReplicaSet", Group: "extensions"}] = kinds[Ref{Kind: "ReplicaSet", Group: "apps"}]
	return &Scaler{kinds: kinds, other: other}
}

// Check returns nil when the Scaler can scale r's kind (a built-in one,
// or one the API server serves a scale subresource for), else an error
// that wraps ErrUnsupportedKind and says why.
func (s *Scaler) Check(r Ref) error {
	_, err := s.ops(r)
	return err
}

func (s *Scaler) ops(r Ref) (kindOps, error) {
	if k, ok := s.kinds[Ref{Kind: r.Kind, Group: r.Group}]; ok {
		return k, nil
	}
	if s.other != nil {
		return s.other.ops(r)
	}
	return kindOps{}, fmt.Errorf("%s: %w", r, ErrUnsupportedKind)
}

// Replicas returns the replicas that the scale subresource of r (in
// namespace ns) asks for.
func (s *Scaler) Replicas(ctx context.Context, ns string, r Ref) (int32, error) {
	k, err := s.ops(r)
	if err != nil {
		return 0, err
	}
	sc, err := k.getScale(ctx, ns, r.Name)
	if err != nil {
		return 0, fmt.Errorf("%s/%s: get scale: %w", ns, r, err)
	}
	return sc.Spec.Replicas, nil
}

// SetReplicas sets the replicas of r (in namespace ns) through its scale
// subresource, retrying on conflicts. When only is not nil, the scale is
// set only while its replicas equal *only, and SetReplicas reports whether
// it set them. An error wraps the API's error (a missing scalable is
// apierrors.IsNotFound).
func (s *Scaler) SetReplicas(ctx context.Context, ns string, r Ref, replicas int32, only *int32) (bool, error) {
	k, err := s.ops(r)
	if err != nil {
		return false, err
	}
	set := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := k.getScale(ctx, ns, r.Name)
		if err != nil {
			return fmt.Errorf("get scale: %w", err)
		}
		if only != nil && sc.Spec.Replicas != *only {
			set = false
			return nil
		}
		if sc.Spec.Replicas == replicas {
			set = true
			return nil
		}
		sc.Spec.Replicas = replicas
		if _, err := k.updateScale(ctx, ns, r.Name, sc); err != nil {
			return fmt.Errorf("update scale to %d: %w", replicas, err)
		}
		set = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("%s/%s: %w", ns, r, err)
	}
	return set, nil
}

// Annotate sets (a non-nil value) or removes (nil) annotations of r, in
// namespace ns, with a JSON merge patch.
func (s *Scaler) Annotate(ctx context.Context, ns string, r Ref, annotations map[string]*string) error {
	k, err := s.ops(r)
	if err != nil {
		return err
	}
	p, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return fmt.Errorf("%s/%s: annotate: %w", ns, r, err)
	}
	if err := k.patch(ctx, ns, r.Name, p); err != nil {
		return fmt.Errorf("%s/%s: annotate: %w", ns, r, err)
	}
	return nil
}
