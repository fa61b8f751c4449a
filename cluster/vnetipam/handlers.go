package vnetipam

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// addHandlers feeds the queue from the informers:
//
//	attachment added, changed, deleted  -> the attachment
//	Subnet added, changed, deleted      -> every Subnet of its VNI, and their attachments
//	                                       (one Subnet can change another's verdict)
//	lock added, changed, deleted        -> the attachment its holder names; on delete,
//	                                       also the attachments waiting for room on its VNI
//	Node added or deleted               -> the attachments on it
//
// and keeps the state's count of taken addresses in step with the lock
// cache.
func (c *Controller) addHandlers() error {
	if _, err := c.attachments.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueObject(attachmentKind, obj) },
		UpdateFunc: func(_, obj any) { c.enqueueObject(attachmentKind, obj) },
		DeleteFunc: func(obj any) { c.enqueueObject(attachmentKind, obj) },
	}); err != nil {
		return err
	}
	if _, err := c.subnets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.subnetEvent,
		UpdateFunc: func(old, obj any) {
			c.subnetEvent(old)
			c.subnetEvent(obj)
		},
		DeleteFunc: func(obj any) {
			if u := unwrap(obj); u != nil {
				c.state.forgetSubnet(u.GetUID())
			}
			c.subnetEvent(obj)
		},
	}); err != nil {
		return err
	}
	if _, err := c.locks.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.lockEvent(obj, true) },
		UpdateFunc: func(old, obj any) {
			c.lockEvent(old, false)
			c.lockEvent(obj, true)
		},
		DeleteFunc: func(obj any) { c.lockEvent(obj, false) },
	}); err != nil {
		return err
	}
	nodeEvent := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if n, ok := obj.(*corev1.Node); ok {
			c.enqueueIndexed(c.attachments, byNode, n.Name)
		}
	}
	_, err := c.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: nodeEvent, DeleteFunc: nodeEvent})
	return err
}

// unwrap returns the object of an informer event, nil if it is not an
// unstructured object.
func unwrap(obj any) *unstructured.Unstructured {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

func (c *Controller) enqueueObject(k kind, obj any) {
	if u := unwrap(obj); u != nil {
		c.queue.Add(key{kind: k, namespace: u.GetNamespace(), name: u.GetName()})
	}
}

// enqueueIndexed queues the attachments that inf's index idx files under
// value.
func (c *Controller) enqueueIndexed(inf cache.SharedIndexInformer, idx, value string) {
	objs, _ := inf.GetIndexer().ByIndex(idx, value)
	for _, o := range objs {
		c.enqueueObject(attachmentKind, o)
	}
}

func (c *Controller) subnetEvent(obj any) {
	u := unwrap(obj)
	if u == nil {
		return
	}
	c.queue.Add(key{kind: subnetKind, namespace: u.GetNamespace(), name: u.GetName()})
	c.enqueueIndexed(c.attachments, bySubnet, u.GetNamespace()+"/"+u.GetName())
	vni, ok := subnetVNI(u)
	if !ok {
		return
	}
	others, _ := c.subnets.GetIndexer().ByIndex(byVNI, strconv.FormatInt(vni, 10))
	for _, o := range others {
		if s := unwrap(o); s != nil && s.GetUID() != u.GetUID() {
			c.queue.Add(key{kind: subnetKind, namespace: s.GetNamespace(), name: s.GetName()})
			c.enqueueIndexed(c.attachments, bySubnet, s.GetNamespace()+"/"+s.GetName())
		}
	}
}

// lockEvent counts (added) or uncounts a lock, and queues its holder.
func (c *Controller) lockEvent(obj any, added bool) {
	u := unwrap(obj)
	if u == nil {
		return
	}
	l, err := readLock(u)
	if err != nil {
		return // not counted, not touched: see readLock
	}
	if added {
		c.state.lockAdded(l.vni, l.ip)
	} else {
		for _, k := range c.state.lockDeleted(l.vni, l.ip) {
			c.queue.Add(k)
		}
	}
	if l.holder != "" {
		c.queue.Add(key{kind: attachmentKind, namespace: l.namespace, name: l.holder})
	}
}

func subnetVNI(u *unstructured.Unstructured) (int64, bool) {
	v, ok, err := unstructured.NestedInt64(u.Object, "spec", "vni")
	return v, ok && err == nil
}

func indexSubnetVNI(obj any) ([]string, error) {
	if u := unwrap(obj); u != nil {
		if v, ok := subnetVNI(u); ok {
			return []string{strconv.FormatInt(v, 10)}, nil
		}
	}
	return nil, nil
}

func indexAttachmentSubnet(obj any) ([]string, error) {
	if u := unwrap(obj); u != nil {
		if s, _, _ := unstructured.NestedString(u.Object, "spec", "subnet"); s != "" {
			return []string{u.GetNamespace() + "/" + s}, nil
		}
	}
	return nil, nil
}

func indexAttachmentNode(obj any) ([]string, error) {
	if u := unwrap(obj); u != nil {
		if n, _, _ := unstructured.NestedString(u.Object, "spec", "node"); n != "" {
			return []string{n}, nil
		}
	}
	return nil, nil
}

func indexLockHolder(obj any) ([]string, error) {
	if u := unwrap(obj); u != nil {
		if l, err := readLock(u); err == nil && l.holder != "" {
			return []string{l.namespace + "/" + l.holder}, nil
		}
	}
	return nil, nil
}
