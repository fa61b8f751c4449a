package vnet

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// Hand-written deep copies: every slice is copied, so a copy shares no
// memory with its original. TestDeepCopy checks each against a mutation of
// every field.

// DeepCopyInto copies s into out.
func (s *Subnet) DeepCopyInto(out *Subnet) {
	*out = *s
	out.ObjectMeta = *s.ObjectMeta.DeepCopy()
	out.Status.Errors = slices.Clone(s.Status.Errors)
}

// DeepCopy returns a deep copy of s.
func (s *Subnet) DeepCopy() *Subnet {
	if s == nil {
		return nil
	}
	out := new(Subnet)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (s *Subnet) DeepCopyObject() runtime.Object {
	if c := s.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies l into out.
func (l *SubnetList) DeepCopyInto(out *SubnetList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Subnet, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy of l.
func (l *SubnetList) DeepCopy() *SubnetList {
	if l == nil {
		return nil
	}
	out := new(SubnetList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *SubnetList) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies a into out.
func (a *NetworkAttachment) DeepCopyInto(out *NetworkAttachment) {
	*out = *a
	out.ObjectMeta = *a.ObjectMeta.DeepCopy()
	out.Status.Errors.IPAM = slices.Clone(a.Status.Errors.IPAM)
	out.Status.Errors.Host = slices.Clone(a.Status.Errors.Host)
}

// DeepCopy returns a deep copy of a.
func (a *NetworkAttachment) DeepCopy() *NetworkAttachment {
	if a == nil {
		return nil
	}
	out := new(NetworkAttachment)
	a.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (a *NetworkAttachment) DeepCopyObject() runtime.Object {
	if c := a.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies l into out.
func (l *NetworkAttachmentList) DeepCopyInto(out *NetworkAttachmentList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]NetworkAttachment, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy of l.
func (l *NetworkAttachmentList) DeepCopy() *NetworkAttachmentList {
	if l == nil {
		return nil
	}
	out := new(NetworkAttachmentList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *NetworkAttachmentList) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies k into out.
func (k *IPLock) DeepCopyInto(out *IPLock) {
	*out = *k
	out.ObjectMeta = *k.ObjectMeta.DeepCopy()
}

// DeepCopy returns a deep copy of k.
func (k *IPLock) DeepCopy() *IPLock {
	if k == nil {
		return nil
	}
	out := new(IPLock)
	k.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (k *IPLock) DeepCopyObject() runtime.Object {
	if c := k.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies l into out.
func (l *IPLockList) DeepCopyInto(out *IPLockList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]IPLock, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy of l.
func (l *IPLockList) DeepCopy() *IPLockList {
	if l == nil {
		return nil
	}
	out := new(IPLockList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *IPLockList) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}
