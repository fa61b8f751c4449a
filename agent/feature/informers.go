package feature

import "k8s.io/client-go/tools/cache"

// ObjectOf returns an informer's object as a T, looking through the
// tombstone a missed delete leaves (cache.DeletedFinalStateUnknown). ok is
// false when it is not a T.
func ObjectOf[T any](obj any) (t T, ok bool) {
	if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
		obj = d.Obj
	}
	t, ok = obj.(T)
	return t, ok
}

// OnEveryChange returns handlers that call changed with the object added,
// updated (its new version) or deleted.
func OnEveryChange(changed func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, cur any) { changed(cur) },
		DeleteFunc: changed,
	}
}
