package egressfirewall

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// This file reads both APIs' objects from unstructured.Unstructured,
// strictly: a field of the wrong JSON type, an unknown field in spec, or a
// missing spec is a *FieldError naming the object and the field. The
// metadata is read with Unstructured's accessors (the API server has
// checked it); the status is read leniently, since nothing is enforced
// from it and the agents themselves write it.

// DecodeEgressFirewall reads a k8s.ovn.org/v1 EgressFirewall. The result
// shares no memory with u. Its values are not checked beyond their JSON
// types; EgressFirewall.Policy checks them.
func DecodeEgressFirewall(u *unstructured.Unstructured) (*EgressFirewall, error) {
	if u == nil {
		return nil, fmt.Errorf("egressfw: decode %s: nil object", KindEgressFirewall)
	}
	d := newDecoder(KindEgressFirewall, u)
	ef := &EgressFirewall{ObjectMeta: objectMeta(u)}
	items := d.rules(u, []string{"type", "to", "ports"})
	if len(items) > 0 {
		ef.Spec.Egress = make([]EgressFirewallRule, 0, len(items))
	}
	for i := range items {
		r := &items[i]
		rule := EgressFirewallRule{Type: RuleType(r.str("type"))}
		to := r.sub("to")
		to.known("cidrSelector", "dnsName", "nodeSelector")
		rule.To.CIDRSelector = to.str("cidrSelector")
		rule.To.DNSName = to.str("dnsName")
		rule.To.NodeSelector = to.selector("nodeSelector")
		ports := r.items("ports")
		if len(ports) > 0 {
			rule.Ports = make([]EgressFirewallPort, 0, len(ports))
		}
		for j := range ports {
			p := &ports[j]
			p.known("protocol", "port")
			rule.Ports = append(rule.Ports, EgressFirewallPort{Protocol: p.str("protocol"), Port: p.int32("port")})
		}
		ef.Spec.Egress = append(ef.Spec.Egress, rule)
	}
	// status: lenient.
	ef.Status.Status, _, _ = unstructured.NestedString(u.Object, "status", "status")
	ef.Status.Messages, _, _ = unstructured.NestedStringSlice(u.Object, "status", "messages")
	if len(ef.Status.Messages) == 0 {
		ef.Status.Messages = nil
	}
	return ef, d.p.err()
}

// DecodeEgressNetworkPolicy reads a network.openshift.io/v1
// EgressNetworkPolicy. The result shares no memory with u. Its values are
// not checked beyond their JSON types; EgressNetworkPolicy.Policy checks
// them.
func DecodeEgressNetworkPolicy(u *unstructured.Unstructured) (*EgressNetworkPolicy, error) {
	if u == nil {
		return nil, fmt.Errorf("egressfw: decode %s: nil object", KindEgressNetworkPolicy)
	}
	d := newDecoder(KindEgressNetworkPolicy, u)
	enp := &EgressNetworkPolicy{ObjectMeta: objectMeta(u)}
	items := d.rules(u, []string{"type", "to"})
	if len(items) > 0 {
		enp.Spec.Egress = make([]EgressNetworkPolicyRule, 0, len(items))
	}
	for i := range items {
		r := &items[i]
		rule := EgressNetworkPolicyRule{Type: RuleType(r.str("type"))}
		to := r.sub("to")
		to.known("cidrSelector", "dnsName")
		rule.To.CIDRSelector = to.str("cidrSelector")
		rule.To.DNSName = to.str("dnsName")
		enp.Spec.Egress = append(enp.Spec.Egress, rule)
	}
	return enp, d.p.err()
}

// objectMeta copies the metadata the firewall uses.
func objectMeta(u *unstructured.Unstructured) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              u.GetName(),
		Namespace:         u.GetNamespace(),
		UID:               u.GetUID(),
		ResourceVersion:   u.GetResourceVersion(),
		Generation:        u.GetGeneration(),
		CreationTimestamp: u.GetCreationTimestamp(),
	}
}

func refOf(k Kind, u *unstructured.Unstructured) ObjectRef {
	return ObjectRef{Kind: k, Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID()}
}

// decoder holds the problems of one object.
type decoder struct {
	p *problems
}

func newDecoder(k Kind, u *unstructured.Unstructured) *decoder {
	d := &decoder{p: &problems{obj: refOf(k, u)}}
	want := k.GVK()
	if av := u.GetAPIVersion(); av != "" && av != want.GroupVersion().String() {
		d.p.add("apiVersion", "%q: want %s", av, want.GroupVersion())
	}
	if kind := u.GetKind(); kind != "" && kind != want.Kind {
		d.p.add("kind", "%q: want %s", kind, want.Kind)
	}
	return d
}

// rules checks spec and returns a node for each of spec.egress[], with the
// item's fields checked against known. A missing or null spec.egress is no
// rules.
func (d *decoder) rules(u *unstructured.Unstructured, known []string) []node {
	raw, ok := u.Object["spec"]
	if !ok || raw == nil {
		d.p.add("spec", "missing")
		return nil
	}
	spec := &node{d: d, name: "spec", v: raw}
	if spec.object() == nil {
		return nil
	}
	spec.known("egress")
	items := spec.items("egress")
	for i := range items {
		items[i].known(known...)
	}
	return items
}

// node is one value of the object being decoded. Its path is built only
// for a report: a node knows its parent and its own field name or list
// index, so that decoding a large valid object builds no path strings.
type node struct {
	d     *decoder
	up    *node  // nil at the root
	name  string // the field's name; "" for a list item
	index int    // the item's index, when name is ""
	v     any    // nil: absent or null
}

// path is n's field path, such as spec.egress[3].to.cidrSelector.
func (n *node) path() string {
	if n.up == nil {
		return n.name
	}
	if n.name == "" {
		return n.up.path() + "[" + strconv.Itoa(n.index) + "]"
	}
	return n.up.path() + "." + n.name
}

func (n *node) add(format string, args ...any) { n.d.p.add(n.path(), format, args...) }

// jsonType names v's JSON type for error messages.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return "a number"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("a %T", v)
}

// object returns n's value as an object, or nil (reporting a wrong type)
// when it is not one.
func (n *node) object() map[string]any {
	if n.v == nil {
		return nil
	}
	m, ok := n.v.(map[string]any)
	if !ok {
		n.add("want an object, got %s", jsonType(n.v))
		return nil
	}
	return m
}

// child returns the node of field name of object n (absent when n is not
// an object). The child points at n: n must outlive every report made
// through it.
func (n *node) child(name string) node {
	m, _ := n.v.(map[string]any)
	return node{d: n.d, up: n, name: name, v: m[name]}
}

// sub is child for a field that must be an object; a wrong type is
// reported and the result is absent.
func (n *node) sub(name string) node {
	c := n.child(name)
	if c.object() == nil {
		c.v = nil
	}
	return c
}

// known reports every field of object n that is not in names, in sorted
// order.
func (n *node) known(names ...string) {
	m, ok := n.v.(map[string]any)
	if !ok {
		return
	}
	// The common case, every field known, by lookups: a map's keys are
	// distinct, so as many known names present as keys means no other key.
	if len(m) <= len(names) {
		present := 0
		for _, k := range names {
			if _, ok := m[k]; ok {
				present++
			}
		}
		if present == len(m) {
			return
		}
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(names, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	p := n.path()
	for _, k := range unknown {
		n.d.p.add(p+"."+k, "unknown field (known: %s)", strings.Join(names, ", "))
	}
}

// str returns field name of n as a string ("" when absent or of another
// type, which is reported).
func (n *node) str(name string) string {
	m, _ := n.v.(map[string]any)
	v := m[name]
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		c := n.child(name)
		c.add("want a string, got %s", jsonType(v))
	}
	return s
}

// int32 returns field name of n as an int32 (nil when absent or not an
// integer that fits, which is reported).
func (n *node) int32(name string) *int32 {
	c := n.child(name)
	if c.v == nil {
		return nil
	}
	var i int64
	switch v := c.v.(type) {
	case int64:
		i = v
	case int:
		i = int64(v)
	case int32:
		i = int64(v)
	case float64:
		if v != math.Trunc(v) || math.IsInf(v, 0) || v < math.MinInt32 || v > math.MaxInt32 {
			c.add("%v: want an integer", v)
			return nil
		}
		i = int64(v)
	default:
		c.add("want an integer, got %s", jsonType(c.v))
		return nil
	}
	if i < math.MinInt32 || i > math.MaxInt32 {
		c.add("%d: out of range", i)
		return nil
	}
	v := int32(i)
	return &v
}

// list returns the child node of list field name of n on the heap, since
// its items point at it, with its elements; nil when absent or not a list
// (which is reported as want).
func (n *node) list(name, want string) (*node, []any) {
	m, _ := n.v.(map[string]any)
	v := m[name]
	if v == nil {
		return nil, nil
	}
	c := n.child(name)
	l, ok := v.([]any)
	if !ok {
		c.add("want %s, got %s", want, jsonType(v))
		return nil, nil
	}
	return &c, l
}

// items returns the elements of list field name of n, each a checked
// object (an element that is not one is reported and skipped).
func (n *node) items(name string) []node {
	c, l := n.list(name, "a list")
	if c == nil {
		return nil
	}
	out := make([]node, 0, len(l))
	for i, v := range l {
		it := node{d: n.d, up: c, index: i, v: v}
		if v == nil {
			it.add("want an object, got null")
			continue
		}
		if it.object() == nil {
			continue
		}
		out = append(out, it)
	}
	return out
}

// strings returns list field name of n as strings.
func (n *node) strings(name string) []string {
	c, l := n.list(name, "a list of strings")
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(l))
	for i, v := range l {
		s, ok := v.(string)
		if !ok {
			it := node{d: n.d, up: c, index: i, v: v}
			it.add("want a string, got %s", jsonType(v))
			continue
		}
		out = append(out, s)
	}
	return out
}

// selector returns field name of n as a label selector (nil when absent).
// Its values are checked when it is converted to a labels.Selector.
func (n *node) selector(name string) *metav1.LabelSelector {
	c := n.child(name)
	if c.v == nil {
		return nil
	}
	m := c.object()
	if m == nil {
		return nil
	}
	c.known("matchLabels", "matchExpressions")
	sel := &metav1.LabelSelector{}
	ml := c.child("matchLabels")
	if mm := ml.object(); mm != nil {
		sel.MatchLabels = make(map[string]string, len(mm))
		keys := make([]string, 0, len(mm))
		for k := range mm {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := mm[k]
			s, ok := v.(string)
			if !ok {
				n.d.p.add(ml.path()+"."+k, "want a string, got %s", jsonType(v))
				continue
			}
			sel.MatchLabels[k] = s
		}
	}
	exprs := c.items("matchExpressions")
	for i := range exprs {
		e := &exprs[i]
		e.known("key", "operator", "values")
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key:      e.str("key"),
			Operator: metav1.LabelSelectorOperator(e.str("operator")),
			Values:   e.strings("values"),
		})
	}
	return sel
}
