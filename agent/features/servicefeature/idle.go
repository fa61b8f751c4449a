package servicefeature

import (
	"maps"

	"nodeflow/model/service"
)

// IdleHandler takes over the service ports that are idled: their Service
// carries the idled-at annotation and they have no endpoints. For such a
// port the service proxy installs nothing in br0's load-balancing table
// (no reject: a client of an idled service must wait, not be refused) and
// tells the handler instead, which can catch the first packets and ask for
// pods. The unidling feature implements it.
//
// Both calls come from the sync loop, one port at a time, after br0 holds
// the sync's flows; they must not block for long.
type IdleHandler interface {
	// Idled tells that name is idled. groupIDs are the ids (and
	// ServiceIDs) the port was given, by datapath/serviceflows group key, so the
	// handler can tag its flows and packet-ins with the same ServiceID.
	// It is called again when the port changes while idled.
	Idled(name service.ServicePortName, port *service.ServicePort, groupIDs map[string]uint32)
	// Unidled tells that name is no longer idled: it has endpoints again
	// (ready), or lost its annotation or went away (ready when it still
	// has an endpoint). The proxy's flows for it are in place when this is
	// called.
	Unidled(name service.ServicePortName, ready bool)
}

// idleChange is one change to tell the idle handler after a sync.
type idleChange struct {
	name  service.ServicePortName
	port  *service.ServicePort // nil: unidled
	ids   map[string]uint32
	idled bool
	ready bool // unidled with an endpoint
}

// idleChanges returns what to tell the idle handler for one built port:
// was and now say whether it was idled before and is now, ready whether it
// has an endpoint.
func idleChanges(name service.ServicePortName, port *service.ServicePort, ids map[string]uint32, was, now, ready bool) []idleChange {
	switch {
	case now:
		return []idleChange{{name: name, port: port, ids: maps.Clone(ids), idled: true}}
	case was:
		return []idleChange{{name: name, ready: ready}}
	}
	return nil
}

// tellIdle passes the changes of a sync to the idle handler, if any.
func (p *Proxy) tellIdle(changes []idleChange) {
	h := p.idle
	for _, c := range changes {
		p.log.WithField("service", c.name.String()).WithField("idled", c.idled).Debug("idle state")
		if h == nil {
			continue
		}
		if c.idled {
			h.Idled(c.name, c.port, c.ids)
		} else {
			h.Unidled(c.name, c.ready)
		}
	}
}
