package servicefeature

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"nodeflow/agent/feature"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// setShared sets owner's state for the service port name. Two Services
// may claim the same address and port (an external IP, say, that the API
// server does not check): the flows for it are then another owner's
// already, and the store refuses the whole state. setShared leaves those
// flows to the Service that has them, sets the rest, so that the port's
// other addresses keep working, and reports each address on the Service
// that lost it. It returns whether the state was set, and what was left
// out (nil for nothing): the caller retries such a port on every sync, to
// take the address over once the other Service lets go.
func (p *Proxy) setShared(store feature.Owners, owner string, st reconcile.State, name service.ServicePortName, port *service.ServicePort) (bool, *lostClaims) {
	err := store.Set(owner, st)
	if err == nil {
		return true, nil
	}
	contested := store.Contested(owner, st)
	if !errors.Is(err, reconcile.ErrConflict) || len(contested) == 0 {
		p.log.WithError(err).WithField("owner", owner).Error("cannot set service flows")
		return false, nil
	}
	skip := make(map[int]bool, len(contested))
	reported := map[string]bool{}
	lost := &lostClaims{}
	for _, c := range contested {
		skip[c.Index] = true
		ie := contestError(name, port, st.Flows[c.Index], c.Owner, lost)
		if !reported[ie.Error()] {
			reported[ie.Error()] = true
			p.reportInput(ie)
		}
	}
	rest := st
	rest.Flows = make([]openflow.Flow, 0, len(st.Flows)-len(skip))
	for i, f := range st.Flows {
		if !skip[i] {
			rest.Flows = append(rest.Flows, f)
		}
	}
	if err := store.Set(owner, rest); err != nil {
		p.log.WithError(err).WithField("owner", owner).Error("cannot set service flows")
		return false, nil
	}
	p.log.WithFields(logrus.Fields{"owner": owner, "left out": len(skip)}).Debug("service flows set without the ones another service has")
	return true, lost
}

// lostClaims are the addresses of a service port that another port has.
type lostClaims struct {
	addrs    []netip.Addr // external and ingress IPs
	nodePort bool
}

// merge returns the claims of l and m together; either may be nil.
func (l *lostClaims) merge(m *lostClaims) *lostClaims {
	switch {
	case l == nil:
		return m
	case m == nil:
		return l
	}
	return &lostClaims{addrs: append(slices.Clone(l.addrs), m.addrs...), nodePort: l.nodePort || m.nodePort}
}

// without returns sp's external and ingress IPs and node port less the
// lost ones, for the host's own-traffic DNAT, which must send the host
// where br0 sends pods.
func (l *lostClaims) without(sp *service.ServicePort) (external, ingress []netip.Addr, nodePort uint16) {
	if l == nil {
		return sp.ExternalIPs, sp.LoadBalancerIPs, sp.NodePort
	}
	keep := func(list []netip.Addr) []netip.Addr {
		var out []netip.Addr
		for _, a := range list {
			if !slices.Contains(l.addrs, a) {
				out = append(out, a)
			}
		}
		return out
	}
	nodePort = sp.NodePort
	if l.nodePort {
		nodePort = 0
	}
	return keep(sp.ExternalIPs), keep(sp.LoadBalancerIPs), nodePort
}

// contestError names what flow f of the port name claims (the field of
// the Service it comes from, and the address) and the Service whose owner
// other has it. It adds the address to lost.
func contestError(name service.ServicePortName, port *service.ServicePort, f openflow.Flow, other string, lost *lostClaims) *service.InputError {
	field, what := "spec.ports", fmt.Sprintf("port %d/%s", port.Port, port.Protocol)
	addrs := []struct {
		field string
		list  []netip.Addr
	}{
		{"spec.clusterIPs", port.ClusterIPs},
		{"spec.externalIPs", port.ExternalIPs},
		{"status.loadBalancer.ingress", port.LoadBalancerIPs},
	}
found:
	for _, a := range addrs {
		for _, ip := range a.list {
			if matchesDst(f.Match, ip) {
				field, what = a.field, fmt.Sprintf("%s port %d/%s", ip, port.Port, port.Protocol)
				if a.field != "spec.clusterIPs" && !slices.Contains(lost.addrs, ip) {
					lost.addrs = append(lost.addrs, ip)
				}
				break found
			}
		}
	}
	if field == "spec.ports" && port.NodePort != 0 && matchesField(f.Match, openflow.TCPDst(port.NodePort), openflow.UDPDst(port.NodePort), openflow.SCTPDst(port.NodePort), openflow.CtTpDst(port.NodePort)) {
		field, what = "spec.ports.nodePort", fmt.Sprintf("node port %d/%s", port.NodePort, port.Protocol)
		lost.nodePort = true
	}
	// Owners are "service/<port>" and "service-gateway/<port>".
	_, owner, _ := strings.Cut(other, "/")
	return &service.InputError{Kind: "Service", Namespace: name.Namespace, Name: name.Name, Field: field,
		Err: fmt.Errorf("%s is also claimed by the service port %s, which keeps it: this port (%s) goes without it until that one lets go", what, owner, name.Port)}
}

// matchesDst reports whether m matches exactly the destination address
// ip: the packet's, or the connection's original one.
func matchesDst(m openflow.Match, ip netip.Addr) bool {
	if ip.Is4() {
		return matchesField(m, openflow.IPv4Dst(ip), openflow.CtNwDst(ip))
	}
	return matchesField(m, openflow.IPv6Dst(ip), openflow.CtIPv6Dst(ip))
}

// matchesField reports whether m holds one of the exact fields want.
func matchesField(m openflow.Match, want ...openflow.Field) bool {
	for _, f := range m.Fields {
		for _, w := range want {
			if f.Class == w.Class && f.Field == w.Field && f.Experimenter == w.Experimenter && f.Mask == nil && bytes.Equal(f.Value, w.Value) {
				return true
			}
		}
	}
	return false
}
