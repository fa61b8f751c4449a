package egressfirewall

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"nodeflow/internal/testutil/crdtest"
)

// TestCRDs checks deploy/crds/egressfirewalls.yaml and
// egressnetworkpolicies.yaml: names, scope and limits match this package,
// and the API server would accept the CRDs.
func TestCRDs(t *testing.T) {
	for _, tc := range []struct {
		file     string
		kind     Kind
		resource string
		group    string
		max      int
		status   bool
	}{
		{"egressfirewalls.yaml", KindEgressFirewall, EgressFirewallGVR.Resource, EgressFirewallGVR.Group, MaxEgressFirewallRules, true},
		{"egressnetworkpolicies.yaml", KindEgressNetworkPolicy, EgressNetworkPolicyGVR.Resource, EgressNetworkPolicyGVR.Group, MaxEgressNetworkPolicyRules, false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			crd, _ := crdtest.Load(t, tc.file)
			gvk := tc.kind.GVK()
			v := crd.Spec.Versions[0]
			if crd.Name != tc.resource+"."+tc.group || crd.Spec.Group != gvk.Group || crd.Spec.Names.Kind != gvk.Kind ||
				crd.Spec.Names.Plural != tc.resource || crd.Spec.Scope != apiextensionsv1.NamespaceScoped ||
				v.Name != gvk.Version || !v.Served || !v.Storage {
				t.Errorf("names: %s %s %s %s %s %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, crd.Spec.Scope, v.Name)
			}
			if got := v.Subresources != nil && v.Subresources.Status != nil; got != tc.status {
				t.Errorf("status subresource %v, want %v", got, tc.status)
			}
			egress := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["egress"]
			if egress.MaxItems == nil || *egress.MaxItems != int64(tc.max) {
				t.Errorf("spec.egress maxItems %v, want %d", egress.MaxItems, tc.max)
			}
		})
	}
}

// TestCRDsAgreeWithTheDecoder validates objects with the CRDs' schemas and
// CEL rules, as the API server would on create, and checks that the
// decoder agrees: what the API server refuses, Policy refuses too (so an
// object written before the CRD was installed, or through an older one,
// is still caught), and what it accepts, Policy accepts, except where the
// decoder is deliberately stricter.
func TestCRDsAgreeWithTheDecoder(t *testing.T) {
	_, efv := crdtest.Load(t, "egressfirewalls.yaml")
	_, enpv := crdtest.Load(t, "egressnetworkpolicies.yaml")
	many := func(n int) string {
		return strings.Repeat("  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}\n", n)
	}
	for _, tc := range []struct {
		name string
		obj  string
		api  string // a substring of the API server's error; "" accepts
		// stricter: the decoder refuses what the API server accepts.
		stricter bool
	}{
		{"every kind of rule", ef("default", t0, `
  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: TCP, port: 443}, {protocol: UDP}, {protocol: SCTP, port: 9}]}
  - {type: Allow, to: {cidrSelector: "2001:db8::/32"}}
  - {type: Allow, to: {dnsName: "*.Example.com"}}
  - {type: Allow, to: {dnsName: example.com.}}
  - {type: Allow, to: {nodeSelector: {matchLabels: {role: infra}, matchExpressions: [{key: zone, operator: In, values: [a]}]}}}
  - {type: Deny, to: {nodeSelector: {}}}
`), "", false},
		{"no rules", ef("default", t0, "    []\n"), "", false},
		{"10,000 rules", ef("default", t0, many(MaxEgressFirewallRules)), "", false},
		{"10,001 rules", ef("default", t0, many(MaxEgressFirewallRules+1)), "must have at most 10000 items", false},
		{"not named default", ef("mine", t0, many(1)), "metadata.name: Invalid value: an EgressFirewall must be named default", false},
		{"two destinations", ef("default", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.0/8, dnsName: a.example}}\n"), "spec.egress[0].to: Too many: 2: must have at most 1 item", false},
		{"no destination", ef("default", t0, "  - {type: Deny, to: {}}\n"), "spec.egress[0].to in body should have at least 1 properties", false},
		{"invalid CIDR", ef("default", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.0/33}}\n"), "cidrSelector", false},
		{"address without a length", ef("default", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.1}}\n"), "cidrSelector", false},
		{"unknown protocol", ef("default", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: ICMP}]}\n"), "Unsupported value: \"ICMP\"", false},
		{"port 0", ef("default", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: TCP, port: 0}]}\n"), "should be greater than or equal to 1", false},
		{"bad type", ef("default", t0, "  - {type: Block, to: {cidrSelector: 10.0.0.0/8}}\n"), "Unsupported value: \"Block\"", false},
		{"wildcard in the middle", ef("default", t0, "  - {type: Deny, to: {dnsName: \"a.*.example.com\"}}\n"), "dnsName", false},
		{"underscore", ef("default", t0, "  - {type: Deny, to: {dnsName: a_b.example.com}}\n"), "dnsName", false},
		{"dnsName that is an address", ef("default", t0, "  - {type: Deny, to: {dnsName: 192.0.2.1}}\n"), "", true},
		{"bad selector operator", ef("default", t0, "  - {type: Deny, to: {nodeSelector: {matchExpressions: [{key: a, operator: Near}]}}}\n"), "", true},
		{"ENP: allowlist", enp("p", t0, "  - {type: Allow, to: {dnsName: example.com}}\n  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}\n"), "", false},
		{"ENP: 1,001 rules", enp("p", t0, many(MaxEgressNetworkPolicyRules+1)), "must have at most 1000 items", false},
		{"ENP: two destinations", enp("p", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.0/8, dnsName: a.example}}\n"), "spec.egress[0].to: Too many: 2: must have at most 1 item", false},
		{"ENP: a wildcard", enp("p", t0, "  - {type: Deny, to: {dnsName: \"*.example.com\"}}\n"), "dnsName", false},
		{"ENP: ports", enp("p", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: TCP}]}\n"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := obj(t, tc.obj)
			v := efv
			if u.GetKind() == string(KindEgressNetworkPolicy) {
				v = enpv
			}
			errs := v.Validate(u, nil)
			switch {
			case tc.api == "" && len(errs) > 0:
				t.Fatalf("the API server would refuse it: %v", errs.ToAggregate())
			case tc.api != "" && !strings.Contains(errs.ToAggregate().Error(), tc.api):
				t.Fatalf("the API server's errors %v lack %q", errs.ToAggregate(), tc.api)
			}
			_, err := FromUnstructured(u)
			if u.GetKind() == string(KindEgressFirewall) && u.GetName() != EgressFirewallName {
				// FromUnstructured checks the name too.
				if err == nil {
					t.Fatal("the decoder accepts an EgressFirewall not named default")
				}
				return
			}
			if wantErr := tc.api != "" || tc.stricter; (err != nil) != wantErr {
				t.Errorf("decoder error %v, want an error: %v", err, wantErr)
			}
		})
	}
}
