package servicefeature

import (
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/shrink"
	"nodeflow/model/service"
)

// charge returns what a service port's owners are charged to for a
// namespace budget: its Service, by the Service's creation time, so that
// the budget holds back a namespace's newest Services first (see
// reconcile.Budget).
func (p *Proxy) charge(name service.ServicePortName) *reconcile.Charge {
	created, _ := p.svcs.Created(name.NamespacedName)
	c := &reconcile.Charge{Kind: "Service", APIVersion: "v1", Name: name.Name, Created: created}
	if p.svcInf != nil {
		// The UID, for the event on it (kubectl describe finds events by
		// it); the cache holds the Service as the proxy reads it.
		if obj, ok, _ := p.svcInf.GetStore().GetByKey(name.Namespace + "/" + name.Name); ok {
			if svc, ok := obj.(*service.Service); ok {
				c.UID = string(svc.UID)
			}
		}
	}
	return c
}

// Peaks of the proxy's maps by service port (see package shrink).
type mapPeaks struct{ built, byID shrink.Peak }

// shrinkMaps rebuilds the proxy's maps by service port once most of
// their entries are gone. p.mu is held.
func (p *Proxy) shrinkMaps() {
	p.built = shrink.Map(p.built, &p.peaks.built)
	p.idMu.Lock()
	p.byID = shrink.Map(p.byID, &p.peaks.byID)
	p.idMu.Unlock()
}
