package vnetipam

import (
	"net/netip"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"nodeflow/model/vnet"
)

// vniIP is an address on a VNI: what a lock locks.
type vniIP struct {
	vni uint32
	ip  netip.Addr
}

// vniMAC is a MAC on a VNI.
type vniMAC struct {
	vni uint32
	mac [6]byte
}

func macKey(vni uint32, ip netip.Addr) vniMAC {
	return vniMAC{vni: vni, mac: [6]byte(vnet.MACOf(vni, ip))}
}

// claim is an address this controller created a lock for, or found locked
// by a lock its cache does not show yet: taken, though the cache does not
// say so. holder is the attachment this controller created the lock for
// ("" while the create is in flight, or for another's lock).
type claim struct {
	holder types.UID
	at     time.Time
}

// flight is the seed's record of an assignment in flight: the attachment
// (its UID and the resourceVersion seen needing an address), the Subnet's
// resourceVersion, the address, and the resourceVersion the status write
// returned. While the Subnet is unchanged and the attachment's cached
// resourceVersion is one of the two, the record stands: at seenRV the
// write is not in the cache yet and there is nothing to do; at writtenRV
// the cache has the address, and the record says the lock is held even
// if the lock cache does not show it yet.
type flight struct {
	uid               types.UID
	seenRV, writtenRV string
	subnetRV          string
	vni               uint32
	ip                netip.Addr
}

// state is the controller's memory beyond its informers' caches: the
// addresses taken on each VNI (from the lock cache, in every namespace),
// the claims, the in-flight assignments, where each Subnet's next search
// starts, and the attachments waiting for a full Subnet to have room.
type state struct {
	mu       sync.Mutex
	taken    map[vniIP]int
	macs     map[vniMAC]int // of the IPv6 locks in the cache
	claims   map[vniIP]claim
	claimTTL time.Duration
	cursor   map[types.UID]netip.Addr
	flights  map[key]flight
	waiting  map[uint32]map[key]bool
}

func newState(claimTTL time.Duration) *state {
	return &state{
		taken:    map[vniIP]int{},
		macs:     map[vniMAC]int{},
		claims:   map[vniIP]claim{},
		claimTTL: claimTTL,
		cursor:   map[types.UID]netip.Addr{},
		flights:  map[key]flight{},
		waiting:  map[uint32]map[key]bool{},
	}
}

// lockAdded counts a lock that entered the cache; the cache now knows
// better than any claim on its address.
func (s *state) lockAdded(vni uint32, ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := vniIP{vni, ip}
	s.taken[k]++
	if ip.Is6() {
		s.macs[macKey(vni, ip)]++
	}
	delete(s.claims, k)
}

// lockDeleted uncounts a lock that left the cache, and returns the
// attachments that were waiting for room on its VNI.
func (s *state) lockDeleted(vni uint32, ip netip.Addr) []key {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := vniIP{vni, ip}
	if s.taken[k]--; s.taken[k] <= 0 {
		delete(s.taken, k)
	}
	if ip.Is6() {
		m := macKey(vni, ip)
		if s.macs[m]--; s.macs[m] <= 0 {
			delete(s.macs, m)
		}
	}
	delete(s.claims, k)
	var out []key
	for w := range s.waiting[vni] {
		out = append(out, w)
	}
	delete(s.waiting, vni)
	return out
}

// free reports whether ip on vni may be chosen: no lock in the cache, no
// live claim, and for IPv6 no lock or claim with the same MAC. Under mu.
func (s *state) free(vni uint32, ip netip.Addr, now time.Time) bool {
	k := vniIP{vni, ip}
	if s.taken[k] > 0 {
		return false
	}
	if c, ok := s.claims[k]; ok {
		if now.Sub(c.at) <= s.claimTTL {
			return false
		}
		delete(s.claims, k)
	}
	if !ip.Is6() {
		return true
	}
	m := macKey(vni, ip)
	if s.macs[m] > 0 {
		return false
	}
	for c := range s.claims {
		if c.vni == vni && c.ip.Is6() && macKey(vni, c.ip) == m {
			return false
		}
	}
	return true
}

// pick chooses a free address of r on vni for the Subnet subnet, next-fit
// from where the Subnet's last search stopped (so a freed address is not
// handed out again at once), and claims it. ok is false when r has no free
// address.
//
// It looks at no more than min(r.Size(), 2n+1) addresses, n being the
// locks and claims known: each is taken by at most one lock or claim by
// address and, for IPv6, at most one more by MAC (the walk covers fewer
// than 2^32 addresses, so no two of them share their last 32 bits). So
// when those are all taken, the range is full.
func (s *state) pick(vni uint32, subnet types.UID, r vnet.AddressRange, now time.Time) (ip netip.Addr, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, seen := s.cursor[subnet]
	if !seen || !r.Contains(a) {
		a = r.Last // so that the first address tried is r.First
	}
	limit := r.Size()
	if n := 2*uint64(len(s.taken)+len(s.claims)) + 1; n < limit {
		limit = n
	}
	for range limit {
		a = r.Next(a)
		if s.free(vni, a, now) {
			s.cursor[subnet] = a
			s.claims[vniIP{vni, a}] = claim{at: now}
			return a, true
		}
	}
	return netip.Addr{}, false
}

// claim records that ip on vni is locked, for holder ("" for another's
// lock), until the lock cache shows the lock or the claim expires.
func (s *state) claim(vni uint32, ip netip.Addr, holder types.UID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims[vniIP{vni, ip}] = claim{holder: holder, at: now}
}

// unclaim drops the claim on ip (a create that failed, a lock gone).
func (s *state) unclaim(vni uint32, ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, vniIP{vni, ip})
}

// claimedBy returns the live claims of holder on vni in r, lowest first:
// locks this controller created for the attachment that its cache does
// not show yet.
func (s *state) claimedBy(holder types.UID, vni uint32, r vnet.AddressRange, now time.Time) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.Addr
	for k, c := range s.claims {
		if c.holder == holder && k.vni == vni && r.Contains(k.ip) && now.Sub(c.at) <= s.claimTTL {
			out = append(out, k.ip)
		}
	}
	sortAddrs(out)
	return out
}

func (s *state) flight(k key) (flight, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.flights[k]
	return f, ok
}

func (s *state) setFlight(k key, f flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flights[k] = f
}

func (s *state) dropFlight(k key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.flights, k)
}

// wait records that the attachment k found its Subnet on vni full: the
// next lock deleted on vni requeues it.
func (s *state) wait(vni uint32, k key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting[vni] == nil {
		s.waiting[vni] = map[key]bool{}
	}
	s.waiting[vni][k] = true
}

// forget drops what the state keeps of the attachment k.
func (s *state) forget(k key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.flights, k)
	for vni, w := range s.waiting {
		delete(w, k)
		if len(w) == 0 {
			delete(s.waiting, vni)
		}
	}
}

// forgetSubnet drops a deleted Subnet's search position.
func (s *state) forgetSubnet(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cursor, uid)
}

// flightCount is the number of in-flight records (tests).
func (s *state) flightCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.flights)
}
