package vnetipam

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodeflow/model/vnet"
)

// subnetView is a Subnet as the controller judges it.
type subnetView struct {
	subnet *vnet.Subnet
	prefix netip.Prefix
	rng    vnet.AddressRange
	// vniOK is set when spec.vni is valid (attachments may copy it).
	vniOK bool
	// problems keep addresses from being assigned from the Subnet; their
	// fields are the Subnet's.
	problems []problem
}

// cachedSubnet returns the cached Subnet namespace/name, judged; nil when
// the cache has none.
func (c *Controller) cachedSubnet(namespace, name string) *subnetView {
	o, ok, _ := c.subnets.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	u := unwrap(o)
	if u == nil {
		return nil
	}
	s, err := vnet.FromUnstructured[*vnet.Subnet](u)
	if err != nil {
		s = &vnet.Subnet{}
		s.Namespace, s.Name, s.UID, s.ResourceVersion = u.GetNamespace(), u.GetName(), u.GetUID(), u.GetResourceVersion()
		s.Status.Errors, _, _ = unstructured.NestedStringSlice(u.Object, "status", "errors")
		return &subnetView{subnet: s, problems: []problem{{reason: ReasonSubnetInvalid, field: "spec", msg: err.Error()}}}
	}
	return c.judge(s)
}

// judge checks a Subnet's spec, and its standing among the Subnets of its
// VNI (conflicts).
func (c *Controller) judge(s *vnet.Subnet) *subnetView {
	v := &subnetView{subnet: s, vniOK: vnet.ValidVNI(s.Spec.VNI)}
	if !v.vniOK {
		v.problems = append(v.problems, problem{ReasonSubnetInvalid, "spec.vni",
			fmt.Sprintf("%d is not in %d..%d", s.Spec.VNI, vnet.MinVNI, vnet.MaxVNI)})
	}
	p, err := vnet.ParseCIDR(s.Spec.CIDR)
	if err != nil {
		v.problems = append(v.problems, problem{ReasonSubnetInvalid, "spec.cidr", err.Error()})
	}
	if len(v.problems) > 0 {
		return v
	}
	v.prefix, v.rng = p, vnet.RangeOf(p)
	v.problems = conflicts(s, p, c.subnetsOfVNI(s.Spec.VNI))
	return v
}

// validSubnet is a Subnet with a valid spec, for conflicts.
type validSubnet struct {
	s *vnet.Subnet
	p netip.Prefix
}

// subnetsOfVNI returns the cached Subnets of vni whose spec is valid.
func (c *Controller) subnetsOfVNI(vni uint32) []validSubnet {
	objs, _ := c.subnets.GetIndexer().ByIndex(byVNI, strconv.FormatUint(uint64(vni), 10))
	var out []validSubnet
	for _, o := range objs {
		u := unwrap(o)
		if u == nil {
			continue
		}
		s, err := vnet.FromUnstructured[*vnet.Subnet](u)
		if err != nil || !vnet.ValidVNI(s.Spec.VNI) {
			continue
		}
		if p, err := vnet.ParseCIDR(s.Spec.CIDR); err == nil {
			out = append(out, validSubnet{s, p})
		}
	}
	return out
}

// conflicts judges s (with prefix p) among the valid Subnets of its VNI
// (s among them or not). The Subnets are ordered oldest first (creation
// time, then namespace, name and UID, so that every controller orders
// them alike), and:
//
//   - the VNI belongs to the namespace of the oldest: a Subnet in another
//     namespace is in conflict (its VNI's locks, which live in the
//     attachments' namespaces, could not keep addresses unique);
//   - of the others, each that overlaps an older Subnet without a
//     conflict is in conflict with it.
//
// So the older Subnet keeps working and only the newcomer is reported;
// its attachments get no address. (The locks alone would keep addresses
// unique in overlapping Subnets; the overlap is refused because it is
// almost always a mistake.)
func conflicts(s *vnet.Subnet, p netip.Prefix, vniSubnets []validSubnet) []problem {
	all := slices.Clone(vniSubnets)
	if !slices.ContainsFunc(all, func(o validSubnet) bool { return o.s.UID == s.UID }) {
		all = append(all, validSubnet{s, p})
	}
	slices.SortFunc(all, func(a, b validSubnet) int {
		return cmp.Or(a.s.CreationTimestamp.Compare(b.s.CreationTimestamp.Time),
			cmp.Compare(a.s.Namespace, b.s.Namespace), cmp.Compare(a.s.Name, b.s.Name), cmp.Compare(a.s.UID, b.s.UID))
	})
	owner := all[0].s
	var winners []validSubnet
	for _, o := range all {
		var pr []problem
		switch {
		case o.s.Namespace != owner.Namespace:
			pr = []problem{{ReasonSubnetConflict, "spec.vni", fmt.Sprintf(
				"VNI %d belongs to namespace %s, where its oldest Subnet %s is: a VNI's Subnets must all be in one namespace",
				o.s.Spec.VNI, owner.Namespace, owner.Name)}}
		default:
			if i := slices.IndexFunc(winners, func(w validSubnet) bool { return w.p.Overlaps(o.p) }); i >= 0 {
				w := winners[i]
				pr = []problem{{ReasonSubnetConflict, "spec.cidr", fmt.Sprintf(
					"%s overlaps %s of the older Subnet %s on VNI %d", o.p, w.p, w.s.Name, o.s.Spec.VNI)}}
			} else {
				winners = append(winners, o)
			}
		}
		if o.s.UID == s.UID {
			return pr
		}
	}
	return nil
}

// syncSubnet writes a Subnet's problems into its status.errors, with a
// Warning event for each new one.
func (c *Controller) syncSubnet(ctx context.Context, k key) error {
	o, ok, _ := c.subnets.GetIndexer().GetByKey(k.namespace + "/" + k.name)
	if !ok {
		return nil
	}
	u := unwrap(o)
	if u == nil {
		return nil
	}
	v := c.cachedSubnet(k.namespace, k.name)
	if v == nil {
		return nil
	}
	return c.writeSubnetErrors(ctx, u, v)
}
