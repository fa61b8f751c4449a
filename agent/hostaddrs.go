package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/agent/feature"
)

// The host's secondary addresses.
//
// A host-network endpoint may listen on any address of its node, not only
// on the node IP: an address on another NIC, or one on lo (the seed's
// 172.20.0.2 of an API server behind a manually managed Endpoints object).
// Hairpinned service traffic to such an address takes the seed's
// secondary-IP flow on breth0, and the service flows classify the endpoint
// as this node's. The agent discovers these addresses from the kernel and
// follows them with a netlink address subscription: a change rebuilds
// breth0's default flows and every service.

// hostAddr is one address of the host, as the kernel reports it.
type hostAddr struct {
	// Link is the name of the interface that holds it, when that
	// interface is one whose name matters (an excluded one); "" otherwise.
	Link string
	// Addr is the address itself.
	Addr netip.Addr
	// Scope is its scope (unix.RT_SCOPE_UNIVERSE for a global address).
	Scope int
	// Flags are its IFA_F_* flags.
	Flags int
}

// secondaryExclusions is what never counts as a secondary address.
type secondaryExclusions struct {
	// NodeIPs are the primary node IPs (one per family).
	NodeIPs []netip.Addr
	// Prefixes are networks the host may hold addresses in that are not
	// endpoints' addresses: the masquerade subnets, the pod, cluster and
	// service networks.
	Prefixes []netip.Prefix
	// Links are interfaces whose addresses never count (the management
	// port, whose addresses are in the pod network anyway).
	Links []string
}

// secondaryIPs returns the addresses of addrs that a host-network endpoint
// on this node may use besides the node IPs: global-scope unicast addresses
// on any interface (lo included), without loopback and link-local
// addresses, addresses not yet usable (tentative or failed duplicate
// address detection), and whatever ex excludes. The result is sorted and
// free of duplicates, so two calls on the same host compare equal.
func secondaryIPs(addrs []hostAddr, ex secondaryExclusions) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		ip := a.Addr.Unmap()
		switch {
		case !ip.IsValid(), ip.IsUnspecified(), ip.IsLoopback(), ip.IsMulticast(),
			ip.IsLinkLocalUnicast(), ip.IsInterfaceLocalMulticast():
			continue
		case a.Scope != unix.RT_SCOPE_UNIVERSE:
			continue
		case a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0:
			continue
		case slices.Contains(ex.Links, a.Link), slices.Contains(ex.NodeIPs, ip):
			continue
		}
		excluded := false
		for _, p := range ex.Prefixes {
			if p.IsValid() && p.Contains(ip) {
				excluded = true
				break
			}
		}
		if !excluded {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return slices.Compact(out)
}

// listHostAddrs reads every address of every interface of the host, naming
// the interfaces of named that exist (a host with a port per pod has many
// interfaces: only these few names are looked up).
func listHostAddrs(named []string) ([]hostAddr, error) {
	names := make(map[int]string, len(named))
	for _, n := range named {
		if l, err := netlink.LinkByName(n); err == nil {
			names[l.Attrs().Index] = n
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("controller: host addresses: list addresses: %w", err)
	}
	out := make([]hostAddr, 0, len(addrs))
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(a.IP)
		out = append(out, hostAddr{Link: names[a.LinkIndex], Addr: ip.Unmap(), Scope: a.Scope, Flags: a.Flags})
	}
	return out, nil
}

// hostAddrSet holds the secondary addresses the agent last discovered. The
// main loop writes them; the service proxy reads them from its own
// goroutine.
type hostAddrSet struct {
	// refresh serializes refreshes (the main loop's and the watch's), so
	// that an older listing never replaces a newer one.
	refresh sync.Mutex
	mu      sync.Mutex
	addrs   []netip.Addr
}

// get returns a copy of the set.
func (s *hostAddrSet) get() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.addrs)
}

// replace stores addrs and reports whether they differ from the set held.
func (s *hostAddrSet) replace(addrs []netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(s.addrs, addrs) {
		return false
	}
	s.addrs = slices.Clone(addrs)
	return true
}

// secondaryExclusions returns what the agent's configuration excludes from
// the secondary addresses.
func (a *Agent) secondaryExclusions() secondaryExclusions {
	n := a.Node()
	ex := secondaryExclusions{NodeIPs: n.Addrs(), Links: []string{MgmtPortName}}
	for _, p := range []netip.Prefix{a.cfg.Masquerade.V4.Subnet, a.cfg.Masquerade.V6.Subnet} {
		if p.IsValid() {
			ex.Prefixes = append(ex.Prefixes, p)
		}
	}
	ex.Prefixes = append(ex.Prefixes, n.PodCIDRs...)
	ex.Prefixes = append(ex.Prefixes, a.cfg.ClusterCIDRs...)
	ex.Prefixes = append(ex.Prefixes, a.cfg.ServiceCIDRs...)
	return ex
}

// refreshHostAddrs re-reads the host's addresses. When the secondary
// addresses changed it logs them and updates the node's facts, which the
// features follow (breth0's default flows, every service). It reports
// whether they changed.
func (a *Agent) refreshHostAddrs() bool {
	a.secondary.refresh.Lock()
	defer a.secondary.refresh.Unlock()
	ex := a.secondaryExclusions()
	all, err := listHostAddrs(ex.Links)
	if err != nil {
		a.log.WithError(err).Warn("cannot read the host's addresses; keeping the secondary addresses known")
		return false
	}
	sec := secondaryIPs(all, ex)
	if !a.secondary.replace(sec) {
		return false
	}
	a.log.WithField("secondary", sec).Info("host secondary addresses changed")
	a.updateNode(func(n *feature.Node) { n.Secondary = sec })
	return true
}

// hostAddrSettle is how long the watch waits after an address event for
// more to come before it re-reads the addresses: a burst of changes (an
// interface coming up with several addresses) costs one rebuild.
const hostAddrSettle = 100 * time.Millisecond

// watchHostAddrs follows the host's address changes until ctx ends, and
// refreshes the secondary addresses after each burst of them. The
// subscription is re-opened after an error; every sync of the agent
// (periodic, too) re-reads the addresses as well, which covers anything
// missed in between.
func (a *Agent) watchHostAddrs(ctx context.Context) {
	for ctx.Err() == nil {
		if err := a.watchHostAddrsOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.WithError(err).Warn("host address watch; re-subscribing")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// watchHostAddrsOnce runs one address subscription until it fails or ctx
// ends.
func (a *Agent) watchHostAddrsOnce(ctx context.Context) error {
	done := make(chan struct{})
	defer close(done)
	updates := make(chan netlink.AddrUpdate, 256)
	failed := make(chan error, 1)
	err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case failed <- err:
			default:
			}
		},
		ReceiveBufferSize: 1 << 20,
	})
	if err != nil {
		return fmt.Errorf("controller: subscribe to address events: %w", err)
	}
	// Changes made before the subscription took effect.
	a.refreshHostAddrs()
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return fmt.Errorf("controller: address events: %w", err)
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("controller: address events: subscription closed")
			}
			a.log.WithFields(logrus.Fields{"address": u.LinkAddress.String(), "new": u.NewAddr, "link": u.LinkIndex}).Debug("address event")
			if settle == nil {
				settle = time.After(hostAddrSettle)
			}
		case <-settle:
			settle = nil
			a.refreshHostAddrs()
		}
	}
}
