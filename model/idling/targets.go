package idling

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"nodeflow/model/service"
)

// The annotations of openshift's unidling API (unidling.openshift.io/v1alpha1),
// and the reason of the events that ask for pods.
const (
	// IdledAtAnnotation marks a Service (and each scalable it idled) as
	// idled, with the time of idling in RFC 3339 form, UTC.
	IdledAtAnnotation = service.IdledAtAnnotation
	// UnidleTargetsAnnotation lists, on an idled Service, the scalables to
	// scale back up and their replicas: a JSON list of Target.
	UnidleTargetsAnnotation = "idling.alpha.openshift.io/unidle-targets"
	// PreviousScaleAnnotation records, on an idled scalable, its replicas
	// before idling.
	PreviousScaleAnnotation = "idling.alpha.openshift.io/previous-scale"
	// NeedPodsReason is the reason of the events that ask for an idled
	// Service to be woken up.
	NeedPodsReason = "NeedPods"
)

// Ref names a scalable in the namespace of the Service it backs.
type Ref struct {
	// Kind is the kind of the scalable: Deployment, ReplicaSet,
	// ReplicationController, StatefulSet (or a kind this package cannot
	// scale, such as a DeploymentConfig recorded by `oc idle`).
	Kind string
	// Name is the scalable's name.
	Name string
	// Group is its API group: "apps", or "" for a ReplicationController.
	Group string
}

// String gives the ref as Kind.group/name (Kind/name in the core group).
func (r Ref) String() string {
	if r.Group == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "." + r.Group + "/" + r.Name
}

// Target is one entry of UnidleTargetsAnnotation: a scalable and the
// replicas to give it back when the Service is woken up.
type Target struct {
	Ref
	// Replicas is the scale before idling (at least 1 when written by
	// this package).
	Replicas int32
}

// targetJSON is a Target on the wire, as openshift's RecordedScaleReference:
// {"kind","name","group","replicas"}; group is left out for the core group,
// and the deprecated apiVersion of old writers is read in place of a
// missing group.
type targetJSON struct {
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	APIVersion string `json:"apiVersion,omitempty"`
	Group      string `json:"group,omitempty"`
	Replicas   *int32 `json:"replicas"`
}

// AnnotationError is a Service annotation that cannot be read.
type AnnotationError struct {
	// Service is the Service as namespace/name.
	Service string
	// Annotation is the annotation's key.
	Annotation string
	// Err says what is wrong with its value.
	Err error
}

func (e *AnnotationError) Error() string {
	return fmt.Sprintf("service %s: annotation %s: %v", e.Service, e.Annotation, e.Err)
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// ParseTargets decodes the value of service's UnidleTargetsAnnotation.
// service (namespace/name) only names the Service in errors, which are an
// *AnnotationError. An entry must have a kind and a name that can be an
// object's name, and replicas of 0 or more; a later entry for a scalable
// already listed is ignored. "null" and "[]" are empty lists.
func ParseTargets(service, value string) ([]Target, error) {
	fail := func(err error) ([]Target, error) {
		return nil, &AnnotationError{Service: service, Annotation: UnidleTargetsAnnotation, Err: err}
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return fail(fmt.Errorf("not a JSON list: %w", err))
	}
	out := make([]Target, 0, len(raw))
	seen := make(map[Ref]bool, len(raw))
	for i, r := range raw {
		t, err := parseTarget(r)
		if err != nil {
			return fail(fmt.Errorf("entry %d: %w", i, err))
		}
		if seen[t.Ref] {
			continue
		}
		seen[t.Ref] = true
		out = append(out, t)
	}
	return out, nil
}

func parseTarget(r json.RawMessage) (Target, error) {
	var tj targetJSON
	if bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
		return Target{}, errors.New("null, want an object")
	}
	if err := json.Unmarshal(r, &tj); err != nil {
		return Target{}, err
	}
	t := Target{Ref: Ref{Kind: tj.Kind, Name: tj.Name, Group: tj.Group}}
	if t.Group == "" && tj.APIVersion != "" {
		gv, err := schema.ParseGroupVersion(tj.APIVersion)
		if err != nil {
			return Target{}, fmt.Errorf("apiVersion %q: %w", tj.APIVersion, err)
		}
		t.Group = gv.Group
	}
	if err := validRef(t.Ref); err != nil {
		return Target{}, err
	}
	if tj.Replicas == nil {
		return Target{}, fmt.Errorf("%s: no replicas", t.Ref)
	}
	if *tj.Replicas < 0 {
		return Target{}, fmt.Errorf("%s: replicas %d is negative", t.Ref, *tj.Replicas)
	}
	t.Replicas = *tj.Replicas
	return t, nil
}

// validRef checks that a ref read from an annotation can name an object.
func validRef(r Ref) error {
	if r.Kind == "" {
		return errors.New("kind is empty")
	}
	for _, c := range r.Kind {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return fmt.Errorf("kind %q is not alphanumeric", r.Kind)
		}
	}
	if r.Name == "" {
		return fmt.Errorf("%s: name is empty", r.Kind)
	}
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return fmt.Errorf("%s: name %q: %s", r.Kind, r.Name, strings.Join(errs, "; "))
	}
	if r.Group != "" {
		if errs := validation.IsDNS1123Subdomain(r.Group); len(errs) > 0 {
			return fmt.Errorf("%s %s: group %q: %s", r.Kind, r.Name, r.Group, strings.Join(errs, "; "))
		}
	}
	return nil
}

// FormatTargets encodes ts as the value of UnidleTargetsAnnotation.
func FormatTargets(ts []Target) string {
	out := make([]targetJSON, len(ts))
	for i, t := range ts {
		out[i] = targetJSON{Kind: t.Kind, Name: t.Name, Group: t.Group, Replicas: &ts[i].Replicas}
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic("idling: marshal targets: " + err.Error()) // strings and integers only
	}
	return string(b)
}

// MergeTargets merges the targets found now (current holds each one's
// replicas at this moment) into the list already recorded on the Service,
// as `oc idle` does: a target keeps its current replicas, or, when it is
// already at 0, the replicas recorded for it, or else 1; recorded targets
// not found now are kept, with 1 in place of a recorded 0. The result is
// sorted by group, kind and name.
func MergeTargets(recorded []Target, current []Target) []Target {
	byRef := make(map[Ref]int32, len(recorded)+len(current))
	for _, t := range recorded {
		if _, dup := byRef[t.Ref]; !dup {
			byRef[t.Ref] = t.Replicas
		}
	}
	for _, t := range current {
		if t.Replicas > 0 {
			byRef[t.Ref] = t.Replicas
		} else if _, ok := byRef[t.Ref]; !ok {
			byRef[t.Ref] = 0
		}
	}
	out := make([]Target, 0, len(byRef))
	for ref, r := range byRef {
		out = append(out, Target{Ref: ref, Replicas: max(r, 1)})
	}
	slices.SortFunc(out, func(a, b Target) int {
		return compareRefs(a.Ref, b.Ref)
	})
	return out
}

func compareRefs(a, b Ref) int {
	if c := strings.Compare(a.Group, b.Group); c != 0 {
		return c
	}
	if c := strings.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
