package vnetfeature

import (
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"nodeflow/model/vnet"
)

// The seed's 1+R informers: one on the NetworkAttachments of this node
// (field selector spec.node), and, for each of the R VNIs those
// attachments are on, one on the VNI's NetworkAttachments and one on its
// Subnets (spec.vni). A VNI's two informers start when the first
// attachment of this node on it appears, and stop (their stop channel
// closed, their caches dropped) when the last one goes. Every informer
// lists and watches across namespaces.

// Field selectors (the CRDs' selectableFields).
const (
	fieldNode = "spec.node"
	fieldVNI  = "spec.vni"
)

// handlers are what the informers call on an event, from their own
// goroutines: the object is the informer's (*api.NetworkAttachment,
// *api.Subnet, or the *unstructured.Unstructured of one that did not
// decode).
type handlers struct {
	local      func(obj any)
	attachment func(vni uint32, obj any)
	subnet     func(vni uint32, obj any)
	// synced is called once a VNI's informers have listed everything.
	synced func(vni uint32)
}

// informer is one running informer.
type informer struct {
	inf  cache.SharedIndexInformer
	stop chan struct{}
}

func (i *informer) halt() { close(i.stop) }

// vniInformers are a VNI's two informers.
type vniInformers struct {
	attachments, subnets informer
}

// informerSet runs the informers. Its methods are called from one
// goroutine at a time (the feature's loop, or Sync before it).
type informerSet struct {
	dyn    dynamic.Interface
	node   string
	resync time.Duration
	on     handlers

	local *informer
	vnis  map[uint32]*vniInformers
}

func newInformerSet(dyn dynamic.Interface, node string, resync time.Duration, on handlers) *informerSet {
	return &informerSet{dyn: dyn, node: node, resync: resync, on: on, vnis: map[uint32]*vniInformers{}}
}

// start starts one informer on gvr with the field selector key=value.
func (s *informerSet) start(gvr schema.GroupVersionResource, key, value string, transform cache.TransformFunc, onEvent func(any)) (informer, error) {
	sel := fields.OneTermEqualSelector(key, value).String()
	gi := dynamicinformer.NewFilteredDynamicInformer(s.dyn, gvr, metav1.NamespaceAll, s.resync, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = sel })
	inf := gi.Informer()
	if err := inf.SetTransform(transform); err != nil {
		return informer{}, fmt.Errorf("%s informer (%s): %w", gvr.Resource, sel, err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onEvent,
		UpdateFunc: func(_, cur any) { onEvent(cur) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			onEvent(obj)
		},
	}); err != nil {
		return informer{}, fmt.Errorf("%s informer (%s): %w", gvr.Resource, sel, err)
	}
	stop := make(chan struct{})
	go inf.Run(stop)
	return informer{inf: inf, stop: stop}, nil
}

// startLocal starts the informer on this node's attachments.
func (s *informerSet) startLocal() error {
	if s.local != nil {
		return nil
	}
	i, err := s.start(vnet.NetworkAttachmentGVR, fieldNode, s.node, decodeAttachment, s.on.local)
	if err != nil {
		return err
	}
	s.local = &i
	return nil
}

// localSynced reports whether the local informer has listed everything.
func (s *informerSet) localSynced() bool { return s.local != nil && s.local.inf.HasSynced() }

// locals returns this node's attachments, as the local informer holds
// them.
func (s *informerSet) locals() []any {
	if s.local == nil {
		return nil
	}
	return s.local.inf.GetStore().List()
}

// setVNIs starts the informers of the VNIs in want that have none, and
// stops those of the VNIs not in want. It returns the VNIs it stopped.
func (s *informerSet) setVNIs(want map[uint32]bool) (stopped []uint32, err error) {
	for _, vni := range slices.Sorted(maps.Keys(s.vnis)) {
		if !want[vni] {
			vi := s.vnis[vni]
			vi.attachments.halt()
			vi.subnets.halt()
			delete(s.vnis, vni)
			stopped = append(stopped, vni)
		}
	}
	for _, vni := range slices.Sorted(maps.Keys(want)) {
		if s.vnis[vni] != nil {
			continue
		}
		value := fmt.Sprint(vni)
		atts, err := s.start(vnet.NetworkAttachmentGVR, fieldVNI, value, decodeAttachment, func(obj any) { s.on.attachment(vni, obj) })
		if err != nil {
			return stopped, err
		}
		subs, err := s.start(vnet.SubnetGVR, fieldVNI, value, decodeSubnet, func(obj any) { s.on.subnet(vni, obj) })
		if err != nil {
			atts.halt()
			return stopped, err
		}
		vi := &vniInformers{attachments: atts, subnets: subs}
		s.vnis[vni] = vi
		go func() {
			if cache.WaitForCacheSync(atts.stop, atts.inf.HasSynced, subs.inf.HasSynced) {
				s.on.synced(vni)
			}
		}()
	}
	return stopped, nil
}

// vni returns a VNI's informers, nil when it has none.
func (s *informerSet) vni(vni uint32) *vniInformers { return s.vnis[vni] }

// synced reports whether both of the VNI's informers have listed
// everything.
func (v *vniInformers) synced() bool {
	return v != nil && v.attachments.inf.HasSynced() && v.subnets.inf.HasSynced()
}

// vniList returns the VNIs that have informers, sorted.
func (s *informerSet) vniList() []uint32 { return slices.Sorted(maps.Keys(s.vnis)) }

// counts returns the number of informers running by resource, and of
// objects cached by resource and selector.
func (s *informerSet) counts() (running map[string]int, cached map[[2]string]int) {
	running = map[string]int{vnet.ResourceNetworkAttachments: 0, vnet.ResourceSubnets: 0}
	cached = map[[2]string]int{
		{vnet.ResourceNetworkAttachments, "node"}: 0, {vnet.ResourceNetworkAttachments, "vni"}: 0, {vnet.ResourceSubnets, "vni"}: 0,
	}
	if s.local != nil {
		running[vnet.ResourceNetworkAttachments]++
		cached[[2]string{vnet.ResourceNetworkAttachments, "node"}] += len(s.local.inf.GetStore().ListKeys())
	}
	for _, v := range s.vnis {
		running[vnet.ResourceNetworkAttachments]++
		running[vnet.ResourceSubnets]++
		cached[[2]string{vnet.ResourceNetworkAttachments, "vni"}] += len(v.attachments.inf.GetStore().ListKeys())
		cached[[2]string{vnet.ResourceSubnets, "vni"}] += len(v.subnets.inf.GetStore().ListKeys())
	}
	return running, cached
}

// stopAll stops every informer.
func (s *informerSet) stopAll() {
	if s.local != nil {
		s.local.halt()
		s.local = nil
	}
	_, _ = s.setVNIs(nil)
}

// decodeAttachment is the attachment informers' transform: the typed
// object, which holds less than the unstructured one and is what the
// feature reads. An object that does not decode (written before its CRD
// validated it) is kept, without its managed fields, so that it can be
// reported; failing the transform would stall the informer.
func decodeAttachment(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	if a, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u); err == nil {
		a.ManagedFields = nil
		return a, nil
	}
	u.SetManagedFields(nil)
	return u, nil
}

// decodeSubnet is the Subnet informers' transform (see decodeAttachment).
func decodeSubnet(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	if s, err := vnet.FromUnstructured[*vnet.Subnet](u); err == nil {
		s.ManagedFields = nil
		return s, nil
	}
	u.SetManagedFields(nil)
	return u, nil
}
