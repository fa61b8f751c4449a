package egressfirewall

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// obj reads a YAML object the way the dynamic client hands it over: JSON
// numbers that are integers become int64.
func obj(t testing.TB, y string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("yaml: %v", err)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		t.Fatalf("json: %v", err)
	}
	return &unstructured.Unstructured{Object: m}
}

// ef returns an EgressFirewall in namespace ns named name with the YAML of
// spec.egress (indented by 4 spaces, as a list).
func ef(name, created, egress string) string {
	return `apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: ` + name + `, namespace: ns, uid: uid-` + name + `, creationTimestamp: "` + created + `"}
spec:
  egress:
` + egress
}

func enp(name, created, egress string) string {
	return `apiVersion: network.openshift.io/v1
kind: EgressNetworkPolicy
metadata: {name: ` + name + `, namespace: ns, uid: uid-` + name + `, creationTimestamp: "` + created + `"}
spec:
  egress:
` + egress
}

const t0, t1, t2 = "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"

func TestEgressFirewallPolicy(t *testing.T) {
	u := obj(t, ef("default", t0, `
  - type: Allow
    to: {cidrSelector: 10.1.2.3/16}
    ports: [{protocol: TCP, port: 443}, {protocol: UDP}]
  - type: Allow
    to: {dnsName: WWW.Example.COM.}
  - type: Allow
    to: {dnsName: "*.example.org"}
  - type: Allow
    to: {nodeSelector: {matchLabels: {role: infra}, matchExpressions: [{key: zone, operator: In, values: [a, b]}]}}
  - type: Allow
    to: {nodeSelector: {}}
  - type: Deny
    to: {cidrSelector: "::/0"}
    ports: [{protocol: SCTP, port: 9}]
  - type: Deny
    to: {cidrSelector: 0.0.0.0/0}
`))
	fw, err := DecodeEgressFirewall(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fw.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if p.Namespace != "ns" || p.Source.Kind != KindEgressFirewall || p.Source.Name != "default" || p.Source.UID != "uid-default" ||
		p.Source.CreationTimestamp.UTC().Format("2006-01-02") != "2024-01-01" {
		t.Errorf("source: %+v in %q", p.Source, p.Namespace)
	}
	want := []struct {
		action Action
		dest   string
		ports  []Port
	}{
		{Allow, "cidrSelector 10.1.0.0/16", []Port{{TCP, 443}, {UDP, 0}}},
		{Allow, "dnsName www.example.com", nil},
		{Allow, "dnsName *.example.org", nil},
		{Allow, "nodeSelector role=infra,zone in (a,b)", nil},
		{Allow, "nodeSelector ", nil},
		{Deny, "cidrSelector ::/0", []Port{{SCTP, 9}}},
		{Deny, "cidrSelector 0.0.0.0/0", nil},
	}
	if len(p.Rules) != len(want) {
		t.Fatalf("%d rules, want %d", len(p.Rules), len(want))
	}
	for i, w := range want {
		r := p.Rules[i]
		if r.Index != i || r.Action != w.action || r.Dest.String() != w.dest || !slices.Equal(r.Ports, w.ports) {
			t.Errorf("rule %d: %d %s %q %v, want %s %q %v", i, r.Index, r.Action, r.Dest, r.Ports, w.action, w.dest, w.ports)
		}
	}
	if !p.Rules[4].Dest.NodeSelector.Empty() || !p.Rules[4].Dest.NodeSelector.Matches(labels.Set{"any": "node"}) {
		t.Errorf("an empty nodeSelector must select every node")
	}
	if !p.HasDNSNames() {
		t.Error("HasDNSNames false")
	}
	if !p.Equal(p) || p.Equal(nil) {
		t.Error("Equal")
	}
	// The round trip keeps the policy.
	fw2, err := DecodeEgressFirewall(fw.Unstructured())
	if err != nil {
		t.Fatal(err)
	}
	p2, err := fw2.Policy()
	if err != nil || !p.Equal(p2) {
		t.Errorf("round trip: %v, equal %v", err, p.Equal(p2))
	}
}

func TestEgressNetworkPolicyPolicy(t *testing.T) {
	u := obj(t, enp("p", t0, `
  - {type: Allow, to: {dnsName: example.com}}
  - {type: Allow, to: {cidrSelector: 192.0.2.0/24}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
`))
	p, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source.Kind != KindEgressNetworkPolicy || len(p.Rules) != 3 || p.Rules[1].Dest.CIDR != netip.MustParsePrefix("192.0.2.0/24") ||
		p.Rules[2].Action != Deny || len(p.Rules[0].Ports) != 0 {
		t.Errorf("policy: %+v", p)
	}
}

// TestBadInput checks that every kind of bad input the issue lists is an
// error naming the object and the field.
func TestBadInput(t *testing.T) {
	many := func(n int, rule string) string {
		return strings.Repeat(rule, n)
	}
	for _, tc := range []struct {
		name string
		obj  string
		want []string // each a substring of the error
	}{
		{"invalid CIDR", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/33}}\n"),
			[]string{`EgressFirewall ns/default: spec.egress[0].to.cidrSelector: "10.0.0.0/33": invalid CIDR`}},
		{"address without length", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.1}}\n"),
			[]string{`spec.egress[0].to.cidrSelector: "10.0.0.1": an address, not a CIDR (add /32 or /128)`}},
		{"IPv4-mapped IPv6", enp("p", t0, "  - {type: Allow, to: {cidrSelector: \"::ffff:10.0.0.0/104\"}}\n"),
			[]string{`EgressNetworkPolicy ns/p: spec.egress[0].to.cidrSelector`, "IPv4-mapped"}},
		{"two destinations", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}}\n  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}}\n  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}}\n  - {type: Deny, to: {cidrSelector: 10.0.0.0/8, dnsName: a.example}}\n"),
			[]string{`EgressFirewall ns/default: spec.egress[3].to: two destinations (cidrSelector and dnsName)`}},
		{"three destinations", ef("default", t0, "  - {type: Deny, to: {cidrSelector: 10.0.0.0/8, dnsName: a.example, nodeSelector: {}}}\n"),
			[]string{`spec.egress[0].to: three destinations (cidrSelector, dnsName and nodeSelector)`}},
		{"no destination", ef("default", t0, "  - {type: Deny, to: {}}\n"),
			[]string{`spec.egress[0].to: no destination (want one of cidrSelector, dnsName or nodeSelector)`}},
		{"no destination in an ENP", enp("p", t0, "  - {type: Deny}\n"),
			[]string{`EgressNetworkPolicy ns/p: spec.egress[0].to: no destination (want one of cidrSelector or dnsName)`}},
		{"nodeSelector in an ENP", enp("p", t0, "  - {type: Deny, to: {nodeSelector: {}}}\n"),
			[]string{`spec.egress[0].to.nodeSelector: unknown field (known: cidrSelector, dnsName)`}},
		{"unknown protocol", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: ICMP}]}\n"),
			[]string{`spec.egress[0].ports[0].protocol: "ICMP": unknown protocol (want TCP, UDP or SCTP)`}},
		{"lower-case protocol", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: tcp, port: 80}]}\n"),
			[]string{`"tcp": unknown protocol`}},
		{"port out of range", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: TCP, port: 70000}]}\n"),
			[]string{`spec.egress[0].ports[0].port: 70000: want 1-65535, or no port for every port`}},
		{"port not an integer", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}, ports: [{protocol: TCP, port: \"80\"}]}\n"),
			[]string{`spec.egress[0].ports[0].port: want an integer, got a string`}},
		{"not named default", ef("other", t0, "  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}\n"),
			[]string{`EgressFirewall ns/other: metadata.name: "other": only the EgressFirewall named "default" is enforced`}},
		{"more rules than the limit", ef("default", t0, many(MaxEgressFirewallRules+1, "  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}\n")),
			[]string{`EgressFirewall ns/default: spec.egress: 10001 rules, more than the limit of 10000`}},
		{"ENP over its limit", enp("p", t0, many(MaxEgressNetworkPolicyRules+1, "  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}\n")),
			[]string{`EgressNetworkPolicy ns/p: spec.egress: 1001 rules, more than the limit of 1000`}},
		{"dnsName with a wildcard inside", ef("default", t0, "  - {type: Allow, to: {dnsName: \"a.*.example.com\"}}\n"),
			[]string{`spec.egress[0].to.dnsName: "a.*.example.com": label 2 "*": a wildcard is only "*." at the start, for one label`}},
		{"dnsName of two wildcard labels", ef("default", t0, "  - {type: Allow, to: {dnsName: \"*.*.example.com\"}}\n"),
			[]string{`a wildcard is only "*." at the start`}},
		{"dnsName with an underscore", ef("default", t0, "  - {type: Allow, to: {dnsName: a_b.example.com}}\n"),
			[]string{`spec.egress[0].to.dnsName: "a_b.example.com": label 1 "a_b": character '_'`}},
		{"wildcard in an ENP", enp("p", t0, "  - {type: Allow, to: {dnsName: \"*.example.com\"}}\n"),
			[]string{`EgressNetworkPolicy ns/p: spec.egress[0].to.dnsName: "*.example.com": a wildcard needs an EgressFirewall`}},
		{"dnsName that is an address", enp("p", t0, "  - {type: Allow, to: {dnsName: 192.0.2.1}}\n"),
			[]string{`"192.0.2.1": an IP address, not a name (use cidrSelector)`}},
		{"dnsName too long", ef("default", t0, "  - {type: Allow, to: {dnsName: "+strings.Repeat("a.", 127)+"com}}\n"),
			[]string{`characters, more than 253`}},
		{"bad type", ef("default", t0, "  - {type: allow, to: {cidrSelector: 10.0.0.0/8}}\n  - {to: {cidrSelector: 10.0.0.0/8}}\n"),
			[]string{`spec.egress[0].type: "allow": want Allow or Deny`, `spec.egress[1].type: missing (want Allow or Deny)`}},
		{"bad node selector", ef("default", t0, "  - {type: Allow, to: {nodeSelector: {matchExpressions: [{key: zone, operator: Near}]}}}\n"),
			[]string{`spec.egress[0].to.nodeSelector: "Near" is not a valid label selector operator`}},
		{"bad label value", ef("default", t0, "  - {type: Allow, to: {nodeSelector: {matchLabels: {role: \"not valid!\"}}}}\n"),
			[]string{`spec.egress[0].to.nodeSelector:`}},
		{"unknown rule field", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}, action: Deny}\n"),
			[]string{`spec.egress[0].action: unknown field (known: type, to, ports)`}},
		{"spec of the wrong type", "apiVersion: k8s.ovn.org/v1\nkind: EgressFirewall\nmetadata: {name: default, namespace: ns}\nspec: [1]\n",
			[]string{`EgressFirewall ns/default: spec: want an object, got a list`}},
		{"no spec", "apiVersion: k8s.ovn.org/v1\nkind: EgressFirewall\nmetadata: {name: default, namespace: ns}\n",
			[]string{`EgressFirewall ns/default: spec: missing`}},
		{"egress not a list", "apiVersion: k8s.ovn.org/v1\nkind: EgressFirewall\nmetadata: {name: default, namespace: ns}\nspec: {egress: {a: 1}}\n",
			[]string{`spec.egress: want a list, got an object`}},
		{"null rule", ef("default", t0, "  - null\n"), []string{`spec.egress[0]: want an object, got null`}},
		{"wrong JSON types deep in a rule", ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}}\n  - {type: Allow, to: {nodeSelector: {matchLabels: {a: 1}, matchExpressions: [{key: zone, operator: In, values: [a, 2], op: x}, 3]}}, ports: [{protocol: TCP, port: 1.5}, {protocol: UDP, extra: 1}, \"x\"]}\n"),
			[]string{
				`spec.egress[1].to.nodeSelector.matchLabels.a: want a string, got a number`,
				`spec.egress[1].to.nodeSelector.matchExpressions[0].values[1]: want a string, got a number`,
				`spec.egress[1].to.nodeSelector.matchExpressions[0].op: unknown field (known: key, operator, values)`,
				`spec.egress[1].to.nodeSelector.matchExpressions[1]: want an object, got a number`,
				`spec.egress[1].ports[0].port: 1.5: want an integer`,
				`spec.egress[1].ports[1].extra: unknown field (known: protocol, port)`,
				`spec.egress[1].ports[2]: want an object, got a string`,
			}},
		{"to of the wrong type", ef("default", t0, "  - {type: 1, to: [a]}\n"),
			[]string{`spec.egress[0].type: want a string, got a number`, `spec.egress[0].to: want an object, got a list`}},
		{"wrong apiVersion", strings.Replace(ef("default", t0, "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}}\n"), "k8s.ovn.org/v1", "k8s.ovn.org/v2", 1),
			[]string{`apiVersion: "k8s.ovn.org/v2": want k8s.ovn.org/v1`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := obj(t, tc.obj)
			var err error
			if u.GetKind() == string(KindEgressFirewall) {
				var fw *EgressFirewall
				if fw, err = DecodeEgressFirewall(u); err == nil {
					_, err = fw.Policy()
				}
			} else {
				var p *EgressNetworkPolicy
				if p, err = DecodeEgressNetworkPolicy(u); err == nil {
					_, err = p.Policy()
				}
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Object.Namespace != "ns" || fe.Field == "" {
				t.Errorf("not a *FieldError naming the object and field: %#v", err)
			}
		})
	}
}

func TestErrorListCapsItsMessage(t *testing.T) {
	u := obj(t, ef("default", t0, strings.Repeat("  - {type: Maybe, to: {cidrSelector: 10.0.0.0/8}}\n", 13)))
	fw, err := DecodeEgressFirewall(u)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fw.Policy()
	var l ErrorList
	if !errors.As(err, &l) || len(l) != 13 {
		t.Fatalf("%d errors: %v", len(l), err)
	}
	msg := err.Error()
	if strings.Count(msg, "EgressFirewall ns/default") != 1 || !strings.HasSuffix(msg, "(and 3 more)") || strings.Count(msg, "want Allow or Deny") != 10 {
		t.Errorf("message: %s", msg)
	}
}

func TestDNSNames(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" for an error
	}{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"*.Example.com", "*.example.com"},
		{"localhost", "localhost"},
		{"a-b.c1", "a-b.c1"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"*.com", "*.com"},
		{"", ""},
		{".", ""},
		{"*", ""},
		{"*.", ""},
		{"a..b", ""},
		{"-a.com", ""},
		{"a-.com", ""},
		{"a.*", ""},
		{"**.a.com", ""},
		{strings.Repeat("a", 64) + ".com", ""},
		{"2001:db8::1", ""},
		{"a b.com", ""},
	} {
		got, err := ParseDNSName(tc.in)
		if (err == nil) != (tc.want != "") || got != tc.want {
			t.Errorf("ParseDNSName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		pattern, name string
		match         bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "EXAMPLE.com.", true},
		{"example.com", "www.example.com", false},
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "WWW.Example.Com.", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "a.b.example.com", false},
		{"*.example.com", "wwwexample.com", false},
		{"*.example.com", ".example.com", false},
	} {
		if got := MatchDNSName(tc.pattern, tc.name); got != tc.match {
			t.Errorf("MatchDNSName(%q, %q) = %v", tc.pattern, tc.name, got)
		}
	}
}

func TestSelect(t *testing.T) {
	allow := "  - {type: Allow, to: {cidrSelector: 10.0.0.0/8}}\n"
	bad := "  - {type: Allow, to: {cidrSelector: nonsense}}\n"
	for _, tc := range []struct {
		name     string
		objs     []string
		chosen   string // "Kind name" or ""
		hold     bool
		reason   string   // substring of Reason
		problems []string // "Reason name", in order
	}{
		{"none", nil, "", false, "", nil},
		{"one EgressFirewall", []string{ef("default", t0, allow)}, "EgressFirewall default", false, "the namespace's EgressFirewall", nil},
		{"one ENP", []string{enp("a", t0, allow)}, "EgressNetworkPolicy a", false, "only egress policy", nil},
		{"two ENPs: the oldest wins", []string{enp("b", t0, allow), enp("a", t1, allow)},
			"EgressNetworkPolicy b", false, "oldest of 2 EgressNetworkPolicies (b, a)", []string{ReasonDuplicate + " a"}},
		{"three ENPs of one age: by name", []string{enp("c", t0, allow), enp("a", t0, allow), enp("b", t0, allow)},
			"EgressNetworkPolicy a", false, "oldest of 3", []string{ReasonDuplicate + " b", ReasonDuplicate + " c"}},
		{"both kinds: the EgressFirewall wins", []string{enp("old", t0, allow), ef("default", t2, allow)},
			"EgressFirewall default", false, "EgressFirewall", []string{ReasonShadowed + " old"}},
		{"an EgressFirewall not named default does not shadow an ENP", []string{ef("mine", t0, allow), enp("a", t1, allow)},
			"EgressNetworkPolicy a", false, "only egress policy", []string{ReasonNotDefault + " mine"}},
		{"an invalid winner holds", []string{ef("default", t1, bad), enp("a", t0, allow)},
			"EgressFirewall default", true, "", []string{ReasonInvalid + " default", ReasonShadowed + " a"}},
		{"an invalid oldest ENP holds and is not replaced by the next", []string{enp("a", t0, bad), enp("b", t1, allow)},
			"EgressNetworkPolicy a", true, "oldest", []string{ReasonInvalid + " a", ReasonDuplicate + " b"}},
		{"another namespace", []string{strings.Replace(enp("x", t0, allow), "namespace: ns", "namespace: other", 1)},
			"", false, "", []string{ReasonWrongObject + " x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var us []*unstructured.Unstructured
			for _, o := range tc.objs {
				us = append(us, obj(t, o))
			}
			s := Select("ns", us)
			chosen := ""
			if s.Chosen.Name != "" {
				chosen = string(s.Chosen.Kind) + " " + s.Chosen.Name
			}
			if chosen != tc.chosen || s.Hold != tc.hold || !strings.Contains(s.Reason, tc.reason) {
				t.Errorf("chosen %q hold %v reason %q; want %q %v %q", chosen, s.Hold, s.Reason, tc.chosen, tc.hold, tc.reason)
			}
			if (s.Policy != nil) != (tc.chosen != "" && !tc.hold) {
				t.Errorf("policy %v with chosen %q hold %v", s.Policy, tc.chosen, tc.hold)
			}
			if s.Policy != nil && s.Policy.Ref() != s.Chosen {
				t.Errorf("policy of %s, chosen %s", s.Policy.Ref(), s.Chosen)
			}
			var got []string
			for _, p := range s.Problems {
				got = append(got, p.Reason+" "+p.Object.Name)
				if p.Err == nil || !strings.Contains(p.Err.Error(), p.Object.Name) {
					t.Errorf("problem %s: error %v does not name it", p.Object, p.Err)
				}
			}
			if !slices.Equal(got, tc.problems) {
				t.Errorf("problems %q, want %q", got, tc.problems)
			}
		})
	}
}
