package vnetipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"nodeflow/model/vnet"
)

// Reasons of the controller's events, and the reason label of
// nodeflow_ipam_failures_total. Each problem is also written, as
// "field: problem", into the status: an attachment's status.errors.ipam,
// a Subnet's status.errors.
const (
	// ReasonSubnetNotFound: spec.subnet names no Subnet in the namespace.
	ReasonSubnetNotFound = "SubnetNotFound"
	// ReasonSubnetInvalid: the Subnet's spec is invalid (only an object
	// written before its CRD validated it can be).
	ReasonSubnetInvalid = "SubnetInvalid"
	// ReasonSubnetConflict: the Subnet overlaps an older Subnet of its
	// VNI, or the VNI's oldest Subnet is in another namespace.
	ReasonSubnetConflict = "SubnetConflict"
	// ReasonSubnetFull: every address of the Subnet is taken on its VNI.
	ReasonSubnetFull = "SubnetFull"
	// ReasonVNIMismatch: the attachment's spec.vni is not its Subnet's.
	ReasonVNIMismatch = "VNIMismatch"
	// ReasonNodeNotFound: spec.node names no Node.
	ReasonNodeNotFound = "NodeNotFound"
	// ReasonMalformed: the object cannot be read (a field of the wrong
	// type, written before the CRD validated it).
	ReasonMalformed = "Malformed"
	// ReasonAddressConflict: the address in the attachment's status is
	// locked by another attachment; the attachment gets another address.
	ReasonAddressConflict = "AddressConflict"
	// ReasonAddressOutsideSubnet: the address in the attachment's status
	// is not one of its Subnet's (the Subnet was deleted and created again
	// with another CIDR); the attachment gets another address.
	ReasonAddressOutsideSubnet = "AddressOutsideSubnet"
	// reasonAPIError counts syncs that failed on an API call and are
	// retried (a failure label only, no event).
	reasonAPIError = "APIError"
)

// problem keeps the controller from assigning an address.
type problem struct {
	reason string // the event reason, and the failure label
	field  string // the field at fault, of the object the problem is reported on
	msg    string
}

func (p problem) String() string { return p.field + ": " + p.msg }

func problemStrings(ps []problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// ref is the object an event is about.
func ref(kind string, u *unstructured.Unstructured) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: vnet.APIVersion, Kind: kind, Namespace: u.GetNamespace(),
		Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}
}

// warnNew emits a Warning event for each problem not among old (the
// strings already in the status): each once, when it appears.
func (c *Controller) warnNew(kind string, u *unstructured.Unstructured, old []string, ps []problem, count bool) {
	for _, p := range ps {
		if slices.Contains(old, p.String()) {
			continue
		}
		if count {
			c.m.failures.WithLabelValues(p.reason).Inc()
		}
		c.rec.Event(ref(kind, u), corev1.EventTypeWarning, p.reason, fmt.Sprintf("%s %s/%s: %s", kind, u.GetNamespace(), u.GetName(), p))
	}
}

// updateStatus writes u's status (changed by the caller on a copy) with
// u's resourceVersion: a conflict means the attachment changed since it
// was read, and the sync is retried with the newer object.
func (c *Controller) updateStatus(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out, err := c.opts.Dynamic.Resource(gvr).Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: component})
	if err != nil {
		return nil, fmt.Errorf("ipam: %s %s/%s: write status: %w", gvr.Resource, u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

// setStrings sets or (for an empty list) removes a string list.
func setStrings(obj map[string]any, list []string, fields ...string) {
	if len(list) == 0 {
		unstructured.RemoveNestedField(obj, fields...)
		return
	}
	vals := make([]any, len(list))
	for i, s := range list {
		vals[i] = s
	}
	_ = unstructured.SetNestedSlice(obj, vals, fields...)
}

// reportProblems writes an attachment's problems into status.errors.ipam.
// It leaves the rest of the status as it is, the address included, unless
// clearAddress: an address that must be replaced (locked by another
// attachment, or outside the Subnet) and has no replacement is removed.
func (c *Controller) reportProblems(ctx context.Context, u *unstructured.Unstructured, att *vnet.NetworkAttachment, ps []problem, clearAddress bool) error {
	errs := problemStrings(ps)
	if slices.Equal(errs, att.Status.Errors.IPAM) && (!clearAddress || att.Status.IP == "" && att.Status.MAC == "") {
		return nil
	}
	nu := u.DeepCopy()
	setStrings(nu.Object, errs, "status", "errors", "ipam")
	if clearAddress {
		unstructured.RemoveNestedField(nu.Object, "status", "ip")
		unstructured.RemoveNestedField(nu.Object, "status", "mac")
	}
	if _, err := c.updateStatus(ctx, vnet.NetworkAttachmentGVR, nu); err != nil {
		return ignoreNotFound(err)
	}
	c.warnNew(vnet.KindNetworkAttachment, u, att.Status.Errors.IPAM, ps, true)
	c.log.WithField("attachment", u.GetNamespace()+"/"+u.GetName()).WithField("errors", errs).Info("no address: problems reported")
	return nil
}

// writeAddress writes ip and its MAC into the attachment's status and
// clears status.errors.ipam. The caller holds ip's lock. It returns the
// written object, nil when there was nothing to write.
func (c *Controller) writeAddress(ctx context.Context, u *unstructured.Unstructured, att *vnet.NetworkAttachment, vni uint32, ip netip.Addr) (*unstructured.Unstructured, error) {
	mac := vnet.MACOf(vni, ip).String()
	if att.Status.IP == ip.String() && att.Status.MAC == mac && len(att.Status.Errors.IPAM) == 0 {
		return nil, nil
	}
	nu := u.DeepCopy()
	_ = unstructured.SetNestedField(nu.Object, ip.String(), "status", "ip")
	_ = unstructured.SetNestedField(nu.Object, mac, "status", "mac")
	setStrings(nu.Object, nil, "status", "errors", "ipam")
	return c.updateStatus(ctx, vnet.NetworkAttachmentGVR, nu)
}

// writeSubnetErrors writes a Subnet's problems into its status.errors.
func (c *Controller) writeSubnetErrors(ctx context.Context, u *unstructured.Unstructured, v *subnetView) error {
	errs := problemStrings(v.problems)
	if slices.Equal(errs, v.subnet.Status.Errors) {
		return nil
	}
	nu := u.DeepCopy()
	setStrings(nu.Object, errs, "status", "errors")
	if _, err := c.updateStatus(ctx, vnet.SubnetGVR, nu); err != nil {
		return ignoreNotFound(err)
	}
	c.warnNew(vnet.KindSubnet, u, v.subnet.Status.Errors, v.problems, false)
	c.log.WithField("subnet", u.GetNamespace()+"/"+u.GetName()).WithField("errors", errs).Info("Subnet status written")
	return nil
}

// ignoreNotFound drops the error of a write to an object that is gone:
// its deletion is handled on its own.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
