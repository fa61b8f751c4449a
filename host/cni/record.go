package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Port records. The external_ids on a pod's OVS Port and Interface rows
// describe the pod to the node agent, but they live only as long as the
// rows: `ovs-vsctl del-br br0` or `del-port` takes them away while the veth
// and the pod stay. So ADD also leaves a record on disk of everything the
// OVS port is made of, and the agent recreates a deleted port from it (see
// WithPortRecords). DEL removes the record before the port, CHECK compares
// it with the attachment, GC removes the records of attachments that are
// no longer valid.
//
// Records live in the IPAM store's directory and are written and removed
// under its lock, one file per host-side interface:
//
//	DIR/ports/nf0123456789abc.json   a PortRecord, written atomically
//
// A record is written under a temporary name in DIR (removed by the next
// OpenStore after a crash), synced, and renamed into place, so a reader
// never sees half of one.

// portRecordVersion is the format of the record files this plugin writes.
const portRecordVersion = 1

// portsDir is the records' directory inside the store's directory.
const portsDir = "ports"

// PortRecord is what the plugin recorded of one attachment's OVS port.
type PortRecord struct {
	// Version of the record's format (1).
	Version int `json:"version"`
	// Bridge is the OVS bridge the port is on (br0).
	Bridge string `json:"bridge"`
	// Port is the name of the OVS Port and Interface, and of the host end
	// of the veth (HostVethName).
	Port string `json:"port"`
	// ContainerID and IfName identify the attachment.
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// ExternalIDs are the external_ids of the Port and Interface rows (see
	// the ExternalID constants).
	ExternalIDs map[string]string `json:"externalIDs"`
}

// Attachment returns the attachment the record belongs to.
func (r PortRecord) Attachment() Attachment {
	return Attachment{ContainerID: r.ContainerID, IfName: r.IfName}
}

// validate checks a record read from file name.
func (r PortRecord) validate(name string) error {
	switch {
	case r.Version != portRecordVersion:
		return fmt.Errorf("version: %d, want %d", r.Version, portRecordVersion)
	case r.Bridge == "":
		return fmt.Errorf("bridge: empty")
	case r.Port == "" || r.Port+".json" != name:
		return fmt.Errorf("port: %q does not match the file name", r.Port)
	case r.ContainerID == "" || r.IfName == "":
		return fmt.Errorf("attachment: container %q, ifname %q: both are needed", r.ContainerID, r.IfName)
	case r.ExternalIDs[ExternalIDOwner] != OwnerCNI:
		return fmt.Errorf("externalIDs: %s is %q, want %q", ExternalIDOwner, r.ExternalIDs[ExternalIDOwner], OwnerCNI)
	}
	return nil
}

func (s *Store) portPath(port string) string { return filepath.Join(s.dir, portsDir, port+".json") }

// validPortName rejects names that cannot be a host interface's name (and
// so could escape the records' directory).
func validPortName(port string) error {
	if port == "" || len(port) >= unix.IFNAMSIZ || strings.ContainsAny(port, "/\x00") || port == "." || port == ".." {
		return fmt.Errorf("cni: port record: port name %q is not an interface name", port)
	}
	return nil
}

// PutPort writes r (replacing a record of the same port) and syncs it to
// disk before it returns.
func (s *Store) PutPort(r PortRecord) error {
	if err := validPortName(r.Port); err != nil {
		return err
	}
	r.Version = portRecordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("cni: port record %s: %w", r.Port, err)
	}
	if err := os.MkdirAll(filepath.Join(s.dir, portsDir), 0o755); err != nil {
		return fmt.Errorf("cni: port record %s: %w", r.Port, err)
	}
	tmp, err := s.writeTemp(append(b, '\n'))
	if err != nil {
		return fmt.Errorf("cni: port record %s: %w", r.Port, err)
	}
	if err := os.Rename(tmp, s.portPath(r.Port)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cni: port record %s: %w", r.Port, err)
	}
	return syncDir(filepath.Join(s.dir, portsDir))
}

// DeletePort removes the record of port; a missing record is not an error.
func (s *Store) DeletePort(port string) error {
	if err := validPortName(port); err != nil {
		return err
	}
	if err := os.Remove(s.portPath(port)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("cni: port record %s: remove: %w", port, err)
	}
	return syncDir(filepath.Join(s.dir, portsDir))
}

// Port returns the record of port, and whether there is one.
func (s *Store) Port(port string) (PortRecord, bool, error) {
	if err := validPortName(port); err != nil {
		return PortRecord{}, false, err
	}
	r, err := readPortRecord(s.portPath(port))
	if errors.Is(err, fs.ErrNotExist) {
		return PortRecord{}, false, nil
	}
	if err != nil {
		return PortRecord{}, false, err
	}
	return r, true, nil
}

func readPortRecord(path string) (PortRecord, error) {
	var r PortRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("cni: port record: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("cni: port record %s: %w", path, err)
	}
	if err := r.validate(filepath.Base(path)); err != nil {
		return r, fmt.Errorf("cni: port record %s: %w", path, err)
	}
	return r, nil
}

// Ports returns every valid record, sorted by port name. A record that
// cannot be read or is not valid is left out and reported in bad (file name
// -> error), so one damaged file does not hide the others.
func (s *Store) Ports() (recs []PortRecord, bad map[string]error, err error) {
	dir := filepath.Join(s.dir, portsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cni: port records: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		r, err := readPortRecord(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[e.Name()] = err
			continue
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Port < recs[j].Port })
	return recs, bad, nil
}

// gcPorts removes the records of attachments not in valid, and returns the
// ports they named.
func (s *Store) gcPorts(valid map[Attachment]bool) ([]string, error) {
	recs, bad, err := s.Ports()
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, r := range recs {
		if valid[r.Attachment()] {
			continue
		}
		if err := s.DeletePort(r.Port); err != nil {
			return gone, err
		}
		gone = append(gone, r.Port)
	}
	// A damaged record cannot be matched to an attachment: it goes too.
	for name := range bad {
		if err := os.Remove(filepath.Join(s.dir, portsDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return gone, fmt.Errorf("cni: port record %s: remove: %w", name, err)
		}
	}
	return gone, nil
}

// StoreDir is the directory of network's IPAM store (and port records)
// under dataDir, as the plugin lays it out ("dataDir" in the network
// configuration, "name" of the network).
func StoreDir(dataDir, network string) string { return filepath.Join(dataDir, network) }

// WithPortRecords calls fn with the port records of network's store under
// dataDir, holding the store's lock until fn returns: no ADD, DEL or GC of
// the plugin runs meanwhile, so a port fn recreates cannot race the DEL of
// its attachment. Waiting for the lock ends with ctx. Damaged records are
// left out and passed in bad. A store that does not exist has no records.
//
// The node agent uses it to recreate the OVS ports of pods whose port was
// deleted while their veth remained.
func WithPortRecords(ctx context.Context, dataDir, network string, fn func(recs []PortRecord, bad map[string]error) error) error {
	dir := StoreDir(dataDir, network)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fn(nil, nil)
	}
	s, err := openStoreContext(ctx, dir)
	if err != nil {
		return err
	}
	defer s.Close()
	recs, bad, err := s.Ports()
	if err != nil {
		return err
	}
	return fn(recs, bad)
}

// lockPoll spaces the attempts to take a store's lock when waiting with a
// context.
const lockPoll = 2 * time.Millisecond

// openStoreContext is OpenStore with a wait for the lock that ends with
// ctx.
func openStoreContext(ctx context.Context, dir string) (*Store, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cni: ipam store: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("cni: ipam store %s: lock: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("cni: ipam store %s: lock: %w", dir, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
	return &Store{dir: dir, lock: f}, nil
}
