package vnetfeature

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"nodeflow/host/cni"
	"nodeflow/lib/ovsdb"
)

// The external_ids of an attachment's port on br0 (Port and Interface).
// cni.ExternalIDOwner is the key every nodeflow port is claimed by; the
// node networking feature and the agent's port repair take only the CNI
// plugin's ports (cni.OwnerCNI), so they leave these alone.
const (
	// OwnerVNet marks the ports the connection agent made.
	OwnerVNet = "nodeflow-vnet"
	// ExternalIDAttachment is the attachment's namespace/name.
	ExternalIDAttachment = "vnet-attachment"
	// ExternalIDUID is the attachment's UID.
	ExternalIDUID = "vnet-uid"
	// ExternalIDNetns is the name of the attachment's network namespace.
	ExternalIDNetns = "vnet-netns"
)

// hostSide makes the attachments' interfaces and their ports on br0. It
// is the seam between the feature's API side, which decides, and the
// node, which the real plumbing changes (netlink and OVSDB); the feature's
// unit tests run without root through a recording one.
type hostSide interface {
	// attach makes or adopts d's interface and its port and returns the
	// port's ofport; adopted says the interface was already there as d
	// wants it.
	attach(ctx context.Context, d desired) (ofport uint32, adopted bool, err error)
	// detach removes an interface, its namespace and its port; what is
	// missing is not an error.
	detach(ctx context.Context, name, netns string) error
	// collect removes every interface, namespace and port of the agent's
	// that keep (interface name -> namespace) does not name, and returns
	// what it removed.
	collect(ctx context.Context, keep map[string]string) ([]string, error)
}

// plumbing is the real hostSide: Links for the interfaces, OVSDB for the
// ports.
type plumbing struct {
	links  *Links
	db     *ovsdb.Client
	bridge string
	// ofportTimeout bounds the wait for ovs-vswitchd to number a port.
	ofportTimeout time.Duration
}

func (p *plumbing) attach(ctx context.Context, d desired) (uint32, bool, error) {
	adopted, err := p.links.Ensure(d.link)
	if err != nil {
		return 0, false, fmt.Errorf("interface %s in %s: %w", d.link.Name, d.link.Netns, err)
	}
	if !adopted && p.portKnown(ctx, d.link.Name) {
		// A new device under an old port's name: the port goes first,
		// and ovs-vswitchd must have applied that before the port comes
		// back, or it keeps the port on the device that is gone (it
		// receives nothing from the new one). A name no port has (a new
		// attachment) needs neither round trip.
		wctx, cancel := context.WithTimeout(ctx, p.ofportTimeout)
		err := p.db.DeletePort(wctx, p.bridge, d.link.Name)
		if err == nil {
			err = p.db.WaitApplied(wctx)
		}
		cancel()
		if err != nil {
			return 0, false, fmt.Errorf("port %s on %s: %w", d.link.Name, p.bridge, err)
		}
	}
	ids := map[string]string{
		cni.ExternalIDOwner:  OwnerVNet,
		ExternalIDAttachment: d.key(),
		ExternalIDUID:        string(d.uid),
		ExternalIDNetns:      d.link.Netns,
	}
	if err := p.db.EnsurePort(ctx, p.bridge, ovsdb.PortSpec{Name: d.link.Name, ExternalIDs: ids}); err != nil {
		return 0, adopted, fmt.Errorf("port %s on %s: %w", d.link.Name, p.bridge, err)
	}
	wctx, cancel := context.WithTimeout(ctx, p.ofportTimeout)
	defer cancel()
	n, err := p.db.WaitOfport(wctx, d.link.Name)
	if err != nil {
		return 0, adopted, fmt.Errorf("port %s on %s: %w", d.link.Name, p.bridge, err)
	}
	return uint32(n), adopted, nil
}

// portKnown reports whether the switch has an interface named name, as
// far as the OVSDB monitor's cache knows; true when the cache cannot be
// read, so that the caller errs on the side of removing it first.
func (p *plumbing) portKnown(ctx context.Context, name string) bool {
	ic, err := p.db.Interfaces(ctx)
	if err != nil {
		return true
	}
	_, ok := ic.Get(name)
	return ok
}

func (p *plumbing) detach(ctx context.Context, name, netns string) error {
	var errs []error
	if name != "" {
		if err := p.db.DeletePort(ctx, p.bridge, name); err != nil {
			errs = append(errs, fmt.Errorf("port %s on %s: %w", name, p.bridge, err))
		}
	}
	if err := p.links.Remove(name, netns); err != nil {
		errs = append(errs, fmt.Errorf("interface %s in %s: %w", name, netns, err))
	}
	return errors.Join(errs...)
}

func (p *plumbing) collect(ctx context.Context, keep map[string]string) ([]string, error) {
	var removed []string
	var errs []error
	keptNetns := map[string]bool{}
	for _, ns := range keep {
		keptNetns[ns] = true
	}
	ports, err := p.db.ListPorts(ctx, p.bridge)
	if err != nil && !errors.Is(err, ovsdb.ErrNotFound) {
		errs = append(errs, fmt.Errorf("ports of %s: %w", p.bridge, err))
	}
	for _, port := range ports {
		if port.InterfaceExternalIDs[cni.ExternalIDOwner] != OwnerVNet {
			continue
		}
		if _, ok := keep[port.Name]; ok {
			continue
		}
		if err := p.detach(ctx, port.Name, port.InterfaceExternalIDs[ExternalIDNetns]); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "port "+port.Name)
	}
	ends, err := p.links.HostEnds()
	if err != nil {
		errs = append(errs, err)
	}
	namespaces, err := p.links.Namespaces(ends)
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range ends {
		if _, ok := keep[name]; ok {
			continue
		}
		if err := p.links.Remove(name, ""); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "interface "+name)
	}
	for _, ns := range namespaces {
		if keptNetns[ns] {
			continue
		}
		if err := p.links.Remove("", ns); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "namespace "+ns)
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// dialOVSDB takes the agent's OVSDB client and its Interface cache, which
// reports the attachments' ports' changes (watchPorts) until ctx ends.
func (f *Agent) dialOVSDB(ctx context.Context) error {
	// The attachments' ports are added through the agent's OVSDB client
	// (feature.Host.OVSDB), and its Interface cache (one monitor, shared
	// with the rest of the agent) reports their changes.
	db := f.h.OVSDB()
	if db == nil {
		return errors.New("vnetagent: the agent's OVSDB client is not connected yet")
	}
	ic, err := db.Interfaces(ctx)
	if err != nil {
		return fmt.Errorf("vnetagent: ovsdb interfaces: %w", err)
	}
	go f.watchPorts(ctx, ic)
	f.host = &plumbing{
		links: &Links{HostNetns: f.opts.HostNetns, NetnsDir: f.opts.NetnsDir, ProcSysNet: f.opts.ProcSysNet},
		db:    db, bridge: f.h.Node().PodBridge, ofportTimeout: 10 * time.Second,
	}
	return nil
}

// watchPorts marks an attachment dirty when its port changes in OVSDB
// (deleted by an operator, renumbered by a restarted ovs-vswitchd).
func (f *Agent) watchPorts(ctx context.Context, ic *ovsdb.InterfaceCache) {
	sub := ic.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			for _, i := range []*ovsdb.Interface{ev.Old, ev.New} {
				if i != nil && i.ExternalIDs[cni.ExternalIDOwner] == OwnerVNet && (ev.Kind == ovsdb.InterfaceDeleted || ev.OfportChanged()) {
					f.loop.Mark(attachmentKey(i.ExternalIDs[ExternalIDAttachment]))
					break
				}
			}
		}
	}
}
