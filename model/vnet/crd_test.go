package vnet

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"nodeflow/internal/testutil/crdtest"
)

var crdFiles = []struct {
	file     string
	kind     string
	resource string
	status   bool
	typ      reflect.Type
	// selectable are the selectable fields the CRD must have.
	selectable []string
}{
	{"vnet-subnets.yaml", KindSubnet, ResourceSubnets, true, reflect.TypeFor[Subnet](), []string{".spec.vni"}},
	{"vnet-networkattachments.yaml", KindNetworkAttachment, ResourceNetworkAttachments, true, reflect.TypeFor[NetworkAttachment](), []string{".spec.node", ".spec.vni"}},
	{"vnet-iplocks.yaml", KindIPLock, ResourceIPLocks, false, reflect.TypeFor[IPLock](), []string{".spec.vni"}},
}

// TestCRDs checks the CRDs' names, scope, subresources, selectable fields
// and printer columns against this package, and that the API server would
// accept them.
func TestCRDs(t *testing.T) {
	for _, tc := range crdFiles {
		t.Run(tc.file, func(t *testing.T) {
			crd, _ := crdtest.Load(t, tc.file)
			v := crd.Spec.Versions[0]
			if crd.Name != tc.resource+"."+Group || crd.Spec.Group != Group || crd.Spec.Names.Kind != tc.kind ||
				crd.Spec.Names.ListKind != tc.kind+"List" || crd.Spec.Names.Plural != tc.resource ||
				crd.Spec.Scope != apiextensionsv1.NamespaceScoped || v.Name != Version || !v.Served || !v.Storage {
				t.Errorf("names: %s %s %s %s %s %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, crd.Spec.Scope, v.Name)
			}
			if got := v.Subresources != nil && v.Subresources.Status != nil; got != tc.status {
				t.Errorf("status subresource %v, want %v", got, tc.status)
			}
			var sel []string
			for _, f := range v.SelectableFields {
				sel = append(sel, f.JSONPath)
			}
			for _, want := range tc.selectable {
				if !slices.Contains(sel, want) {
					t.Errorf("selectable fields %v lack %s", sel, want)
				}
			}
			schema := v.Schema.OpenAPIV3Schema
			for _, c := range v.AdditionalPrinterColumns {
				if c.JSONPath == ".metadata.creationTimestamp" {
					continue
				}
				if !hasPath(schema, c.JSONPath) {
					t.Errorf("printer column %s: %s is not in the schema", c.Name, c.JSONPath)
				}
			}
		})
	}
}

// hasPath reports whether a printer column's JSON path (.a.b[0]) names a
// field of the schema.
func hasPath(s *apiextensionsv1.JSONSchemaProps, path string) bool {
	for _, seg := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		seg, idx, _ := strings.Cut(seg, "[")
		p, ok := s.Properties[seg]
		if !ok {
			return false
		}
		s = &p
		if idx != "" {
			if s.Items == nil || s.Items.Schema == nil {
				return false
			}
			s = s.Items.Schema
		}
	}
	return true
}

// TestCRDSchemasMatchTypes checks that the spec and status fields of each
// schema are exactly the JSON fields of the Go types, so that the two
// cannot drift.
func TestCRDSchemasMatchTypes(t *testing.T) {
	for _, tc := range crdFiles {
		t.Run(tc.file, func(t *testing.T) {
			crd, _ := crdtest.Load(t, tc.file)
			root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
			for _, part := range []string{"spec", "status"} {
				f, ok := tc.typ.FieldByName(strings.ToUpper(part[:1]) + part[1:])
				s, inSchema := root.Properties[part]
				if !ok && !inSchema {
					continue
				}
				if !ok || !inSchema {
					t.Errorf("%s: in the Go type %v, in the schema %v", part, ok, inSchema)
					continue
				}
				compareFields(t, part, f.Type, &s)
			}
		})
	}
}

func compareFields(t *testing.T, path string, typ reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if typ.Kind() != reflect.Struct {
		return
	}
	var goNames []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		goNames = append(goNames, name)
		p, ok := s.Properties[name]
		if !ok {
			continue
		}
		want := map[reflect.Kind]string{reflect.String: "string", reflect.Uint32: "integer", reflect.Struct: "object", reflect.Slice: "array"}[f.Type.Kind()]
		if p.Type != want {
			t.Errorf("%s.%s: schema type %q, Go %s", path, name, p.Type, f.Type)
		}
		compareFields(t, path+"."+name, f.Type, &p)
	}
	var schemaNames []string
	for n := range s.Properties {
		schemaNames = append(schemaNames, n)
	}
	slices.Sort(goNames)
	slices.Sort(schemaNames)
	if !slices.Equal(goNames, schemaNames) {
		t.Errorf("%s: Go fields %v, schema fields %v", path, goNames, schemaNames)
	}
}

func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	// Through JSON, so that numbers are int64 as the API server has them.
	b, err := yaml.YAMLToJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := utiljson.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

const (
	subnetHead = "apiVersion: vnet.nodeflow.io/v1alpha1\nkind: Subnet\nmetadata: {name: s, namespace: ns}\n"
	attHead    = "apiVersion: vnet.nodeflow.io/v1alpha1\nkind: NetworkAttachment\nmetadata: {name: a, namespace: ns}\n"
)

func lockYAML(name, spec string) string {
	return "apiVersion: vnet.nodeflow.io/v1alpha1\nkind: IPLock\nmetadata: {name: " + name + ", namespace: ns}\nspec: " + spec + "\n"
}

// TestCRDValidation validates objects, and updates of them, with the CRDs'
// schemas and CEL rules as the API server would.
func TestCRDValidation(t *testing.T) {
	validators := map[string]*crdtest.Validator{}
	for _, tc := range crdFiles {
		_, validators[tc.kind] = crdtest.Load(t, tc.file)
	}
	for _, tc := range []struct {
		name     string
		old, obj string
		api      string // a substring of the API server's errors; "" accepts
	}{
		{"subnet", "", subnetHead + "spec: {vni: 8388609, cidr: 10.0.0.0/24}", ""},
		{"subnet IPv6", "", subnetHead + "spec: {vni: 16777215, cidr: 'fd00::/64'}", ""},
		{"subnet /32", "", subnetHead + "spec: {vni: 8388608, cidr: 10.0.0.9/32}", ""},
		{"subnet VNI too low", "", subnetHead + "spec: {vni: 8388607, cidr: 10.0.0.0/24}", "spec.vni: Invalid value: 8388607: spec.vni in body should be greater than or equal to 8388608"},
		{"subnet VNI too high", "", subnetHead + "spec: {vni: 16777216, cidr: 10.0.0.0/24}", "should be less than or equal to 16777215"},
		{"subnet host bits", "", subnetHead + "spec: {vni: 8388609, cidr: 10.0.0.1/24}", "must not have host bits set"},
		{"subnet not a CIDR", "", subnetHead + "spec: {vni: 8388609, cidr: 10.0.0.1}", "must be a CIDR"},
		{"subnet IPv4-mapped", "", subnetHead + "spec: {vni: 8388609, cidr: '::ffff:10.0.0.0/120'}", "must be a CIDR"},
		{"subnet /7", "", subnetHead + "spec: {vni: 8388609, cidr: 10.0.0.0/7}", "must be /8 or longer"},
		{"subnet IPv6 /63", "", subnetHead + "spec: {vni: 8388609, cidr: 'fd00::/63'}", "IPv6 prefix /64 or longer"},
		{"subnet without cidr", "", subnetHead + "spec: {vni: 8388609}", "spec.cidr: Required value"},
		{"subnet spec changed", subnetHead + "spec: {vni: 8388609, cidr: 10.0.0.0/24}", subnetHead + "spec: {vni: 8388609, cidr: 10.0.1.0/24}", "spec is immutable"},
		{"subnet status written", subnetHead + "spec: {vni: 8388609, cidr: 10.0.0.0/24}", subnetHead + "spec: {vni: 8388609, cidr: 10.0.0.0/24}\nstatus: {errors: ['spec.cidr: overlaps']}", ""},

		{"attachment", "", attHead + "spec: {node: n1, subnet: s, vni: 8388609}", ""},
		{"attachment without a VNI", "", attHead + "spec: {node: n1, subnet: s}", ""},
		{"attachment without a node", "", attHead + "spec: {subnet: s}", "spec.node: Required value"},
		{"attachment bad node name", "", attHead + "spec: {node: N_1, subnet: s}", "spec.node in body should match"},
		{"attachment VNI out of range", "", attHead + "spec: {node: n1, subnet: s, vni: 1}", "greater than or equal to 8388608"},
		{"attachment VNI set once", attHead + "spec: {node: n1, subnet: s}", attHead + "spec: {node: n1, subnet: s, vni: 8388609}", ""},
		{"attachment VNI changed", attHead + "spec: {node: n1, subnet: s, vni: 8388609}", attHead + "spec: {node: n1, subnet: s, vni: 8388610}", "spec.vni can be set once"},
		{"attachment VNI removed", attHead + "spec: {node: n1, subnet: s, vni: 8388609}", attHead + "spec: {node: n1, subnet: s}", "spec.vni can be set once"},
		{"attachment node changed", attHead + "spec: {node: n1, subnet: s}", attHead + "spec: {node: n2, subnet: s}", "spec.node is immutable"},
		{"attachment subnet changed", attHead + "spec: {node: n1, subnet: s}", attHead + "spec: {node: n1, subnet: t}", "spec.subnet is immutable"},
		{"attachment status", "", attHead + "spec: {node: n1, subnet: s}\nstatus: {ip: 10.0.0.1, mac: '02:01:0a:00:00:01', hostIP: 192.0.2.1, ifcName: vn-a, errors: {ipam: [], host: ['x: y']}}", ""},
		{"attachment status IPv6", "", attHead + "spec: {node: n1, subnet: s}\nstatus: {ip: 'fd00::1'}", ""},
		{"attachment status IP not canonical", "", attHead + "spec: {node: n1, subnet: s}\nstatus: {ip: 'fd00:0::1'}", "canonical"},
		{"attachment status bad MAC", "", attHead + "spec: {node: n1, subnet: s}\nstatus: {mac: '02:01:0A:00:00:01'}", "status.mac in body should match"},
		{"attachment interface name too long", "", attHead + "spec: {node: n1, subnet: s}\nstatus: {ifcName: abcdefghijklmnop}", "status.ifcName: Too long"},

		{"lock", "", lockYAML("v8388609-10-0-0-5", "{attachment: a, vni: 8388609, ip: 10.0.0.5}"), ""},
		{"lock IPv6", "", lockYAML("v8388609-fd000000000000000000000000000005", "{attachment: a, vni: 8388609, ip: 'fd00::5'}"), ""},
		{"lock named for another address", "", lockYAML("v8388609-10-0-0-6", "{attachment: a, vni: 8388609, ip: 10.0.0.5}"), "metadata.name must be v<spec.vni>-<spec.ip with dashes for dots>"},
		{"lock named for another VNI", "", lockYAML("v8388610-10-0-0-5", "{attachment: a, vni: 8388609, ip: 10.0.0.5}"), "must start with v<spec.vni>-"},
		{"lock badly named", "", lockYAML("lock-1", "{attachment: a, vni: 8388609, ip: 10.0.0.5}"), "metadata.name must be v<vni>-<a-b-c-d>"},
		{"lock without attachment", "", lockYAML("v8388609-10-0-0-5", "{vni: 8388609, ip: 10.0.0.5}"), "spec.attachment: Required value"},
		{"lock spec changed", lockYAML("v8388609-10-0-0-5", "{attachment: a, vni: 8388609, ip: 10.0.0.5}"), lockYAML("v8388609-10-0-0-5", "{attachment: b, vni: 8388609, ip: 10.0.0.5}"), "spec is immutable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := obj(t, tc.obj)
			var old *unstructured.Unstructured
			if tc.old != "" {
				old = obj(t, tc.old)
			}
			errs := validators[u.GetKind()].Validate(u, old)
			switch {
			case tc.api == "" && len(errs) > 0:
				t.Fatalf("the API server would refuse it: %v", errs.ToAggregate())
			case tc.api != "" && len(errs) == 0:
				t.Fatalf("the API server would accept it, want %q", tc.api)
			case tc.api != "" && !strings.Contains(errs.ToAggregate().Error(), tc.api):
				t.Fatalf("the API server's errors %v lack %q", errs.ToAggregate(), tc.api)
			}
		})
	}
}

// The locks NewIPLock makes, and the addresses MACOf gives, pass the CRDs.
func TestCRDsAcceptWhatThePackageWrites(t *testing.T) {
	_, lockV := crdtest.Load(t, "vnet-iplocks.yaml")
	_, attV := crdtest.Load(t, "vnet-networkattachments.yaml")
	att := &NetworkAttachment{}
	att.Namespace, att.Name, att.UID = "ns", "a", "u"
	for _, tc := range []struct {
		vni uint32
		ip  string
	}{{MinVNI, "10.0.0.1"}, {MaxVNI, "255.255.255.254"}, {MinVNI + 77, "fd00::1"}, {MinVNI + 77, "fd00:0:0:1::"}, {MinVNI, "0.0.0.0"}} {
		ip := netip.MustParseAddr(tc.ip)
		u, err := ToUnstructured(NewIPLock(att, tc.vni, ip))
		if err != nil {
			t.Fatal(err)
		}
		if errs := lockV.Validate(u, nil); len(errs) > 0 {
			t.Errorf("lock of %d %s: %v", tc.vni, ip, errs.ToAggregate())
		}
		a := att.DeepCopy()
		a.Spec = NetworkAttachmentSpec{Node: "n", Subnet: "s", VNI: tc.vni}
		a.Status = NetworkAttachmentStatus{IP: ip.String(), MAC: MACOf(tc.vni, ip).String()}
		ua, err := ToUnstructured(a)
		if err != nil {
			t.Fatal(err)
		}
		if errs := attV.Validate(ua, nil); len(errs) > 0 {
			t.Errorf("attachment with %d %s: %v", tc.vni, ip, errs.ToAggregate())
		}
	}
}
