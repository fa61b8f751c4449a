package kubeclient

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// decoded is what a watch's decoder gave for one event.
type decoded struct {
	typ watch.EventType
	obj runtime.Object
	err string
}

// decodeWatch decodes stream as a watch response's body, the way client-go's
// rest.Request.Watch does, with ns's decoders for JSON; it stops at the
// first error.
func decodeWatch(ns runtime.NegotiatedSerializer, stream []byte) []decoded {
	objDec, eventDec, framer, err := runtime.NewClientNegotiator(ns, schema.GroupVersion{}).StreamDecoder(runtime.ContentTypeJSON, nil)
	if err != nil {
		return []decoded{{err: err.Error()}}
	}
	d := restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream))), eventDec), objDec)
	defer d.Close()
	var out []decoded
	for range 1000 {
		typ, obj, err := d.Decode()
		if err != nil {
			return append(out, decoded{err: err.Error()})
		}
		out = append(out, decoded{typ: typ, obj: obj})
	}
	return out
}

// clientGoSerializer is client-go's own dynamic client's serializer.
func clientGoSerializer() runtime.NegotiatedSerializer {
	return dynamic.ConfigFor(&rest.Config{}).NegotiatedSerializer
}

// sameAsClientGo decodes stream with both and fails when they differ.
func sameAsClientGo(t *testing.T, stream []byte) []decoded {
	t.Helper()
	want := decodeWatch(clientGoSerializer(), stream)
	got := decodeWatch(oneDecodeSerializer{clientGoSerializer()}, stream)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stream %q:\ndecoded %#v\nclient-go %#v", stream, got, want)
	}
	return got
}

func ev(typ, obj string) string { return `{"type":"` + typ + `","object":` + obj + "}\n" }

// watchSeeds are streams of events the API server sends, and some it does
// not, with what must come of each.
var watchSeeds = []string{
	ev("ADDED", `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressFirewall","metadata":{"name":"default","namespace":"a","resourceVersion":"7","generation":2,"labels":{"x":"y"}},"spec":{"egress":[{"type":"Allow","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"TCP","port":443}]},{"type":"Deny","to":{"dnsName":"*.example.com"}}]},"status":{"status":"EgressFirewall Rules applied","messages":["n1: ok"]}}`) +
		ev("MODIFIED", `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressFirewall","metadata":{"name":"default","namespace":"a"},"spec":{"f":1.5,"big":9223372036854775807,"bigger":9223372036854775808,"neg":-3,"e":1e3,"t":true,"n":null,"l":[[],{},"s"]}}`) +
		ev("BOOKMARK", `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressFirewall","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}`) +
		ev("DELETED", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"a"}}`),
	ev("ERROR", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}`),
	ev("MODIFIED", `{"kind":"Status","apiVersion":"v1","status":"Success"}`),
	ev("ADDED", `{"kind":"WatchEvent","apiVersion":"v1"}`),
	ev("ADDED", `{"apiVersion":"v1","metadata":{"name":"no-kind"}}`),
	ev("ADDED", `{"kind":"NoVersion","metadata":{}}`),
	ev("ADDED", `{"kind":"BadVersion","apiVersion":"a/b/c"}`),
	ev("ADDED", `{"kind":5,"apiVersion":"v1"}`),
	ev("ADDED", `{"Kind":"Status","kind":"X","apiVersion":"v1"}`),
	ev("ADDED", `{"KIND":"X","apiVersion":"v1"}`),
	ev("ADDED", `{"kind":"X","apiVersion":"v1","items":[{"kind":"Y","apiVersion":"v1"}]}`),
	`{"type":"ADDED","kind":7,"object":{"kind":"X","apiVersion":"v1"}}` + "\n",
	`{"type":"ADDED","object":{"kind":"X","apiVersion":"v1","a":1},"object":{"kind":"Y","apiVersion":"v1"}}` + "\n",
	`{"type":"ADDED","type":"MODIFIED","object":{"kind":"X","apiVersion":"v1"}}` + "\n",
	`{"object":{"kind":"X","apiVersion":"v1"}}` + "\n",
	ev("SOMETHING", `{"kind":"X","apiVersion":"v1"}`),
	ev("ADDED", `null`),
	ev("ADDED", `[1]`),
	`{"type":5,"object":{"kind":"X","apiVersion":"v1"}}` + "\n",
	ev("ADDED", `{"kind":"X","apiVersion":"v1"}`) + `{"type":"ADDED","object":{"kind":"X",` + "\n",
	ev("ADDED", `{"kind":"X","apiVersion":"v1","a":"\u00e9\ud83d\ude00\"\\"}`) + "  \n" + ev("ADDED", `{"kind":"X","apiVersion":"v1"}`),
	`[]` + "\n",
	``,
}

// TestWatchEventsDecodeAsClientGo: every seed stream decodes, event by
// event and error by error, to what client-go's dynamic client decodes it
// to.
func TestWatchEventsDecodeAsClientGo(t *testing.T) {
	for i, s := range watchSeeds {
		t.Run(fmt.Sprint(i), func(t *testing.T) { sameAsClientGo(t, []byte(s)) })
	}
	got := sameAsClientGo(t, []byte(watchSeeds[0]))
	if len(got) != 5 || got[4].err != "EOF" {
		t.Fatalf("the first stream decoded to %#v, want four events and EOF", got)
	}
	if u, ok := got[1].obj.(*unstructured.Unstructured); !ok || u.Object["spec"].(map[string]any)["big"] != int64(9223372036854775807) {
		t.Errorf("integers are not kept as int64: %#v", got[1].obj)
	}
	got = sameAsClientGo(t, []byte(watchSeeds[1]))
	if _, ok := got[0].obj.(*metav1.Status); !ok || got[0].typ != watch.Error {
		t.Errorf("an ERROR event decoded to %#v, want a *metav1.Status", got[0])
	}
}

// TestPlainEventsTakeOneDecode checks that the events an API server sends
// take the one-decode path, so that the test above compares it: a plain
// event's WatchEvent carries the whole frame, and its object is the one
// the event decoder decoded.
func TestPlainEventsTakeOneDecode(t *testing.T) {
	var info runtime.SerializerInfo
	for _, i := range (oneDecodeSerializer{clientGoSerializer()}).SupportedMediaTypes() {
		if i.MediaType == runtime.ContentTypeJSON {
			info = i
		}
	}
	frame := []byte(strings.TrimSpace(watchSeeds[0][:strings.Index(watchSeeds[0], "\n")]))
	var we metav1.WatchEvent
	if _, _, err := info.StreamSerializer.Serializer.Decode(frame, nil, &we); err != nil {
		t.Fatal(err)
	}
	if we.Type != "ADDED" || &we.Object.Raw[0] != &frame[0] || len(we.Object.Raw) != len(frame) {
		t.Fatalf("the event took client-go's path: %s %q", we.Type, we.Object.Raw)
	}
	obj, _, err := info.Serializer.Decode(we.Object.Raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := obj.(*unstructured.Unstructured); !ok || u.GetName() != "default" || u.GetKind() != "EgressFirewall" {
		t.Fatalf("decoded %#v", obj)
	}
	// Handed over once: the same bytes again are decoded by client-go's
	// serializer, which does not take a whole event for an object.
	if obj2, _, err := info.Serializer.Decode(we.Object.Raw, nil, nil); err == nil && reflect.DeepEqual(obj2, obj) {
		t.Errorf("the object was handed over twice")
	}
	// Other decoders of the same media type are not paired with this one.
	var other runtime.SerializerInfo
	for _, i := range (oneDecodeSerializer{clientGoSerializer()}).SupportedMediaTypes() {
		if i.MediaType == runtime.ContentTypeJSON {
			other = i
		}
	}
	if _, _, err := info.StreamSerializer.Serializer.Decode(frame, nil, &we); err != nil {
		t.Fatal(err)
	}
	if obj, _, err := other.Serializer.Decode(we.Object.Raw, nil, nil); err == nil {
		t.Errorf("another watch's decoder took the object: %#v", obj)
	}
}

// FuzzWatchEventDecode: any byte stream decodes as client-go's dynamic
// client decodes it, events and errors alike.
func FuzzWatchEventDecode(f *testing.F) {
	for _, s := range watchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) { sameAsClientGo(t, stream) })
}

// bigEvent is the watch event of an EgressFirewall of n rules, every
// fourth one with a port.
func bigEvent(n int) []byte {
	rules := make([]any, 0, n)
	for i := range n {
		r := map[string]any{"type": "Allow", "to": map[string]any{"cidrSelector": fmt.Sprintf("11.%d.%d.%d/32", byte(i>>16), byte(i>>8), byte(i))}}
		if i%4 == 0 {
			r["ports"] = []any{map[string]any{"protocol": "TCP", "port": 443}}
		}
		rules = append(rules, r)
	}
	obj := map[string]any{"apiVersion": "k8s.ovn.org/v1", "kind": "EgressFirewall",
		"metadata": map[string]any{"name": "default", "namespace": "big", "resourceVersion": "12345", "generation": 3},
		"spec":     map[string]any{"egress": rules}}
	b, err := stdjson.Marshal(map[string]any{"type": "MODIFIED", "object": obj})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// BenchmarkWatchEventDecode decodes the watch event of an 8,000-rule
// EgressFirewall (570 kB) as client-go's dynamic client does and as
// NewDynamic's client does.
//
//	go test -run '^$' -bench WatchEventDecode -benchmem ./kubeclient/
func BenchmarkWatchEventDecode(b *testing.B) {
	stream := bigEvent(8000)
	for _, c := range []struct {
		name string
		ns   func() runtime.NegotiatedSerializer
	}{
		{"client-go", clientGoSerializer},
		{"one-decode", func() runtime.NegotiatedSerializer { return oneDecodeSerializer{clientGoSerializer()} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				if got := decodeWatch(c.ns(), stream); len(got) != 2 || got[0].obj == nil {
					b.Fatalf("decoded %v", got)
				}
			}
		})
	}
}
