package cni

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrRangeExhausted is returned (wrapped) by Store.Allocate when a subnet has
// no free address. It maps to the plugin-specific CNI error code
// CodeRangeExhausted.
var ErrRangeExhausted = errors.New("no free address")

// Attachment identifies one network attachment: a container and the name of
// its interface, as the CNI specification defines it.
type Attachment struct {
	ContainerID string
	IfName      string
}

// Store is the on-disk address allocation of one network on one node.
//
// Each allocated address is a file in the store's directory, named by the
// address and holding "CONTAINERID\nIFNAME\n". A file appears atomically with
// its whole content: it is written under a temporary name, synced, and then
// hard-linked to its final name, which fails if the address is taken. So after
// a crash at any point an address is either free or fully owned, never owned
// by an empty record, and a runtime's retried ADD or DEL finds it. The
// directory holds an flock while a Store is open, so that concurrent plugin
// invocations on the node serialise.
//
//	DIR/lock                  the flock target
//	DIR/10.244.1.7            "CONTAINERID\nIFNAME\n"
//	DIR/fd00:10:244:1::7      the same for IPv6
//	DIR/last-reserved-ip.4    the last IPv4 address handed out (round robin)
//	DIR/last-reserved-ip.6
//	DIR/ports/PORT.json       the attachments' port records (see PortRecord)
type Store struct {
	dir  string
	lock *os.File
}

// OpenStore creates dir if needed and locks it. Close releases the lock.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cni: ipam store: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cni: ipam store: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cni: ipam store %s: lock: %w", dir, err)
	}
	s := &Store{dir: dir, lock: f}
	// Temporary files are only ever present while their writer holds the
	// lock; any found now were left by a crash.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return s, nil
}

// Close releases the store's lock.
func (s *Store) Close() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close() // closing the descriptor drops the flock
	s.lock = nil
	return err
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Allocations returns every allocated address and its owner.
func (s *Store) Allocations() (map[netip.Addr]Attachment, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("cni: ipam store: %w", err)
	}
	out := map[netip.Addr]Attachment{}
	for _, e := range entries {
		a, err := netip.ParseAddr(e.Name())
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cni: ipam store: %w", err)
		}
		out[a] = parseOwner(b)
	}
	return out, nil
}

func parseOwner(b []byte) Attachment {
	lines := strings.Split(string(b), "\n")
	var a Attachment
	if len(lines) > 0 {
		a.ContainerID = strings.TrimSpace(lines[0])
	}
	if len(lines) > 1 {
		a.IfName = strings.TrimSpace(lines[1])
	}
	return a
}

func ownerRecord(a Attachment) []byte {
	return []byte(a.ContainerID + "\n" + a.IfName + "\n")
}

// Lookup returns the addresses att holds, sorted, IPv4 first.
func (s *Store) Lookup(att Attachment) ([]netip.Addr, error) {
	all, err := s.Allocations()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for a, o := range all {
		if o == att {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}

// Allocate gives att an address of r. If att already holds one in r's subnet
// (a retried ADD), that address is returned. The network address, the gateway
// and, for IPv4, the broadcast address are never handed out. Addresses are
// handed out round robin, so a released address is not reused at once.
func (s *Store) Allocate(att Attachment, r Range) (netip.Addr, error) {
	all, err := s.Allocations()
	if err != nil {
		return netip.Addr{}, err
	}
	for a, o := range all {
		if o == att && r.Subnet.Contains(a) {
			return a, nil
		}
	}
	first, last := usable(r.Subnet)
	start := first
	if b, err := os.ReadFile(s.lastReservedPath(r)); err == nil {
		if a, err := netip.ParseAddr(strings.TrimSpace(string(b))); err == nil && r.Subnet.Contains(a) && a.Less(last) && !a.Less(first) {
			start = a.Next()
		}
	}
	a := start
	for {
		if a != r.Gateway {
			if _, taken := all[a]; !taken {
				ok, err := s.claim(a, att)
				if err != nil {
					return netip.Addr{}, err
				}
				if ok {
					_ = s.writeAtomic(s.lastReservedPath(r), []byte(a.String()+"\n"))
					return a, nil
				}
			}
		}
		if a == last {
			a = first
		} else {
			a = a.Next()
		}
		if a == start {
			return netip.Addr{}, fmt.Errorf("cni: ipam: subnet %s: %w (%d addresses allocated)", r.Subnet, ErrRangeExhausted, len(all))
		}
	}
}

// usable returns the first and last address of p that may be handed out.
func usable(p netip.Prefix) (first, last netip.Addr) {
	first = p.Addr().Next()
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ = netip.AddrFromSlice(b)
	if p.Addr().Is4() {
		last = last.Prev() // the broadcast address
	}
	return first, last
}

func (s *Store) lastReservedPath(r Range) string {
	if r.Is4() {
		return filepath.Join(s.dir, "last-reserved-ip.4")
	}
	return filepath.Join(s.dir, "last-reserved-ip.6")
}

// claim creates the record of a for att. It returns false if a is taken.
func (s *Store) claim(a netip.Addr, att Attachment) (bool, error) {
	tmp, err := s.writeTemp(ownerRecord(att))
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, filepath.Join(s.dir, a.String())); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("cni: ipam store: %w", err)
	}
	return true, s.syncDir()
}

// writeTemp writes data to a synced temporary file in the store directory.
func (s *Store) writeTemp(data []byte) (string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := filepath.Join(s.dir, ".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("cni: ipam store: %w", err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(name)
		return "", fmt.Errorf("cni: ipam store: write %s: %w", name, err)
	}
	return name, nil
}

// writeAtomic replaces path with data.
func (s *Store) writeAtomic(path string, data []byte) error {
	tmp, err := s.writeTemp(data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cni: ipam store: %w", err)
	}
	return s.syncDir()
}

func (s *Store) syncDir() error { return syncDir(s.dir) }

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cni: ipam store: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cni: ipam store: sync %s: %w", dir, err)
	}
	return nil
}

// Release frees every address att holds. Releasing nothing is not an error.
func (s *Store) Release(att Attachment) error {
	return s.releaseIf(func(o Attachment) bool { return o == att })
}

// GC frees every address whose owner is not in valid, and returns how many.
func (s *Store) GC(valid []Attachment) (int, error) {
	keep := map[Attachment]bool{}
	for _, v := range valid {
		keep[v] = true
	}
	n := 0
	err := s.releaseIf(func(o Attachment) bool {
		if keep[o] {
			return false
		}
		n++
		return true
	})
	return n, err
}

func (s *Store) releaseIf(match func(Attachment) bool) error {
	all, err := s.Allocations()
	if err != nil {
		return err
	}
	removed := false
	for a, o := range all {
		if !match(o) {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, a.String())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cni: ipam store: release %s: %w", a, err)
		}
		removed = true
	}
	if removed {
		return s.syncDir()
	}
	return nil
}
