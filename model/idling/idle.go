package idling

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Options configure Idle.
type Options struct {
	// Client reads and writes the cluster.
	Client kubernetes.Interface
	// Discovered scales the kinds beyond Deployment, ReplicaSet,
	// ReplicationController and StatefulSet (a DeploymentConfig); nil
	// refuses them.
	Discovered *Discovered
	// DryRun finds and reports what would be done, and writes nothing.
	DryRun bool
	// Now gives the idling time (default time.Now). It is written in
	// UTC, to the second.
	Now func() time.Time
}

// ServiceResult is what Idle did with one Service.
type ServiceResult struct {
	// Service is the Service's namespace and name.
	Service types.NamespacedName
	// Targets is the list recorded in its UnidleTargetsAnnotation (or
	// that would be, in a dry run): the scalables found now merged with
	// those recorded before.
	Targets []Target
	// Err says why the Service was not idled; then it was not changed.
	Err error
}

// ScalableResult is what Idle did with one scalable.
type ScalableResult struct {
	// Namespace is the scalable's namespace.
	Namespace string
	// Ref names the scalable.
	Ref Ref
	// Previous is its replicas before idling.
	Previous int32
	// Err says why it was not scaled to 0 (it may still be listed on
	// its Service, which then wakes it up).
	Err error
}

// Report is the outcome of Idle.
type Report struct {
	// IdledAt is the time written to the annotations.
	IdledAt time.Time
	// DryRun says that nothing was written.
	DryRun bool
	// Services has one result per Service asked for, in order.
	Services []ServiceResult
	// Scalables has one result per scalable found, sorted.
	Scalables []ScalableResult
}

// Err joins the errors of the report, nil when everything was idled.
func (r *Report) Err() error {
	var errs []error
	for _, s := range r.Services {
		errs = append(errs, s.Err)
	}
	for _, s := range r.Scalables {
		errs = append(errs, s.Err)
	}
	return errors.Join(errs...)
}

// scalableKey is a scalable across namespaces.
type scalableKey struct {
	ns  string
	ref Ref
}

// Idle idles services (see the package documentation). A Service that
// cannot be idled (missing, no ready endpoint of a scalable pod, a pod
// without a controller or of a controller that cannot be scaled, a
// malformed UnidleTargetsAnnotation already on it) is reported and left
// unchanged; the others are idled. It returns an error only when ctx ends.
func Idle(ctx context.Context, opts Options, services []types.NamespacedName) (*Report, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	rep := &Report{IdledAt: now().UTC().Truncate(time.Second), DryRun: opts.DryRun}
	scaler := NewScaler(opts.Client, opts.Discovered)
	f := newFinder(opts.Client, scaler)

	// The scalables behind each Service.
	refs := make([][]Ref, len(services))
	for i, name := range services {
		rep.Services = append(rep.Services, ServiceResult{Service: name})
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		svc, err := opts.Client.CoreV1().Services(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
		if err != nil {
			rep.Services[i].Err = fmt.Errorf("service %s: %w", name, err)
			continue
		}
		found, err := f.find(ctx, name.Namespace, name.Name)
		if err != nil {
			rep.Services[i].Err = err
			continue
		}
		if len(found) == 0 {
			rep.Services[i].Err = noTargets(svc)
			continue
		}
		refs[i] = found
	}

	// Their current replicas, once per scalable.
	current := map[scalableKey]int32{}
	failed := map[scalableKey]error{}
	for i, name := range services {
		for _, r := range refs[i] {
			k := scalableKey{name.Namespace, r}
			if _, ok := current[k]; ok || failed[k] != nil {
				continue
			}
			n, err := scaler.Replicas(ctx, name.Namespace, r)
			if err != nil {
				failed[k] = err
				continue
			}
			current[k] = n
		}
	}

	// Annotate the Services first, so that no request goes unnoticed.
	recorded := map[scalableKey]int32{}
	var order []scalableKey
	for i, name := range services {
		if rep.Services[i].Err != nil {
			continue
		}
		var found []Target
		for _, r := range refs[i] {
			k := scalableKey{name.Namespace, r}
			if err := failed[k]; err != nil {
				rep.Services[i].Err = errors.Join(rep.Services[i].Err, fmt.Errorf("service %s: %w", name, err))
				continue
			}
			found = append(found, Target{Ref: r, Replicas: current[k]})
		}
		if rep.Services[i].Err != nil {
			continue
		}
		merged, err := annotateService(ctx, opts, name, found, rep.IdledAt)
		rep.Services[i].Targets = merged
		if err != nil {
			rep.Services[i].Err = err
			continue
		}
		for _, t := range found {
			k := scalableKey{name.Namespace, t.Ref}
			if _, ok := recorded[k]; !ok {
				order = append(order, k)
			}
			for _, m := range merged {
				if m.Ref == t.Ref {
					recorded[k] = max(recorded[k], m.Replicas)
				}
			}
		}
	}

	// Then mark and scale the scalables of the annotated Services.
	for _, k := range order {
		res := ScalableResult{Namespace: k.ns, Ref: k.ref, Previous: current[k]}
		if !opts.DryRun {
			res.Err = idleScalable(ctx, scaler, k, recorded[k], rep.IdledAt)
		}
		rep.Scalables = append(rep.Scalables, res)
	}
	return rep, ctx.Err()
}

// noTargets says why a Service with no scalable behind it cannot be idled.
func noTargets(svc *v1.Service) error {
	name := svc.Namespace + "/" + svc.Name
	if at, ok := svc.Annotations[IdledAtAnnotation]; ok {
		return fmt.Errorf("service %s: already idled (%s %s) and no ready endpoint left", name, IdledAtAnnotation, at)
	}
	return fmt.Errorf("service %s: no ready endpoint backed by a pod of a scalable", name)
}

// annotateService merges targets into the Service's recorded list and
// writes it with the idling time (unless in a dry run). It returns the
// merged list.
func annotateService(ctx context.Context, opts Options, name types.NamespacedName, targets []Target, at time.Time) ([]Target, error) {
	var merged []Target
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := opts.Client.CoreV1().Services(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
		var old []Target
		if v, ok := svc.Annotations[UnidleTargetsAnnotation]; ok {
			// Never overwrite a list that cannot be read: its targets
			// would never be woken up.
			if old, err = ParseTargets(name.String(), v); err != nil {
				return err
			}
		}
		merged = MergeTargets(old, targets)
		if opts.DryRun {
			return nil
		}
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[IdledAtAnnotation] = at.Format(time.RFC3339)
		svc.Annotations[UnidleTargetsAnnotation] = FormatTargets(merged)
		if _, err := opts.Client.CoreV1().Services(name.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("service %s: annotate: %w", name, err)
		}
		return nil
	})
	return merged, err
}

// idleScalable marks a scalable as idled and scales it to 0.
func idleScalable(ctx context.Context, s *Scaler, k scalableKey, previous int32, at time.Time) error {
	prev, when := strconv.Itoa(int(previous)), at.Format(time.RFC3339)
	if err := s.Annotate(ctx, k.ns, k.ref, map[string]*string{PreviousScaleAnnotation: &prev, IdledAtAnnotation: &when}); err != nil {
		return err
	}
	_, err := s.SetReplicas(ctx, k.ns, k.ref, 0, nil)
	return err
}
