package namespaceid

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
)

// The 24-bit id space of br0's NamespaceID register and of the VXLAN key,
// split in two halves.
const (
	// None is no namespace: host traffic, or a namespace without an id yet.
	None uint32 = 0
	// FirstID and LastID bound the namespace ids (the lower half, without 0).
	FirstID uint32 = 1
	LastID  uint32 = 0x7fffff
	// FirstVNI and LastVNI bound the ids reserved for virtual networks (the
	// upper half); nsid never hands them out.
	FirstVNI uint32 = 0x800000
	LastVNI  uint32 = 0xffffff
	// IDCount is the number of namespace ids.
	IDCount = LastID - FirstID + 1
)

// ErrExhausted is returned when every namespace id is taken.
var ErrExhausted = errors.New("nsid: every namespace id is taken")

// ValidID reports whether id is in the namespace id range.
func ValidID(id uint32) bool { return id >= FirstID && id <= LastID }

// ParseID parses a lock object's name: a decimal namespace id without
// leading zeros or a sign.
func ParseID(name string) (uint32, error) {
	if name == "" || name[0] == '0' || len(name) > 7 {
		return 0, fmt.Errorf("not a decimal namespace id in %d..%d", FirstID, LastID)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, fmt.Errorf("not a decimal namespace id in %d..%d", FirstID, LastID)
		}
	}
	v, err := strconv.ParseUint(name, 10, 32)
	if err != nil || !ValidID(uint32(v)) {
		return 0, fmt.Errorf("not a decimal namespace id in %d..%d", FirstID, LastID)
	}
	return uint32(v), nil
}

// FormatID returns the lock object's name of id.
func FormatID(id uint32) string { return strconv.FormatUint(uint64(id), 10) }

// home is the offset in the namespace range where the probing for name
// starts: 32 bits of FNV-1a, reduced to the range.
func home(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32() % IDCount
}

// Candidate returns the id to try at the attempt-th probe for the
// namespace name: attempt 0 is the name's home id (its FNV-1a hash in the
// range), each next attempt the next id, wrapping from LastID to FirstID.
// Attempts IDCount apart give the same id.
func Candidate(name string, attempt uint32) uint32 {
	return FirstID + (home(name)+attempt%IDCount)%IDCount
}

// Choose probes for the namespace name from attempt from on, and returns the
// first candidate for which taken is false, with its attempt. It returns
// ErrExhausted when every candidate from attempt from to IDCount-1 is taken.
func Choose(name string, from uint32, taken func(uint32) bool) (id, attempt uint32, err error) {
	h := home(name)
	for a := from; a < IDCount; a++ {
		if c := FirstID + (h+a)%IDCount; !taken(c) {
			return c, a, nil
		}
	}
	return 0, 0, ErrExhausted
}
