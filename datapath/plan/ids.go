package plan

import (
	"fmt"
	"hash/fnv"
	"sync"

	"nodeflow/lib/shrink"
)

// IDAllocator hands out group (or meter) ids from a range, one per owner
// name, and keeps them stable: an owner's preferred id is a hash of its
// name, so the same service gets the same group id after an agent restart
// and the start-up reconcile finds its group already in place. On a
// collision it probes to the next free id. Reserve restores an assignment
// read back from the switch. It is safe for concurrent use.
type IDAllocator struct {
	mu      sync.Mutex
	r       IDRange
	byOwner map[string]uint32
	byID    map[uint32]string
	// peaks are the maps' high-water marks: their room goes with the
	// owners (see package shrink).
	peaks [2]shrink.Peak
}

// NewIDAllocator returns an empty allocator over r.
func NewIDAllocator(r IDRange) *IDAllocator {
	return &IDAllocator{r: r, byOwner: map[string]uint32{}, byID: map[uint32]string{}}
}

// Get returns owner's id, allocating one if it has none.
func (a *IDAllocator) Get(owner string) (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if id, ok := a.byOwner[owner]; ok {
		return id, nil
	}
	if uint32(len(a.byID)) >= a.r.Size() {
		return 0, fmt.Errorf("plan: %s: no free id for %s (%d in use)", a.r.Name, owner, len(a.byID))
	}
	h := fnv.New32a()
	h.Write([]byte(owner))
	id := a.r.First + h.Sum32()%a.r.Size()
	for {
		if _, used := a.byID[id]; !used {
			break
		}
		id++
		if id > a.r.Last || id < a.r.First {
			id = a.r.First
		}
	}
	a.byOwner[owner] = id
	a.byID[id] = owner
	a.byOwner, a.byID = shrink.Map(a.byOwner, &a.peaks[0]), shrink.Map(a.byID, &a.peaks[1])
	return id, nil
}

// Reserve records that owner holds id, as read back from the switch. It
// fails when id is outside the range or held by another owner; reserving
// an owner's current id again is a no-op, and a new id replaces the old.
func (a *IDAllocator) Reserve(owner string, id uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.r.Contains(id) {
		return fmt.Errorf("plan: %s: reserve %d for %s: %w (%d-%d)", a.r.Name, id, owner, ErrRange, a.r.First, a.r.Last)
	}
	if o, used := a.byID[id]; used && o != owner {
		return fmt.Errorf("plan: %s: reserve %d for %s: held by %s", a.r.Name, id, owner, o)
	}
	if old, ok := a.byOwner[owner]; ok {
		delete(a.byID, old)
	}
	a.byOwner[owner] = id
	a.byID[id] = owner
	return nil
}

// Release frees owner's id, if it has one.
func (a *IDAllocator) Release(owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if id, ok := a.byOwner[owner]; ok {
		delete(a.byID, id)
		delete(a.byOwner, owner)
		a.byOwner, a.byID = shrink.Map(a.byOwner, &a.peaks[0]), shrink.Map(a.byID, &a.peaks[1])
	}
}

// Owner returns the owner holding id.
func (a *IDAllocator) Owner(id uint32) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.byID[id]
	return o, ok
}

// Len returns the number of ids in use.
func (a *IDAllocator) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byID)
}
