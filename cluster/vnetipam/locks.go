package vnetipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/model/vnet"
)

// lockInfo is what the controller reads of an IPLock.
type lockInfo struct {
	namespace, name string
	uid             types.UID
	// vni and ip come from the name, which is what makes the lock unique.
	vni uint32
	ip  netip.Addr
	// holder and holderUID are the attachment of the controller owner
	// reference; "" for a lock without one (a reservation).
	holder    string
	holderUID types.UID
}

func (l lockInfo) String() string { return "IPLock " + l.namespace + "/" + l.name }

// holderString names the lock's holder for messages.
func (l lockInfo) holderString() string {
	if l.holder == "" {
		return "no attachment (a reservation)"
	}
	return fmt.Sprintf("attachment %s (uid %s)", l.holder, l.holderUID)
}

// readLock reads an IPLock. A lock whose name is not LockName of some
// address is neither counted nor ever deleted by the controller; the CRD
// does not let one be created.
func readLock(u *unstructured.Unstructured) (lockInfo, error) {
	vni, ip, err := vnet.ParseLockName(u.GetName())
	if err != nil {
		return lockInfo{}, fmt.Errorf("ipam: IPLock %s/%s: metadata.name: %w", u.GetNamespace(), u.GetName(), err)
	}
	l := lockInfo{namespace: u.GetNamespace(), name: u.GetName(), uid: u.GetUID(), vni: vni, ip: ip}
	k, err := vnet.FromUnstructured[*vnet.IPLock](u)
	if err != nil {
		return lockInfo{}, fmt.Errorf("ipam: %w", err)
	}
	if ref, ok := k.Holder(); ok {
		l.holder, l.holderUID = ref.Name, ref.UID
	}
	return l, nil
}

func sortAddrs(a []netip.Addr) {
	slices.SortFunc(a, func(x, y netip.Addr) int { return x.Compare(y) })
}

// locksOf returns the cached locks held by any attachment named k (of any
// UID), lowest address first.
func (c *Controller) locksOf(k key) []lockInfo {
	objs, _ := c.locks.GetIndexer().ByIndex(byHolder, k.namespace+"/"+k.name)
	var out []lockInfo
	for _, o := range objs {
		if u := unwrap(o); u != nil {
			if l, err := readLock(u); err == nil {
				out = append(out, l)
			}
		}
	}
	slices.SortFunc(out, func(a, b lockInfo) int { return a.ip.Compare(b.ip) })
	return out
}

// cachedLock returns the cached lock namespace/name.
func (c *Controller) cachedLock(namespace, name string) (lockInfo, bool) {
	o, ok, _ := c.locks.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return lockInfo{}, false
	}
	u := unwrap(o)
	if u == nil {
		return lockInfo{}, false
	}
	l, err := readLock(u)
	return l, err == nil
}

// getLock reads a lock from the API server.
func (c *Controller) getLock(ctx context.Context, namespace, name string) (lockInfo, error) {
	u, err := c.opts.Dynamic.Resource(vnet.IPLockGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return lockInfo{}, err
	}
	return readLock(u)
}

// createLock takes ip on vni for att: the create is the test-and-set.
func (c *Controller) createLock(ctx context.Context, att *vnet.NetworkAttachment, vni uint32, ip netip.Addr) error {
	u, err := vnet.ToUnstructured(vnet.NewIPLock(att, vni, ip))
	if err != nil {
		return err
	}
	_, err = c.opts.Dynamic.Resource(vnet.IPLockGVR).Namespace(att.Namespace).Create(ctx, u, metav1.CreateOptions{FieldManager: component})
	return err
}

// Why a lock is freed: the label values of nodeflow_ipam_locks_freed_total.
const (
	freedGone  = "attachment-gone" // no attachment of the holder's name and UID
	freedExtra = "extra"           // its attachment holds another address
)

// deleteLock frees a lock, if it is still the object that was read (a UID
// precondition), and logs why.
func (c *Controller) deleteLock(ctx context.Context, l lockInfo, why, detail string, log logrus.FieldLogger) error {
	uid := l.uid
	err := c.opts.Dynamic.Resource(vnet.IPLockGVR).Namespace(l.namespace).Delete(ctx, l.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		c.m.freed.WithLabelValues(why).Inc()
		log.WithFields(logrus.Fields{"lock": l.name, "vni": l.vni, "ip": l.ip.String(), "holderUID": l.holderUID}).Info("address freed: " + detail)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // already gone, or another lock by now
	}
	return fmt.Errorf("ipam: free %s: %w", l, err)
}

// errCacheBehind stops a sync whose cached attachment is older than the
// API server's: the informer brings the newer one, and a sync with it.
var errCacheBehind = fmt.Errorf("ipam: the attachment cache is behind the API server")

// freeOrphans frees the locks held under k's name by an attachment that no
// longer exists: cachedUID is the UID of the cached attachment ("" when
// the cache has none). Before freeing anything it reads the attachment
// from the API server, which knows better than the cache: a lock is freed
// only when no attachment of its holder's name and UID exists there (UIDs
// are never reused, so that one can never come back). It returns
// errCacheBehind when the API server has an attachment the cache does not.
func (c *Controller) freeOrphans(ctx context.Context, k key, locks []lockInfo, cachedUID types.UID, log logrus.FieldLogger) error {
	stale := slices.ContainsFunc(locks, func(l lockInfo) bool { return l.holderUID != cachedUID })
	if !stale {
		return nil
	}
	liveUID := types.UID("")
	live, err := c.opts.Dynamic.Resource(vnet.NetworkAttachmentGVR).Namespace(k.namespace).Get(ctx, k.name, metav1.GetOptions{})
	switch {
	case err == nil:
		liveUID = live.GetUID()
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("ipam: %s: read it to free its locks: %w", k, err)
	}
	for _, l := range locks {
		if l.holderUID == liveUID {
			continue
		}
		detail := "its attachment is gone"
		if liveUID != "" {
			detail = "its attachment was deleted and created again (uid " + string(liveUID) + ")"
		}
		if err := c.deleteLock(ctx, l, freedGone, detail, log); err != nil {
			return err
		}
	}
	if liveUID != cachedUID {
		return errCacheBehind
	}
	return nil
}

// freeExtras frees the locks the attachment holds beyond the one of ip on
// vni, which its status names: locks of an assignment whose status write
// lost a race, or of an address it had before its Subnet changed. It
// reads the attachment from the API server first and frees nothing unless
// the status there still names ip: a lock is never freed while a status
// may name it.
func (c *Controller) freeExtras(ctx context.Context, k key, att *vnet.NetworkAttachment, vni uint32, ip netip.Addr, mine []lockInfo, log logrus.FieldLogger) error {
	var extras []lockInfo
	for _, l := range mine {
		if l.vni != vni || l.ip != ip {
			extras = append(extras, l)
		}
	}
	if len(extras) == 0 {
		return nil
	}
	u, err := c.opts.Dynamic.Resource(vnet.NetworkAttachmentGVR).Namespace(k.namespace).Get(ctx, k.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // its deletion queues it again
	}
	if err != nil {
		return fmt.Errorf("ipam: %s: read it to free its extra locks: %w", k, err)
	}
	live, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u)
	if err != nil || live.UID != att.UID || live.Spec.VNI != vni || live.Status.IP != ip.String() {
		return nil // changed since: its update queues it again
	}
	for _, l := range extras {
		if err := c.deleteLock(ctx, l, freedExtra, "the attachment holds "+ip.String()+" on VNI "+fmt.Sprint(vni), log); err != nil {
			return err
		}
	}
	return nil
}
