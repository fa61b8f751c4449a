package reconcile

import (
	"nodeflow/flows/plan"
	"nodeflow/openflow"
)

// Observed is what a switch holds: a full dump of its flows, groups and
// meters.
type Observed struct {
	Flows  []openflow.Flow
	Groups []openflow.GroupEntry
	Meters []openflow.MeterEntry
}

// learned reports whether a flow was created by a learn action; those are
// never desired state and never touched.
func learned(cookie uint64) bool {
	return plan.Cookie(cookie).Feature() == plan.FeatureLearned
}

// observe replaces the installed view with a full dump and queues every
// difference from the desired state. The Store keeps references into obs.
// It returns how many flows and groups on the switch nobody wants.
func (s *Store) observe(obs *Observed) (unwanted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	ep := s.epoch

	for i := range obs.Flows {
		f := &obs.Flows[i]
		if learned(f.Cookie) {
			continue
		}
		k := flowKey(f)
		sl := s.flows[k]
		sl.epoch = ep
		s.observeFlowLocked(k, &sl, f)
		if sl.desired == nil {
			unwanted++
		}
	}
	for k, sl := range s.flows {
		if sl.epoch == ep {
			continue
		}
		sl.epoch = ep
		sl.installed = nil
		switch {
		case sl.desired != nil:
			s.markFlow(k, &sl)
		case !sl.dirty:
			delete(s.flows, k)
		default:
			s.flows[k] = sl
		}
	}

	for i := range obs.Groups {
		g := &obs.Groups[i]
		sl := s.groups[g.ID]
		if sl == nil {
			sl = &groupSlot{}
			s.groups[g.ID] = sl
		}
		sl.epoch = ep
		sum := stringSum(g.String())
		if sl.desired != nil && sl.desired.sum == sum {
			sl.installed = sl.desired
		} else {
			sl.installed = &groupEntry{group: g, sum: sum}
			s.markGroup(g.ID, sl)
			if sl.desired == nil {
				unwanted++
			}
		}
	}
	for id, sl := range s.groups {
		if sl.epoch == ep {
			continue
		}
		sl.epoch = ep
		sl.installed = nil
		if sl.desired != nil {
			s.markGroup(id, sl)
		} else if !sl.dirty {
			delete(s.groups, id)
		}
	}

	for i := range obs.Meters {
		m := &obs.Meters[i]
		sl := s.meters[m.ID]
		if sl == nil {
			sl = &meterSlot{}
			s.meters[m.ID] = sl
		}
		sl.epoch = ep
		sum := stringSum(m.String())
		if sl.desired != nil && sl.desired.sum == sum {
			sl.installed = sl.desired
		} else {
			sl.installed = &meterEntry{meter: m, sum: sum}
			s.markMeter(m.ID, sl)
		}
	}
	for id, sl := range s.meters {
		if sl.epoch == ep {
			continue
		}
		sl.epoch = ep
		sl.installed = nil
		if sl.desired != nil {
			s.markMeter(id, sl)
		} else if !sl.dirty {
			delete(s.meters, id)
		}
	}
	return unwanted
}

// observeFlowLocked records that the switch holds f under k, and queues
// the slot when that is not what is desired. It stores sl. s.mu is held.
func (s *Store) observeFlowLocked(k openflow.FlowKey, sl *flowSlot, f *openflow.Flow) {
	sum := fingerprint(f, f.Cookie)
	if sl.desired != nil && sl.desired.sum == sum {
		sl.installed = sl.desired
		s.flows[k] = *sl
		return
	}
	sl.installed = &flowEntry{key: k, flow: f, owner: s.byHash[f.Cookie&uint64(plan.OwnerMask)], sum: sum}
	s.markFlow(k, sl)
}

// observeFlow records one change that someone else made to a flow, as a
// flow monitor reports it: f is now on the switch (present) or gone. It
// reports whether the change needs repair. Flow monitor updates carry no
// flags or importance; with fromMonitor those are taken from the desired
// flow.
func (s *Store) observeFlow(f *openflow.Flow, present, fromMonitor bool) bool {
	if learned(f.Cookie) {
		return false
	}
	k := flowKey(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.flows[k]
	if present {
		if fromMonitor && sl.desired != nil {
			f.Flags, f.Importance = sl.desired.flow.Flags, sl.desired.flow.Importance
		}
		s.observeFlowLocked(k, &sl, f)
		return sl.dirty
	}
	if !ok {
		return false
	}
	sl.installed = nil
	if sl.desired == nil {
		if !sl.dirty {
			delete(s.flows, k)
		}
		return false
	}
	s.markFlow(k, &sl)
	return true
}
