package reconcile

import "nodeflow/lib/shrink"

// mapPeaks are the high-water marks of the Store's maps that entries leave
// when owners go (see package shrink): after the flows of 10,000 Services
// are deleted, their maps hold no room for them.
type mapPeaks struct {
	owners, byHash, flows, groups, meters, refs, use shrink.Peak
}

// shrinkMaps rebuilds the maps of slots and references that lost most of
// their entries. s.mu is held; no iteration over them is in progress.
func (s *Store) shrinkMaps() {
	s.flows = shrink.Map(s.flows, &s.peaks.flows)
	s.groups = shrink.Map(s.groups, &s.peaks.groups)
	s.meters = shrink.Map(s.meters, &s.peaks.meters)
	s.refs = shrink.Map(s.refs, &s.peaks.refs)
}

// shrinkOwners rebuilds the maps of owners that lost most of their
// entries. s.mu is held.
func (s *Store) shrinkOwners() {
	s.owners = shrink.Map(s.owners, &s.peaks.owners)
	s.byHash = shrink.Map(s.byHash, &s.peaks.byHash)
	s.use = shrink.Map(s.use, &s.peaks.use)
}
