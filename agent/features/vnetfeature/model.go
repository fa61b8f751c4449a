package vnetfeature

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"nodeflow/model/vnet"
)

// problem is one thing wrong with an attachment's input or its making,
// reported as "field: message" in status.errors.host and in a Warning
// event with reason.
type problem struct {
	reason, field, msg string
}

func (p problem) String() string { return p.field + ": " + p.msg }

// Event reasons.
const (
	ReasonVNIInvalid      = "VNIInvalid"
	ReasonSubnetNotFound  = "SubnetNotFound"
	ReasonAddressInvalid  = "AddressInvalid"
	ReasonAddressConflict = "AddressConflict"
	ReasonInterfaceFailed = "InterfaceFailed"
	ReasonMalformed       = "Malformed"
	ReasonNoNodeAddress   = "NoNodeAddress"
)

// desired is what one ready local attachment needs: its interface, and
// the model of its flows.
type desired struct {
	namespace, name string
	uid             types.UID
	vni             uint32
	ip              netip.Addr
	mac             net.HardwareAddr
	link            Spec
}

func (d desired) key() string { return d.namespace + "/" + d.name }

// subnetLookup finds the Subnet namespace/name of a VNI in the VNI's
// Subnet informer; synced is false while that informer has not listed
// everything yet.
type subnetLookup func(vni uint32, namespace, name string) (s *vnet.Subnet, found, synced bool)

// judgement is what judge decides for one local attachment.
type judgement struct {
	// wait: nothing to do yet (no address, or the VNI's Subnets not
	// listed yet); no interface, no report.
	wait bool
	// problems, when there are any: no interface, and these reported.
	problems []problem
	// want is the interface and flows to have, when neither of the above.
	want desired
}

// judge decides what a local attachment needs, from its object and its
// Subnet. It does no I/O.
func judge(a *vnet.NetworkAttachment, subnets subnetLookup, mtu int) judgement {
	if a.Status.IP == "" {
		return judgement{wait: true}
	}
	vni := a.Spec.VNI
	if vni == 0 {
		return judgement{problems: []problem{{ReasonVNIInvalid, "spec.vni", "unset, while status.ip is set"}}}
	}
	if !vnet.ValidVNI(vni) {
		return judgement{problems: []problem{{ReasonVNIInvalid, "spec.vni",
			fmt.Sprintf("%d is not a virtual network's VNI (%d..%d)", vni, vnet.MinVNI, vnet.MaxVNI)}}}
	}
	var probs []problem
	ip, err := netip.ParseAddr(a.Status.IP)
	switch {
	case err != nil:
		probs = append(probs, problem{ReasonAddressInvalid, "status.ip", fmt.Sprintf("%q is not an IP address", a.Status.IP)})
	case ip.Is4In6() || ip.Zone() != "":
		probs = append(probs, problem{ReasonAddressInvalid, "status.ip", fmt.Sprintf("%s is not a canonical IPv4 or IPv6 address", ip)})
	}
	mac, err := net.ParseMAC(a.Status.MAC)
	switch {
	case a.Status.MAC == "":
		probs = append(probs, problem{ReasonAddressInvalid, "status.mac", "unset, while status.ip is set"})
	case err != nil || len(mac) != 6:
		probs = append(probs, problem{ReasonAddressInvalid, "status.mac", fmt.Sprintf("%q is not a MAC address", a.Status.MAC)})
	case ip.IsValid() && mac.String() != vnet.MACOf(vni, ip).String():
		probs = append(probs, problem{ReasonAddressInvalid, "status.mac", fmt.Sprintf("%s is not the MAC of %s on VNI %d (%s)", mac, ip, vni, vnet.MACOf(vni, ip))})
	}
	sub, found, synced := subnets(vni, a.Namespace, a.Spec.Subnet)
	if !synced {
		return judgement{wait: true}
	}
	var prefix netip.Prefix
	if !found {
		probs = append(probs, problem{ReasonSubnetNotFound, "spec.subnet", fmt.Sprintf("Subnet %q not found in namespace %s on VNI %d", a.Spec.Subnet, a.Namespace, vni)})
	} else if p, err := sub.Parse(); err != nil {
		probs = append(probs, problem{ReasonSubnetNotFound, "spec.subnet", err.Error()})
	} else if ip.IsValid() && !p.Contains(ip) {
		probs = append(probs, problem{ReasonAddressInvalid, "status.ip", fmt.Sprintf("%s is not in Subnet %s (%s)", ip, sub.Name, p)})
	} else {
		prefix = netip.PrefixFrom(ip, p.Bits())
	}
	if len(probs) > 0 {
		return judgement{problems: probs}
	}
	return judgement{want: desired{
		namespace: a.Namespace, name: a.Name, uid: a.UID, vni: vni, ip: ip, mac: mac,
		link: Spec{Name: InterfaceName(a.UID), Netns: NetnsName(a.Namespace, a.Name), MAC: mac, Addr: prefix, MTU: mtu},
	}}
}

// joinProblems renders problems for logs and events.
func joinProblems(ps []problem) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}
