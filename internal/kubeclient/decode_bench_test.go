package kubeclient

import (
	"bytes"
	"fmt"
	"testing"

	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
)

// BenchmarkDecodeEndpointSlices decodes 1,000 EndpointSlices of 10
// endpoints each, as the client decodes a list, from JSON and from
// protobuf: the per-op time and allocations are for the whole list.
//
//	go test -run '^$' -bench DecodeEndpointSlices -benchmem ./kubeclient/
func BenchmarkDecodeEndpointSlices(b *testing.B) {
	list := &discovery.EndpointSliceList{}
	for i := range 1000 {
		s := discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d-abcde", i), Namespace: "bench", ResourceVersion: "12345",
				Labels: map[string]string{discovery.LabelServiceName: fmt.Sprintf("svc-%d", i), discovery.LabelManagedBy: "bench"}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		}
		for j := range 10 {
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)},
				Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("node1")})
		}
		list.Items = append(list.Items, s)
	}
	for _, mt := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
		info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mt)
		if !ok {
			b.Fatalf("no serializer for %s", mt)
		}
		var buf bytes.Buffer
		if err := scheme.Codecs.EncoderForVersion(info.Serializer, discovery.SchemeGroupVersion).Encode(list, &buf); err != nil {
			b.Fatal(err)
		}
		dec := scheme.Codecs.DecoderToVersion(info.Serializer, discovery.SchemeGroupVersion)
		b.Run(mt, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(buf.Len()))
			for b.Loop() {
				var out discovery.EndpointSliceList
				if _, _, err := dec.Decode(buf.Bytes(), nil, &out); err != nil || len(out.Items) != 1000 {
					b.Fatalf("decode: %v, %d slices", err, len(out.Items))
				}
			}
		})
	}
}
