package reconcile

import "nodeflow/lib/openflow"

// EachFlow calls fn with every flow the Store knows of: each flow an owner
// wants and each flow it believes is installed (including flows observed on
// the bridge that nobody wants), so that a flow on its way in or out is
// seen too. A flow both wanted and installed as wanted is seen once or
// twice. fn runs with the Store locked: it must not call the Store, and it
// must not keep or change the flow.
func (s *Store) EachFlow(fn func(*openflow.Flow)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.flows {
		if sl.desired != nil {
			fn(sl.desired.value())
		}
		if sl.installed != nil && sl.installed != sl.desired {
			fn(sl.installed.value())
		}
	}
}
