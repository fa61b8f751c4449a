package kubeclient

import (
	"fmt"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/json"
)

// NewDynamic returns a dynamic client for rc whose watches decode each
// event's JSON once.
//
// client-go's dynamic client reads a watch event in several passes over
// its bytes: it frames the event, finds its kind, decodes the envelope
// with the object kept raw, finds the object's kind, and only then
// decodes the object into a map, checking its JSON again on the way. For
// a small object that does not matter; an EgressFirewall of 8,000 rules
// is a 570 kB event, and those passes took about twice as long as one
// decoding of the envelope and the object together
// (BenchmarkWatchEventDecode). This client decodes the envelope with its
// object in one go, and gives every event the fast path cannot take (an
// ERROR event's metav1.Status, an object without a kind, a decoding
// error) to client-go's own decoders, so that the results and errors are
// the ones client-go gives. Lists, gets and writes are client-go's.
func NewDynamic(rc *rest.Config) (dynamic.Interface, error) {
	cfg := dynamic.ConfigFor(rc)
	cfg.GroupVersion = nil
	// As client-go's dynamic client: its requests build their paths whole.
	cfg.APIPath = "/if-you-see-this-search-for-the-break"
	cfg.NegotiatedSerializer = oneDecodeSerializer{cfg.NegotiatedSerializer}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client for %s: %w", rc.Host, err)
	}
	c, err := rest.UnversionedRESTClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client for %s: %w", rc.Host, err)
	}
	return dynamic.New(c), nil
}

// oneDecodeSerializer is the dynamic client's serializer with its JSON
// watch decoding in one pass.
//
// client-go decodes a watch event in two steps (rest/watch.Decoder): the
// stream serializer decodes the envelope into a metav1.WatchEvent with
// the object's raw bytes, then the media type's serializer decodes those
// bytes. Here the stream serializer decodes the object as well and hands
// it to the object decoder of the same watch, which takes it instead of
// decoding the bytes again when they are the very bytes it was decoded
// from. SupportedMediaTypes makes a fresh pair for every call, and
// client-go asks for one per watch, so that no two watches share a pair.
type oneDecodeSerializer struct {
	runtime.NegotiatedSerializer
}

// SupportedMediaTypes implements runtime.NegotiatedSerializer.
func (s oneDecodeSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	in := s.NegotiatedSerializer.SupportedMediaTypes()
	out := make([]runtime.SerializerInfo, 0, len(in))
	for _, info := range in {
		if info.MediaType == runtime.ContentTypeJSON && info.StreamSerializer != nil && info.Serializer != nil {
			h := &handOver{}
			stream := *info.StreamSerializer
			stream.Serializer = eventDecoder{Serializer: stream.Serializer, h: h}
			info.StreamSerializer = &stream
			info.Serializer = objectDecoder{Serializer: info.Serializer, h: h}
		}
		out = append(out, info)
	}
	return out
}

// handOver carries one decoded object from a watch's event decoder to its
// object decoder, with the bytes it was decoded from.
type handOver struct {
	mu  sync.Mutex
	raw []byte
	obj *unstructured.Unstructured
}

func (h *handOver) put(raw []byte, obj *unstructured.Unstructured) {
	h.mu.Lock()
	h.raw, h.obj = raw, obj
	h.mu.Unlock()
}

// take returns the object decoded from data, once, or nil.
func (h *handOver) take(data []byte) *unstructured.Unstructured {
	h.mu.Lock()
	defer h.mu.Unlock()
	raw, obj := h.raw, h.obj
	h.raw, h.obj = nil, nil
	if obj == nil || len(data) == 0 || len(data) != len(raw) || &data[0] != &raw[0] {
		return nil
	}
	return obj
}

// eventDecoder is the stream serializer: it decodes a whole event frame.
type eventDecoder struct {
	runtime.Serializer
	h *handOver
}

// Decode implements runtime.Decoder. Into a metav1.WatchEvent, it decodes
// the frame once; the event's Object.Raw is then the whole frame, which
// only the paired objectDecoder reads, at once. Anything else, and every
// frame that plainEvent does not accept, is client-go's.
func (d eventDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	we, ok := into.(*metav1.WatchEvent)
	if !ok || len(data) == 0 || defaults != nil {
		return d.Serializer.Decode(data, defaults, into)
	}
	var env map[string]any
	if err := json.UnmarshalCaseSensitivePreserveInts(data, &env); err != nil {
		return d.Serializer.Decode(data, defaults, into)
	}
	typ, obj, ok := plainEvent(env)
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	d.h.put(data, &unstructured.Unstructured{Object: obj})
	*we = metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: data}}
	gvk := metav1.SchemeGroupVersion.WithKind("WatchEvent")
	return we, &gvk, nil
}

// metaKinds holds the kinds that client-go's dynamic client decodes into
// typed objects rather than Unstructured (metav1.Status and its kin): it
// is registered as that client's own scheme is.
var metaKinds = func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// plainEvent returns env's type and object when client-go would decode
// them, from the same bytes, into a WatchEvent of that type and an
// Unstructured holding that very map; ok is false for every event it
// might treat otherwise:
//   - an event without a string type;
//   - an envelope or object with a "kind" or "apiVersion" key in another
//     case (client-go finds the kind with a case-insensitive decoder);
//   - an object without a string kind and a parsed version, or with a
//     kind its scheme knows (metav1.Status, the object of an ERROR event).
func plainEvent(env map[string]any) (typ string, obj map[string]any, ok bool) {
	typ, ok = env["type"].(string)
	if !ok || typ == "" {
		return "", nil, false
	}
	obj, ok = env["object"].(map[string]any)
	if !ok || !noKindKeys(env, false) || !noKindKeys(obj, true) {
		return "", nil, false
	}
	kind, _ := obj["kind"].(string)
	av, _ := obj["apiVersion"].(string)
	gv, err := schema.ParseGroupVersion(av)
	if kind == "" || err != nil || gv.Version == "" {
		return "", nil, false
	}
	if _, err := metaKinds.New(gv.WithKind(kind)); err == nil {
		return "", nil, false
	}
	return typ, obj, true
}

// noKindKeys says that m has no key that a case-insensitive match takes
// for "kind" or "apiVersion", other than those two exactly when exact.
func noKindKeys(m map[string]any, exact bool) bool {
	for k := range m {
		if exact && (k == "kind" || k == "apiVersion") {
			continue
		}
		if strings.EqualFold(k, "kind") || strings.EqualFold(k, "apiVersion") {
			return false
		}
	}
	return true
}

// objectDecoder is the media type's serializer: it takes the object its
// watch's eventDecoder decoded from data, or decodes data as client-go
// does.
type objectDecoder struct {
	runtime.Serializer
	h *handOver
}

// Decode implements runtime.Decoder.
func (d objectDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into == nil {
		if obj := d.h.take(data); obj != nil {
			gvk := obj.GroupVersionKind()
			return obj, &gvk, nil
		}
	}
	return d.Serializer.Decode(data, defaults, into)
}
