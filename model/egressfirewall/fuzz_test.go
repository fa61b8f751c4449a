package egressfirewall

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// fuzzSeeds are JSON objects of both kinds: valid ones, and the shapes of
// the bad input the decoder must name.
var fuzzSeeds = []string{
	`{"apiVersion":"k8s.ovn.org/v1","kind":"EgressFirewall","metadata":{"name":"default","namespace":"ns","uid":"u1","creationTimestamp":"2024-01-01T00:00:00Z","generation":3},
	  "spec":{"egress":[{"type":"Allow","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"TCP","port":443},{"protocol":"UDP"}]},
	  {"type":"Allow","to":{"dnsName":"*.example.com"}},
	  {"type":"Allow","to":{"nodeSelector":{"matchLabels":{"a":"b"},"matchExpressions":[{"key":"k","operator":"In","values":["x"]},{"key":"e","operator":"Exists","values":[]}]}}},
	  {"type":"Deny","to":{"cidrSelector":"::/0"}}]},
	  "status":{"status":"EgressFirewall Rules applied","messages":["node1: EgressFirewall Rules applied"]}}`,
	`{"apiVersion":"network.openshift.io/v1","kind":"EgressNetworkPolicy","metadata":{"name":"p","namespace":"ns"},
	  "spec":{"egress":[{"type":"Allow","to":{"dnsName":"example.com"}},{"type":"Deny","to":{"cidrSelector":"0.0.0.0/0"}}]}}`,
	`{"kind":"EgressFirewall","metadata":{"name":"x"},"spec":{"egress":[{"type":"Deny","to":{"cidrSelector":"1.2.3.4","dnsName":"a"},"ports":[{"protocol":"ICMP","port":1.5}]}]}}`,
	`{"kind":"EgressFirewall","spec":{"egress":[null,1,"x",{"to":[]},{"to":{"nodeSelector":{"matchLabels":{"a":1},"matchExpressions":[null,{"values":[1]}]}}}]}}`,
	`{"kind":"EgressNetworkPolicy","spec":{"egress":{"type":"Allow"}}}`,
	`{"kind":"EgressFirewall","spec":{"egress":[{"type":"Allow","to":{"dnsName":"a.*.b"},"ports":[{"protocol":"SCTP","port":99999999999}]}]},"status":7}`,
	`{"kind":"EgressFirewall","metadata":{"creationTimestamp":"not a time","name":5},"spec":null}`,
	// Found by fuzzing: an empty status.messages came back as none.
	`{"kind":"EgressFirewall","spec":{},"status":{"messages":[]}}`,
}

// FuzzDecode feeds JSON objects to both decoders. Neither may panic; an
// object that decodes must survive a round trip (decode, encode, decode
// again: the same value) and its Policy must be the same both times.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if err := utiljson.Unmarshal(data, &m); err != nil || m == nil {
			return
		}
		u := &unstructured.Unstructured{Object: m}
		if fw, err := DecodeEgressFirewall(u); err == nil {
			again, err := DecodeEgressFirewall(fw.Unstructured())
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			if !reflect.DeepEqual(fw, again) {
				t.Fatalf("round trip:\n%#v\n%#v", fw, again)
			}
			samePolicy(t, func() (*Policy, error) { return fw.Policy() }, func() (*Policy, error) { return again.Policy() })
		}
		if p, err := DecodeEgressNetworkPolicy(u); err == nil {
			again, err := DecodeEgressNetworkPolicy(p.Unstructured())
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			if !reflect.DeepEqual(p, again) {
				t.Fatalf("round trip:\n%#v\n%#v", p, again)
			}
			samePolicy(t, func() (*Policy, error) { return p.Policy() }, func() (*Policy, error) { return again.Policy() })
		}
		_ = Select("ns", []*unstructured.Unstructured{u})
	})
}

func samePolicy(t *testing.T, a, b func() (*Policy, error)) {
	t.Helper()
	pa, ea := a()
	pb, eb := b()
	if (ea == nil) != (eb == nil) || (ea != nil && ea.Error() != eb.Error()) || !pa.Equal(pb) {
		t.Fatalf("policies differ after the round trip: %v / %v", ea, eb)
	}
}
