package servicefeature

import (
	"slices"
	"strings"
)

// groupIDs are the group ids a built port uses, by key (service.GroupKey),
// sorted by key. A port has one to four, and a node holds one set per
// service port: a slice of them takes a fraction of what a map does.
type groupIDs []groupID

type groupID struct {
	key string
	id  uint32
}

// compactIDs returns m's ids as groupIDs.
func compactIDs(m map[string]uint32) groupIDs {
	if len(m) == 0 {
		return nil
	}
	out := make(groupIDs, 0, len(m))
	for k, id := range m {
		out = append(out, groupID{k, id})
	}
	slices.SortFunc(out, func(a, b groupID) int { return strings.Compare(a.key, b.key) })
	return out
}

// lookup returns the id of key, and whether g has one.
func (g groupIDs) lookup(key string) (uint32, bool) {
	i, ok := slices.BinarySearchFunc(g, key, func(e groupID, k string) int { return strings.Compare(e.key, k) })
	if !ok {
		return 0, false
	}
	return g[i].id, true
}
