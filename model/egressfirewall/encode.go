package egressfirewall

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Unstructured returns ef as the API object (apiVersion, kind, the
// metadata the decoder reads, spec and status), the inverse of
// DecodeEgressFirewall: decoding the result gives ef back. Empty fields are
// left out, as the API server would.
func (ef *EgressFirewall) Unstructured() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(KindEgressFirewall.GVK())
	setMeta(u, ef.ObjectMeta)
	egress := make([]any, 0, len(ef.Spec.Egress))
	for _, r := range ef.Spec.Egress {
		to := map[string]any{}
		putString(to, "cidrSelector", r.To.CIDRSelector)
		putString(to, "dnsName", r.To.DNSName)
		if r.To.NodeSelector != nil {
			to["nodeSelector"] = selectorObject(r.To.NodeSelector)
		}
		item := map[string]any{"to": to}
		putString(item, "type", string(r.Type))
		if len(r.Ports) > 0 {
			ports := make([]any, 0, len(r.Ports))
			for _, p := range r.Ports {
				pm := map[string]any{}
				putString(pm, "protocol", p.Protocol)
				if p.Port != nil {
					pm["port"] = int64(*p.Port)
				}
				ports = append(ports, pm)
			}
			item["ports"] = ports
		}
		egress = append(egress, item)
	}
	u.Object["spec"] = map[string]any{"egress": egress}
	st := map[string]any{}
	putString(st, "status", ef.Status.Status)
	if len(ef.Status.Messages) > 0 {
		msgs := make([]any, len(ef.Status.Messages))
		for i, m := range ef.Status.Messages {
			msgs[i] = m
		}
		st["messages"] = msgs
	}
	if len(st) > 0 {
		u.Object["status"] = st
	}
	return u
}

// Unstructured returns enp as the API object, the inverse of
// DecodeEgressNetworkPolicy.
func (enp *EgressNetworkPolicy) Unstructured() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(KindEgressNetworkPolicy.GVK())
	setMeta(u, enp.ObjectMeta)
	egress := make([]any, 0, len(enp.Spec.Egress))
	for _, r := range enp.Spec.Egress {
		to := map[string]any{}
		putString(to, "cidrSelector", r.To.CIDRSelector)
		putString(to, "dnsName", r.To.DNSName)
		item := map[string]any{"to": to}
		putString(item, "type", string(r.Type))
		egress = append(egress, item)
	}
	u.Object["spec"] = map[string]any{"egress": egress}
	return u
}

func putString(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}

func setMeta(u *unstructured.Unstructured, m metav1.ObjectMeta) {
	u.SetName(m.Name)
	u.SetNamespace(m.Namespace)
	u.SetUID(m.UID)
	u.SetResourceVersion(m.ResourceVersion)
	u.SetGeneration(m.Generation)
	u.SetCreationTimestamp(m.CreationTimestamp)
}

func selectorObject(s *metav1.LabelSelector) map[string]any {
	out := map[string]any{}
	if s.MatchLabels != nil {
		ml := make(map[string]any, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			ml[k] = v
		}
		out["matchLabels"] = ml
	}
	if len(s.MatchExpressions) > 0 {
		exprs := make([]any, 0, len(s.MatchExpressions))
		for _, e := range s.MatchExpressions {
			em := map[string]any{}
			putString(em, "key", e.Key)
			putString(em, "operator", string(e.Operator))
			if e.Values != nil {
				vals := make([]any, len(e.Values))
				for i, v := range e.Values {
					vals[i] = v
				}
				em["values"] = vals
			}
			exprs = append(exprs, em)
		}
		out["matchExpressions"] = exprs
	}
	return out
}
