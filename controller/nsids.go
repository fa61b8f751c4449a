package controller

import (
	"hash/fnv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// hashIDs is the namespace id table until the allocator runs: 24 bits of
// the FNV-1a hash of the name, never 0. It follows the Namespace informer
// so that a namespace has an id only while it exists.
type hashIDs struct {
	mu    sync.Mutex
	known map[string]bool
	on    []func(string)
}

func newHashIDs(f informers.SharedInformerFactory) *hashIDs {
	h := &hashIDs{known: map[string]bool{}}
	inf := f.Core().V1().Namespaces().Informer()
	set := func(obj any, present bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		ns, ok := obj.(*corev1.Namespace)
		if !ok {
			return
		}
		h.mu.Lock()
		changed := h.known[ns.Name] != present
		if present {
			h.known[ns.Name] = true
		} else {
			delete(h.known, ns.Name)
		}
		subs := append([]func(string){}, h.on...)
		h.mu.Unlock()
		if changed {
			for _, f := range subs {
				f(ns.Name)
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj, true) },
		UpdateFunc: func(_, obj any) { set(obj, true) },
		DeleteFunc: func(obj any) { set(obj, false) },
	})
	return h
}

func (h *hashIDs) Lookup(ns string) (uint32, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.known[ns] {
		return 0, false
	}
	f := fnv.New32a()
	f.Write([]byte(ns))
	id := f.Sum32() & 0x7fffff
	if id == 0 {
		id = 1
	}
	return id, true
}

func (h *hashIDs) OnChange(f func(string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on = append(h.on, f)
}
