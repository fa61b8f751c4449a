package servicefeature

import (
	"net/netip"

	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/serviceflows"
)

// No service address leaks (see datapath/serviceflows's AddressFlows and
// CIDRFlows): each ClusterIP that a Service holds gets its reject flow for
// the ports no Service serves, and the service CIDRs get their drop. The
// proxy keeps both in step with the ServiceTracker's ClusterIPs.

// guardAddresses sets or removes the reject owner of each ClusterIP that
// a Service took or freed since the last sync. p.mu is held.
func (p *Proxy) guardAddresses(moved []netip.Addr) {
	for _, a := range moved {
		owner := serviceflows.AddressOwner(a)
		if _, held := p.svcs.ClusterIPOwner(a); !held {
			p.set(p.pod, owner, reconcile.State{})
			continue
		}
		st, err := serviceflows.AddressFlows(a)
		if err != nil {
			p.log.WithError(err).WithField("address", a).Error("cannot build the ClusterIP's reject flow")
			continue
		}
		p.set(p.pod, owner, st)
	}
}

// guardCIDRs sets the drop of the service CIDRs. p.mu is held.
func (p *Proxy) guardCIDRs(cidrs []netip.Prefix) {
	st, err := serviceflows.CIDRFlows(cidrs)
	if err != nil {
		p.log.WithError(err).WithField("cidrs", cidrs).Error("cannot build the service CIDRs' drop flows")
		return
	}
	p.set(p.pod, serviceflows.CIDROwner, st)
}
