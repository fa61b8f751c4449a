package vnetipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodeflow/model/vnet"
)

// errFull is returned by take when the Subnet has no free address.
var errFull = errors.New("ipam: no free address")

// syncAttachment brings one attachment name to its goal: at most one
// attachment of the name exists, and it holds exactly the lock of the
// address in its status, or no lock and no new address when a problem
// stops it. In order:
//
//  1. locks held under the name by an attachment that is gone (checked
//     with the API server) are freed;
//  2. the attachment is checked: its Subnet (present, valid, without
//     conflict), spec.vni (set from the Subnet when unset, else equal to
//     it), its Node; a problem is reported in status.errors.ipam and
//     stops the sync, leaving any address it has;
//  3. an assignment in flight whose write the cache has not shown yet
//     stops the sync;
//  4. an address in the status is kept if the attachment holds its lock
//     (asking the API server when the cache has no lock, and taking the
//     lock again when it does not exist); then the attachment's other
//     locks are freed;
//  5. otherwise a lock the attachment already holds is adopted, or a free
//     address is locked, and only then written into the status.
func (c *Controller) syncAttachment(ctx context.Context, k key) error {
	log := c.log.WithField("attachment", k.namespace+"/"+k.name)
	locks := c.locksOf(k)
	o, ok, _ := c.attachments.GetIndexer().GetByKey(k.namespace + "/" + k.name)
	var u *unstructured.Unstructured
	if ok {
		u = unwrap(o)
	}
	if u == nil {
		c.state.forget(k)
		return ignoreBehind(c.freeOrphans(ctx, k, locks, "", log))
	}
	if err := c.freeOrphans(ctx, k, locks, u.GetUID(), log); err != nil {
		return ignoreBehind(err)
	}
	att, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u)
	if err != nil {
		att = &vnet.NetworkAttachment{}
		att.Status.Errors.IPAM, _, _ = unstructured.NestedStringSlice(u.Object, "status", "errors", "ipam")
		return c.reportProblems(ctx, u, att, []problem{{ReasonMalformed, "spec", err.Error()}}, false)
	}
	if att.DeletionTimestamp != nil {
		return nil // it keeps its address until it is gone
	}
	var mine []lockInfo
	for _, l := range locks {
		if l.holderUID == att.UID {
			mine = append(mine, l)
		}
	}

	sv, ps, err := c.check(ctx, att)
	switch {
	case errors.Is(err, errCacheBehind):
		return nil // the Subnet's arrival in the cache queues the attachment
	case err != nil:
		return err
	case att.Spec.VNI == 0 && sv != nil && sv.vniOK:
		return c.defaultVNI(ctx, u, sv.subnet.Spec.VNI, log)
	case len(ps) > 0:
		return c.reportProblems(ctx, u, att, ps, false)
	}
	vni := att.Spec.VNI
	log = log.WithField("vni", vni)

	// The seed's record of the assignment in flight.
	f, inFlight := c.state.flight(k)
	if inFlight && (f.uid != att.UID || f.subnetRV != sv.subnet.ResourceVersion || (att.ResourceVersion != f.seenRV && att.ResourceVersion != f.writtenRV)) {
		c.state.dropFlight(k)
		inFlight = false
	}
	if inFlight && att.ResourceVersion == f.seenRV {
		return nil // the status write is done; the cache has not shown it yet
	}

	cur, _ := netip.ParseAddr(att.Status.IP)
	var avoid netip.Addr
	switch {
	case cur.IsValid() && sv.rng.Contains(cur):
		held, holder, err := c.hold(ctx, att, vni, cur, inFlight && f.vni == vni && f.ip == cur, log)
		if err != nil {
			return err
		}
		if held {
			if inFlight {
				if _, cached := c.cachedLock(att.Namespace, vnet.LockName(vni, cur)); cached {
					c.state.dropFlight(k) // the caches have caught up
				}
			}
			if err := c.freeExtras(ctx, k, att, vni, cur, mine, log); err != nil {
				return err
			}
			_, err := c.writeAddress(ctx, u, att, vni, cur) // a MAC or an error to fix, if anything
			return ignoreNotFound(err)
		}
		c.m.lockConflicts.Inc()
		c.warnNew(vnet.KindNetworkAttachment, u, nil, []problem{{ReasonAddressConflict, "status.ip",
			fmt.Sprintf("%s on VNI %d is locked by %s; assigning another address", cur, vni, holder)}}, false)
		avoid = cur
	case att.Status.IP != "":
		c.warnNew(vnet.KindNetworkAttachment, u, nil, []problem{{ReasonAddressOutsideSubnet, "status.ip",
			fmt.Sprintf("%q is not an address of Subnet %s (%s); assigning another", att.Status.IP, sv.subnet.Name, sv.prefix)}}, false)
		avoid = cur
	}

	ip, err := c.take(ctx, att, sv, vni, mine, avoid, log)
	if errors.Is(err, errFull) {
		c.state.wait(vni, k)
		return c.reportProblems(ctx, u, att, []problem{{ReasonSubnetFull, "spec.subnet",
			fmt.Sprintf("Subnet %s (%s) has no free address on VNI %d", sv.subnet.Name, sv.prefix, vni)}}, avoid.IsValid())
	}
	if err != nil {
		return err
	}
	out, err := c.writeAddress(ctx, u, att, vni, ip)
	if err != nil {
		// The lock stays held by the attachment: the next sync adopts it,
		// or frees it if the attachment is gone.
		return ignoreNotFound(err)
	}
	if out == nil {
		return nil
	}
	c.state.setFlight(k, flight{uid: att.UID, seenRV: att.ResourceVersion, writtenRV: out.GetResourceVersion(),
		subnetRV: sv.subnet.ResourceVersion, vni: vni, ip: ip})
	c.m.assignments.Inc()
	if att.Status.IP == "" {
		c.m.latency.Observe(c.opts.Now().Sub(att.CreationTimestamp.Time).Seconds())
	}
	log.WithFields(logrus.Fields{"ip": ip.String(), "subnet": sv.subnet.Name}).Info("address assigned")
	return nil
}

// ignoreBehind turns errCacheBehind into nil: the informer brings the
// newer object, and with it another sync.
func ignoreBehind(err error) error {
	if errors.Is(err, errCacheBehind) {
		return nil
	}
	return err
}

// check judges an attachment: its Subnet, spec.vni and Node. It returns
// the Subnet (nil when missing) and the problems, or errCacheBehind when
// the Subnet exists but is not in the cache yet.
func (c *Controller) check(ctx context.Context, att *vnet.NetworkAttachment) (*subnetView, []problem, error) {
	var ps []problem
	sv := c.cachedSubnet(att.Namespace, att.Spec.Subnet)
	if sv == nil {
		// Ask the API server before reporting: an attachment is often
		// created right after its Subnet.
		_, err := c.opts.Dynamic.Resource(vnet.SubnetGVR).Namespace(att.Namespace).Get(ctx, att.Spec.Subnet, metav1.GetOptions{})
		switch {
		case err == nil:
			return nil, nil, errCacheBehind
		case !apierrors.IsNotFound(err):
			return nil, nil, fmt.Errorf("ipam: NetworkAttachment %s/%s: read Subnet %s: %w", att.Namespace, att.Name, att.Spec.Subnet, err)
		}
		ps = append(ps, problem{ReasonSubnetNotFound, "spec.subnet", fmt.Sprintf("Subnet %q not found in namespace %s", att.Spec.Subnet, att.Namespace)})
	} else {
		for _, p := range sv.problems {
			ps = append(ps, problem{p.reason, "spec.subnet", fmt.Sprintf("Subnet %s: %s", att.Spec.Subnet, p)})
		}
		if sv.vniOK && att.Spec.VNI != 0 && att.Spec.VNI != sv.subnet.Spec.VNI {
			ps = append(ps, problem{ReasonVNIMismatch, "spec.vni", fmt.Sprintf("%d is not the VNI %d of Subnet %s", att.Spec.VNI, sv.subnet.Spec.VNI, att.Spec.Subnet)})
		}
	}
	ok, err := c.nodeExists(ctx, att.Spec.Node)
	if err != nil {
		return nil, nil, fmt.Errorf("ipam: NetworkAttachment %s/%s: read Node %s: %w", att.Namespace, att.Name, att.Spec.Node, err)
	}
	if !ok {
		ps = append(ps, problem{ReasonNodeNotFound, "spec.node", fmt.Sprintf("Node %q not found", att.Spec.Node)})
	}
	return sv, ps, nil
}

// nodeExists looks the Node up in the cache, then, when it is not there,
// in the API server.
func (c *Controller) nodeExists(ctx context.Context, name string) (bool, error) {
	if _, ok, _ := c.nodes.GetIndexer().GetByKey(name); ok {
		return true, nil
	}
	_, err := c.opts.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// defaultVNI sets an attachment's unset spec.vni to its Subnet's.
func (c *Controller) defaultVNI(ctx context.Context, u *unstructured.Unstructured, vni uint32, log logrus.FieldLogger) error {
	nu := u.DeepCopy()
	_ = unstructured.SetNestedField(nu.Object, int64(vni), "spec", "vni")
	_, err := c.opts.Dynamic.Resource(vnet.NetworkAttachmentGVR).Namespace(u.GetNamespace()).Update(ctx, nu, metav1.UpdateOptions{FieldManager: component})
	if err != nil {
		return ignoreNotFound(fmt.Errorf("ipam: NetworkAttachment %s/%s: set spec.vni: %w", u.GetNamespace(), u.GetName(), err))
	}
	log.WithField("vni", vni).Info("spec.vni set from the Subnet")
	return nil
}

// hold reports whether att holds the lock of ip on vni. The cache answers
// when it has the lock held by att, or when the record in flight says
// this controller took it (trusted); otherwise the API server does. When
// no lock exists, hold takes it again: the status names the address, so
// it must not go to anyone else. holder describes the lock's holder when
// it is not att.
func (c *Controller) hold(ctx context.Context, att *vnet.NetworkAttachment, vni uint32, ip netip.Addr, trusted bool, log logrus.FieldLogger) (held bool, holder string, err error) {
	name := vnet.LockName(vni, ip)
	l, cached := c.cachedLock(att.Namespace, name)
	if cached && l.holderUID == att.UID {
		return true, "", nil
	}
	if !cached && trusted {
		return true, "", nil
	}
	for range 2 {
		l, err := c.getLock(ctx, att.Namespace, name)
		switch {
		case err == nil && l.holderUID == att.UID:
			return true, "", nil
		case err == nil:
			return false, l.holderString(), nil
		case !apierrors.IsNotFound(err):
			return false, "", fmt.Errorf("ipam: NetworkAttachment %s/%s: read IPLock %s: %w", att.Namespace, att.Name, name, err)
		}
		err = c.createLock(ctx, att, vni, ip)
		if err == nil {
			c.state.claim(vni, ip, att.UID, c.opts.Now())
			log.WithFields(logrus.Fields{"ip": ip.String(), "lock": name}).Warn("the address in the status had no lock: locked it again")
			return true, "", nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, "", fmt.Errorf("ipam: NetworkAttachment %s/%s: lock %s again: %w", att.Namespace, att.Name, ip, err)
		}
	}
	return false, "", fmt.Errorf("ipam: NetworkAttachment %s/%s: IPLock %s came and went twice", att.Namespace, att.Name, name)
}

// take returns an address on vni in the Subnet sv that att holds the lock
// of: one att already holds (a lock whose status write did not happen,
// because of a crash or a lost race), else a free one it locks now. It
// never returns avoid. errFull says the Subnet has no free address.
func (c *Controller) take(ctx context.Context, att *vnet.NetworkAttachment, sv *subnetView, vni uint32, mine []lockInfo, avoid netip.Addr, log logrus.FieldLogger) (netip.Addr, error) {
	now := c.opts.Now()
	for _, l := range mine {
		if l.vni == vni && l.ip != avoid && sv.rng.Contains(l.ip) {
			log.WithFields(logrus.Fields{"ip": l.ip.String(), "lock": l.name}).Info("adopting a lock the attachment already holds")
			return l.ip, nil
		}
	}
	for _, ip := range c.state.claimedBy(att.UID, vni, sv.rng, now) {
		if ip != avoid {
			return ip, nil
		}
	}
	for range maxPicks {
		ip, ok := c.state.pick(vni, sv.subnet.UID, sv.rng, now)
		if !ok {
			return netip.Addr{}, errFull
		}
		err := c.createLock(ctx, att, vni, ip)
		switch {
		case err == nil:
			c.state.claim(vni, ip, att.UID, now)
			return ip, nil
		case !apierrors.IsAlreadyExists(err):
			c.state.unclaim(vni, ip)
			return netip.Addr{}, fmt.Errorf("ipam: NetworkAttachment %s/%s: lock %s: %w", att.Namespace, att.Name, ip, err)
		}
		// Locked by a lock the cache does not show yet: this
		// attachment's (an earlier pass, or another controller), or
		// another's.
		c.m.lockConflicts.Inc()
		l, err := c.getLock(ctx, att.Namespace, vnet.LockName(vni, ip))
		switch {
		case err == nil && l.holderUID == att.UID:
			c.state.claim(vni, ip, att.UID, now)
			return ip, nil
		case err == nil:
			c.state.claim(vni, ip, "", now) // taken until the cache shows it
		case apierrors.IsNotFound(err):
			c.state.unclaim(vni, ip) // gone again; a later pick may take it
		default:
			return netip.Addr{}, fmt.Errorf("ipam: NetworkAttachment %s/%s: read IPLock %s: %w", att.Namespace, att.Name, vnet.LockName(vni, ip), err)
		}
	}
	return netip.Addr{}, fmt.Errorf("ipam: NetworkAttachment %s/%s: %d addresses in a row were locked by locks not in the cache yet", att.Namespace, att.Name, maxPicks)
}
