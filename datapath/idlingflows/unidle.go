// Package idlingflows builds br0's flows that catch the first packets of an
// idled service port: for every VIP of the port (ClusterIP, node IP and
// NodePort, ExternalIPs, LoadBalancer ingress IPs; each family), new
// connections load the port's ServiceID and go to the controller through
// their source's unidle meter (the punt stage, datapath/puntflows) and the node's
// unidle ceiling, as a packet-in of category plan.PacketInUnidle whose
// userdata carries the ServiceID:
//
//	table=30, priority=195,ct_state=+new+trk,tcp,nw_dst=VIP,tp_dst=PORT
//	    actions=set_field:ID->reg5,set_field:0x1000/0xf000->reg0,resubmit(,120),
//	            controller(userdata=01.<ID, 4 bytes>,meter_id=1)
//
// The builders are pure; agent/features/idlingfeature holds and re-injects the packets.
package idlingflows

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/serviceflows"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// Owner returns the reconciler owner of an idled port's flows.
func Owner(n service.ServicePortName) string { return "unidle/" + n.String() }

// MeterOwner is the reconciler owner of the unidle meter.
const MeterOwner = "unidle/_meters"

// Meter returns the node-wide ceiling of every unidle packet-in, behind
// the sources' own meters (punt.Rates): the first packets of new
// connections to every idled port of the node share it, so a flood is shed
// in the datapath.
func Meter() openflow.MeterEntry { return puntflows.CeilingMeter(plan.PacketInUnidle) }

// Userdata returns the controller userdata of port id's packet-ins.
func Userdata(id uint32) []byte {
	ud := []byte{byte(plan.PacketInUnidle), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(ud[1:], id)
	return ud
}

// ParseUserdata returns the ServiceID of an unidle packet-in's userdata.
func ParseUserdata(ud []byte) (uint32, error) {
	if len(ud) != 5 || ud[0] != byte(plan.PacketInUnidle) {
		return 0, fmt.Errorf("unidle: userdata %x: want category %d and a 4-byte ServiceID", ud, plan.PacketInUnidle)
	}
	return binary.BigEndian.Uint32(ud[1:]), nil
}

// Build returns the flows of an idled service port. nodePortAddrs are the
// addresses its NodePort answers on; ids are the group ids (ServiceIDs)
// the services feature gave the port, by service.GroupKey. An ingress IP
// whose Service restricts its sources catches only those sources (the
// service flows drop the others).
func Build(port *service.ServicePort, nodePortAddrs []netip.Addr, ids map[string]uint32) (reconcile.State, error) {
	if port == nil {
		return reconcile.State{}, fmt.Errorf("unidle: build: no service port")
	}
	var proto uint8
	var dst func(uint16) openflow.Field
	switch port.Protocol {
	case v1.ProtocolTCP:
		proto, dst = 6, openflow.TCPDst
	case v1.ProtocolUDP:
		proto, dst = 17, openflow.UDPDst
	case v1.ProtocolSCTP:
		proto, dst = 132, openflow.SCTPDst
	default:
		return reconcile.State{}, fmt.Errorf("unidle: %s: protocol %q: not TCP, UDP or SCTP", port.Name, port.Protocol)
	}
	var st reconcile.State
	for _, f := range port.Families() {
		internal, ok := ids[serviceflows.GroupKey(port.Name, f, false)]
		if !ok {
			return reconcile.State{}, fmt.Errorf("unidle: %s: %s: no ServiceID", port.Name, f)
		}
		external := internal
		if id, ok := ids[serviceflows.GroupKey(port.Name, f, true)]; ok {
			external = id
		}
		type vip struct {
			addr netip.Addr
			port uint16
			id   uint32
			// sources, when restricted, are the only ones caught.
			restricted bool
		}
		var vips []vip
		if cip, ok := port.ClusterIP(f); ok {
			vips = append(vips, vip{addr: cip, port: port.Port, id: internal})
		}
		if port.NodePort != 0 {
			for _, a := range nodePortAddrs {
				if service.FamilyOf(a) == f {
					vips = append(vips, vip{addr: a, port: port.NodePort, id: external})
				}
			}
		}
		for _, a := range port.ExternalIPs {
			if service.FamilyOf(a) == f {
				vips = append(vips, vip{addr: a, port: port.Port, id: external})
			}
		}
		for _, a := range port.LoadBalancerIPs {
			if service.FamilyOf(a) == f {
				vips = append(vips, vip{addr: a, port: port.Port, id: external, restricted: port.SourcesRestricted})
			}
		}
		for _, v := range vips {
			eth, ip := uint16(0x0800), openflow.IPv4Dst(v.addr)
			if v.addr.Is6() {
				eth, ip = 0x86dd, openflow.IPv6Dst(v.addr)
			}
			load, err := plan.ServiceID.LoadValue(uint64(v.id))
			if err != nil {
				return reconcile.State{}, fmt.Errorf("unidle: %s: ServiceID %d: %w", port.Name, v.id, err)
			}
			m := openflow.NewMatch(openflow.CtState(openflow.CtNew|openflow.CtTrk, openflow.CtNew|openflow.CtTrk),
				openflow.EthType(eth), openflow.IPProto(proto), ip, dst(v.port))
			matches := []openflow.Match{m}
			if v.restricted {
				matches = matches[:0]
				for _, r := range port.SourceRanges {
					if service.FamilyOf(r.Addr()) != f {
						continue
					}
					src := openflow.IPv4SrcPrefix(r)
					if f == service.IPv6 {
						src = openflow.IPv6SrcPrefix(r)
					}
					matches = append(matches, openflow.NewMatch(append(slices.Clone(m.Fields), src)...))
				}
			}
			for _, m := range matches {
				st.Flows = append(st.Flows, openflow.Flow{
					Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityUnidle), Match: m,
					Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: slices.Concat([]openflow.Action{load}, puntflows.Actions(plan.PacketInUnidle),
						[]openflow.Action{openflow.Controller2{
							MaxLen: openflow.ControllerMaxLenNoBuffer, ControllerID: plan.ControllerID,
							Reason: openflow.PacketInAction, Userdata: Userdata(v.id), MeterID: plan.MeterUnidle,
						}})}},
				})
			}
		}
	}
	return st, nil
}
