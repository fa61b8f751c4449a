package egressfirewall

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// ObjectRef names one API object of either kind.
type ObjectRef struct {
	Kind      Kind
	Namespace string
	Name      string
	UID       types.UID
}

// String renders "EgressFirewall ns/default".
func (r ObjectRef) String() string {
	return fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name)
}

// FieldError is one problem with one field of one object. Field is a
// JSON path such as "spec.egress[3].to.cidrSelector"; Detail says what is
// wrong with it and, where it helps, what is wanted.
type FieldError struct {
	Object ObjectRef
	Field  string
	Detail string
}

// Error renders "EgressFirewall ns/default: spec.egress[3].to: two
// destinations (cidrSelector and dnsName)".
func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Object, e.Field, e.Detail)
}

// maxListed bounds the problems an ErrorList spells out; the rest are
// counted.
const maxListed = 10

// ErrorList is every problem found in one object, in field order. It is
// never empty when returned as an error.
type ErrorList []*FieldError

// Error names the object once and lists up to ten problems:
// "EgressFirewall ns/default: spec.egress[0].type: ...; spec.egress[2].to: ...
// (and 3 more)".
func (l ErrorList) Error() string {
	if len(l) == 0 {
		return "egressfw: no errors"
	}
	if len(l) == 1 {
		return l[0].Error()
	}
	var sb strings.Builder
	sb.WriteString(l[0].Object.String())
	sb.WriteString(": ")
	for i, e := range l {
		if i == maxListed {
			fmt.Fprintf(&sb, " (and %d more)", len(l)-maxListed)
			break
		}
		if i > 0 {
			sb.WriteString("; ")
		}
		sb.WriteString(e.Field)
		sb.WriteString(": ")
		sb.WriteString(e.Detail)
	}
	return sb.String()
}

// Unwrap returns the problems, so that errors.As finds a *FieldError.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// problems collects the FieldErrors of one object.
type problems struct {
	obj  ObjectRef
	list ErrorList
}

func (p *problems) add(field, format string, args ...any) {
	p.list = append(p.list, &FieldError{Object: p.obj, Field: field, Detail: fmt.Sprintf(format, args...)})
}

// err returns the list as an error, or nil when it is empty.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return p.list
}
