package egressfirewall

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Selection is what Select decided for one namespace.
type Selection struct {
	Namespace string
	// Policy is the policy to enforce. nil with Hold false: the namespace
	// has no egress firewall (remove its rules).
	Policy *Policy
	// Hold is set when the object that should be enforced (Chosen) is
	// invalid: keep enforcing what was enforced before for the namespace,
	// whatever it was (bad input never wipes good state), until it is
	// fixed or deleted. Problems holds its errors.
	Hold bool
	// Chosen is the object that wins, valid or not; zero when there is
	// none.
	Chosen ObjectRef
	// Reason says why Chosen wins, for logs and events.
	Reason string
	// Problems lists every object that is not enforced as it stands (the
	// chosen one when it is invalid, and every other one), each with why.
	Problems []Problem
}

// Problem is one object of a namespace that is not enforced, and why.
type Problem struct {
	Object ObjectRef
	// Reason is a short CamelCase reason for a Kubernetes event.
	Reason string
	// Err says what is wrong, naming the object and the field.
	Err error
}

// Event reasons of Problems.
const (
	// ReasonInvalid: the object has bad values or shape (Err is an
	// ErrorList of FieldErrors).
	ReasonInvalid = "EgressFirewallInvalid"
	// ReasonNotDefault: an EgressFirewall not named "default".
	ReasonNotDefault = "EgressFirewallNotDefault"
	// ReasonDuplicate: a second EgressNetworkPolicy in the namespace; the
	// oldest is enforced.
	ReasonDuplicate = "EgressNetworkPolicyDuplicate"
	// ReasonShadowed: an EgressNetworkPolicy in a namespace with an
	// EgressFirewall named "default", which wins.
	ReasonShadowed = "EgressNetworkPolicyShadowed"
	// ReasonWrongObject: an object of another kind or namespace was
	// passed to Select.
	ReasonWrongObject = "EgressFirewallWrongObject"
)

// candidate is one decoded object of the namespace.
type candidate struct {
	ref ObjectRef
	u   *unstructured.Unstructured
}

// Select decides which of a namespace's EgressFirewalls and
// EgressNetworkPolicies (objs, in any order, as the dynamic informers hold
// them) is enforced:
//
//  1. The EgressFirewall named "default" wins, if there is one: it is the
//     richer and current API, and a namespace that has been given one is
//     being moved to it. Every EgressNetworkPolicy is then reported
//     (ReasonShadowed). EgressFirewalls with other names are never
//     enforced (ReasonNotDefault), as in ovn-kubernetes.
//  2. Otherwise the oldest EgressNetworkPolicy wins (creation time, then
//     name): openshift-sdn allowed one per namespace and, with two, dropped
//     all of the namespace's external traffic; nodeflow keeps enforcing the
//     one that was there first and reports the others (ReasonDuplicate).
//  3. The winner is decided before its values are checked, so a bad edit
//     never hands the namespace to another object: when the winner is
//     invalid, Hold is set and its errors are a Problem (ReasonInvalid).
//
// Objects of another namespace or kind are reported (ReasonWrongObject)
// and otherwise ignored.
func Select(namespace string, objs []*unstructured.Unstructured) Selection {
	sel := Selection{Namespace: namespace}
	var efs, enps []candidate
	for _, u := range objs {
		if u == nil {
			continue
		}
		gvk := u.GroupVersionKind()
		var c candidate
		switch {
		case gvk.Group == EgressFirewallGVR.Group && gvk.Kind == string(KindEgressFirewall):
			c.ref = refOf(KindEgressFirewall, u)
		case gvk.Group == EgressNetworkPolicyGVR.Group && gvk.Kind == string(KindEgressNetworkPolicy):
			c.ref = refOf(KindEgressNetworkPolicy, u)
		default:
			sel.Problems = append(sel.Problems, Problem{
				Object: ObjectRef{Kind: Kind(gvk.Kind), Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID()},
				Reason: ReasonWrongObject,
				Err:    fmt.Errorf("egressfw: %s %s/%s: not an EgressFirewall or EgressNetworkPolicy", gvk, u.GetNamespace(), u.GetName()),
			})
			continue
		}
		c.u = u
		if u.GetNamespace() != namespace {
			sel.Problems = append(sel.Problems, Problem{Object: c.ref, Reason: ReasonWrongObject,
				Err: fmt.Errorf("egressfw: %s: not in namespace %q", c.ref, namespace)})
			continue
		}
		if c.ref.Kind == KindEgressFirewall {
			efs = append(efs, c)
		} else {
			enps = append(enps, c)
		}
	}
	slices.SortFunc(efs, byAge)
	slices.SortFunc(enps, byAge)

	var winner *candidate
	for i := range efs {
		c := &efs[i]
		if c.ref.Name == EgressFirewallName {
			winner = c
			sel.Reason = fmt.Sprintf("%s is the namespace's EgressFirewall", c.ref)
			continue
		}
		sel.Problems = append(sel.Problems, Problem{Object: c.ref, Reason: ReasonNotDefault,
			Err: &FieldError{Object: c.ref, Field: "metadata.name",
				Detail: fmt.Sprintf("%q: only the EgressFirewall named %q is enforced", c.ref.Name, EgressFirewallName)}})
	}
	for i := range enps {
		c := &enps[i]
		switch {
		case winner != nil && winner.ref.Kind == KindEgressFirewall:
			sel.Problems = append(sel.Problems, Problem{Object: c.ref, Reason: ReasonShadowed,
				Err: fmt.Errorf("egressfw: %s: not enforced: %s takes precedence over EgressNetworkPolicy", c.ref, winner.ref)})
		case winner == nil:
			winner = c
			if len(enps) == 1 {
				sel.Reason = fmt.Sprintf("%s is the namespace's only egress policy", c.ref)
			} else {
				sel.Reason = fmt.Sprintf("%s is the oldest of %d EgressNetworkPolicies (%s)", c.ref, len(enps), names(enps))
			}
		default:
			sel.Problems = append(sel.Problems, Problem{Object: c.ref, Reason: ReasonDuplicate,
				Err: fmt.Errorf("egressfw: %s: not enforced: a namespace has one EgressNetworkPolicy, and %s is older", c.ref, winner.ref)})
		}
	}
	if winner == nil {
		return sel
	}
	sel.Chosen = winner.ref
	pol, err := winner.decode()
	if err != nil {
		sel.Hold = true
		sel.Problems = append([]Problem{{Object: winner.ref, Reason: ReasonInvalid, Err: err}}, sel.Problems...)
		return sel
	}
	sel.Policy = pol
	return sel
}

// decode decodes and converts the candidate's object.
func (c *candidate) decode() (*Policy, error) {
	if c.ref.Kind == KindEgressFirewall {
		ef, err := DecodeEgressFirewall(c.u)
		if err != nil {
			return nil, err
		}
		return ef.Policy()
	}
	enp, err := DecodeEgressNetworkPolicy(c.u)
	if err != nil {
		return nil, err
	}
	return enp.Policy()
}

// byAge orders candidates oldest first, then by name and UID.
func byAge(a, b candidate) int {
	if c := a.u.GetCreationTimestamp().Compare(b.u.GetCreationTimestamp().Time); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.ref.Name, b.ref.Name), strings.Compare(string(a.ref.UID), string(b.ref.UID)))
}

func names(cs []candidate) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ref.Name
	}
	return strings.Join(out, ", ")
}

// FromUnstructured decodes and checks one object of either kind.
func FromUnstructured(u *unstructured.Unstructured) (*Policy, error) {
	if u == nil {
		return nil, fmt.Errorf("egressfw: nil object")
	}
	gvk := u.GroupVersionKind()
	c := candidate{u: u}
	switch {
	case gvk.Group == EgressFirewallGVR.Group && gvk.Kind == string(KindEgressFirewall):
		c.ref.Kind = KindEgressFirewall
	case gvk.Group == EgressNetworkPolicyGVR.Group && gvk.Kind == string(KindEgressNetworkPolicy):
		c.ref.Kind = KindEgressNetworkPolicy
	default:
		return nil, fmt.Errorf("egressfw: %s %s/%s: not an EgressFirewall or EgressNetworkPolicy", gvk, u.GetNamespace(), u.GetName())
	}
	return c.decode()
}
