package service

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServicePortName identifies one port of one Service: the Service's
// namespace and name, the port's name ("" for a single unnamed port) and
// its protocol. It is comparable and keys every map in this package.
type ServicePortName struct {
	types.NamespacedName
	Port     string
	Protocol v1.Protocol
}

// String renders "namespace/name:port/PROTOCOL", e.g. "default/web:http/TCP"
// or "default/dns:/UDP" for an unnamed port. It is the suffix of the
// service's reconciler owner name.
func (n ServicePortName) String() string {
	return fmt.Sprintf("%s/%s:%s/%s", n.Namespace, n.Name, n.Port, n.Protocol)
}

// Compare orders names by namespace, name, port and protocol.
func (n ServicePortName) Compare(o ServicePortName) int {
	if c := strings.Compare(n.Namespace, o.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(n.Name, o.Name); c != 0 {
		return c
	}
	if c := strings.Compare(n.Port, o.Port); c != 0 {
		return c
	}
	return strings.Compare(string(n.Protocol), string(o.Protocol))
}

// ChangeSet is the set of service ports whose model changed in one Update.
type ChangeSet map[ServicePortName]struct{}

// Has reports whether n is in the set.
func (s ChangeSet) Has(n ServicePortName) bool { _, ok := s[n]; return ok }

// Merge adds every member of o to s.
func (s ChangeSet) Merge(o ChangeSet) {
	for n := range o {
		s[n] = struct{}{}
	}
}

// Sorted returns the members in Compare order.
func (s ChangeSet) Sorted() []ServicePortName {
	out := make([]ServicePortName, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	slices.SortFunc(out, ServicePortName.Compare)
	return out
}

// Family is an IP family.
type Family uint8

// IP families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// String renders "IPv4" or "IPv6".
func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// FamilyOf returns a's family; an IPv4-mapped IPv6 address counts as IPv4.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() || a.Is4In6() {
		return IPv4
	}
	return IPv6
}

// InputError is bad input in one API object: which object, which field,
// and what is wrong. The agent logs it and records an Event on the object;
// the rest of the object and every other object are still used.
type InputError struct {
	Kind      string // "Service" or "EndpointSlice"
	Namespace string
	Name      string
	Field     string // e.g. "spec.clusterIPs[1]"
	Err       error
}

// Error renders "proxy: service default/web: spec.ports[0].port: ...".
func (e *InputError) Error() string {
	return fmt.Sprintf("proxy: %s %s/%s: %s: %v", strings.ToLower(e.Kind), e.Namespace, e.Name, e.Field, e.Err)
}

// Unwrap returns the cause.
func (e *InputError) Unwrap() error { return e.Err }
