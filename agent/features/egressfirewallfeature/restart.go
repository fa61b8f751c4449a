package egressfirewallfeature

import (
	"context"
	"net/netip"
	"time"

	"k8s.io/client-go/tools/cache"

	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/model/egressfirewall"
)

// A restart must not forget the addresses of dnsNames: the start-up
// bundle replaces table 50 with what the features want, and a name whose
// first lookup has not come back yet (or a wildcard, which is never looked
// up) would want no address, so that connections a pod opens to an address
// it learned before the restart would meet the rules after the name's rule
// (a deny-all, typically). So before the first sync, the firewall reads
// the flows its previous incarnation installed and gives each dnsName rule
// the addresses its flows matched, for SeedTTL unless an answer or a
// lookup sees them again.

// SeedTTL is how long an address read back from the switch at start-up is
// kept without being seen again in an answer.
const SeedTTL = 10 * time.Minute

// seedFromInstalled registers the dnsNames of every namespace's policy and
// gives them the addresses installed for them. It holds one reference per
// name, released by releaseSeeds once the first sync has taken its own.
func (f *Firewall) seedFromInstalled(ctx context.Context) {
	type want struct {
		ns  string
		pol *egressfirewall.Policy
	}
	var wants []want
	seen := map[string]bool{}
	for _, inf := range []cache.SharedIndexInformer{f.efInf, f.enpInf} {
		for _, k := range inf.GetIndexer().ListKeys() {
			ns, _, _ := cache.SplitMetaNamespaceKey(k)
			if seen[ns] {
				continue
			}
			seen[ns] = true
			if sel := egressfirewall.Select(ns, f.objects(ns)); sel.Policy != nil && sel.Policy.HasDNSNames() {
				wants = append(wants, want{ns, sel.Policy})
			}
		}
	}
	if len(wants) == 0 {
		return
	}
	installed, err := f.h.ReadFlows(ctx, plan.Pod, plan.PodEgressFirewall, plan.FeatureEgressFirewall)
	if err != nil {
		f.log.WithError(err).Warn("cannot read the installed egress firewall flows; dnsName rules start without addresses")
		return
	}
	byOwner := map[uint64][]openflow.Flow{}
	for _, fl := range installed {
		h := plan.Cookie(fl.Cookie).OwnerHash()
		byOwner[h] = append(byOwner[h], fl)
	}
	seeded := 0
	for _, w := range wants {
		flows := byOwner[plan.OwnerHash(egressfirewallflows.Owner(w.ns))]
		for _, r := range w.pol.Rules {
			if r.Dest.Kind() != egressfirewall.DestDNSName {
				continue
			}
			prio, err := plan.EgressFirewallRules.Rank(r.Index)
			if err != nil {
				continue
			}
			addrs := installedAddrs(flows, prio)
			if len(addrs) == 0 {
				continue
			}
			if err := f.names.Add(r.Dest.DNSName); err != nil {
				continue
			}
			f.seeds = append(f.seeds, r.Dest.DNSName)
			f.names.Observe(r.Dest.DNSName, addrs, SeedTTL)
			seeded += len(addrs)
		}
	}
	if seeded > 0 {
		f.log.WithField("addresses", seeded).Info("kept the dnsName addresses installed before the restart")
	}
}

// releaseSeeds drops the references seedFromInstalled took.
func (f *Firewall) releaseSeeds() {
	for _, n := range f.seeds {
		f.names.Release(n)
	}
	f.seeds = nil
}

// installedAddrs returns the host addresses that the flows at priority
// prio match as their destination.
func installedAddrs(flows []openflow.Flow, prio plan.Priority) []netip.Addr {
	v4 := openflow.IPv4Dst(netip.IPv4Unspecified())
	v6 := openflow.IPv6Dst(netip.IPv6Unspecified())
	var out []netip.Addr
	for _, fl := range flows {
		if plan.Priority(fl.Priority) != prio {
			continue
		}
		for _, m := range fl.Match.Fields {
			same := func(g openflow.Field) bool { return m.Class == g.Class && m.Field == g.Field }
			if !same(v4) && !same(v6) || !allOnes(m.Mask) {
				continue
			}
			if a, ok := netip.AddrFromSlice(m.Value); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

func allOnes(mask []byte) bool {
	for _, b := range mask {
		if b != 0xff {
			return false
		}
	}
	return true
}
