package testbed

import (
	"context"
	"fmt"
	"net/netip"

	"nodeflow/testbed/topology"
)

// The outside world. Besides its own addresses, the first external host
// (kind host) answers for two whole networks, ExternalV4 and ExternalV6:
// they are local routes on its loopback, so any address in them is the
// host's, and a server listening on all addresses there answers on every
// one of them (with that address as its source). The fabric routes them to
// the host. Tests use them when they need many outside destinations: an
// egress firewall allowing one address and denying its neighbour, say.

// The external networks.
var (
	ExternalV4 = netip.MustParsePrefix("198.18.0.0/24")
	ExternalV6 = netip.MustParsePrefix("2001:db8:e::/64")
)

// addExternalNetworks makes host own the external networks and routes
// them to it from the bridge it is linked to.
func addExternalNetworks(ctx context.Context, top *topology.Topology, host *topology.Node) ([]string, error) {
	br := top.LinkedBridge(host, "eth0")
	if br == nil {
		return nil, nil
	}
	hostNs, brNs := memberNetns(top.Name, host.Name), memberNetns(top.Name, br.Name)
	// Servers may bind any address of the networks (IPv6 needs this for
	// addresses it has no configured address for).
	if err := sysctl(ctx, hostNs, "net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"); err != nil {
		return nil, err
	}
	var added []string
	for _, ext := range []netip.Prefix{ExternalV4, ExternalV6} {
		var via netip.Addr
		for _, a := range host.Addresses() {
			if a.Addr().Is4() == ext.Addr().Is4() {
				via = a.Addr()
				break
			}
		}
		if !via.IsValid() {
			continue
		}
		fam := "-4"
		if ext.Addr().Is6() {
			fam = "-6"
		}
		if err := ipCmd(ctx, "-n", hostNs, fam, "route", "replace", "local", ext.String(), "dev", "lo"); err != nil {
			return nil, fmt.Errorf("testbed: external network %s on %s: %w", ext, host.Name, err)
		}
		if err := ipCmd(ctx, "-n", brNs, fam, "route", "replace", ext.String(), "via", via.String()); err != nil {
			return nil, fmt.Errorf("testbed: route to external network %s: %w", ext, err)
		}
		added = append(added, ext.String())
	}
	return added, nil
}
