package servicefeature

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// readServiceFlows reads br0's load-balancing flows (table PodServiceLB,
// FeatureService cookies), before the reconcilers start.
func (p *Proxy) readServiceFlows(ctx context.Context) ([]openflow.Flow, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fs, err := p.h.ReadFlows(ctx, plan.Pod, plan.PodServiceLB, plan.FeatureService)
	if err != nil {
		return nil, fmt.Errorf("services: read br0's service flows: %w", err)
	}
	return fs, nil
}

// restoreGroupIDs gives the service ports the trackers know the group ids
// that br0's installed flows use for them (what a restarted agent reads
// before its first sync), so that every group keeps its id across the
// restart: the first sync then rewrites nothing, and the affinity bindings
// learned under a ServiceID stay valid. Ids are hashes of the port's name,
// so they mostly come out the same anyway; two names that collide probe
// in the order they are first seen, which a restart may change.
//
// A flow is matched to its port by the owner hash of its cookie and to its
// group key by family and destination: the ClusterIP's group is the
// internal one, another group of the port the external one. It returns the
// keys reserved; ids that cannot be (held by another port, out of range)
// are left to the allocator.
func (p *Proxy) restoreGroupIDs(installed []openflow.Flow) []string {
	ports := p.svcs.Ports()
	byHash := map[uint64]service.ServicePortName{}
	dup := map[uint64]bool{}
	for name := range ports {
		h := plan.OwnerHash(serviceflows.Owner(name))
		if _, ok := byHash[h]; ok {
			dup[h] = true
		}
		byHash[h] = name
	}
	type famKey struct {
		name service.ServicePortName
		fam  service.Family
	}
	type use struct {
		fk       famKey
		gid      uint32
		internal bool
	}
	var uses []use
	internal := map[famKey]uint32{}
	for _, f := range installed {
		ck := plan.Cookie(f.Cookie)
		if f.Table != uint8(plan.PodServiceLB) || ck.Feature() != plan.FeatureService || dup[ck.OwnerHash()] {
			continue
		}
		name, ok := byHash[ck.OwnerHash()]
		gid, hasGroup := flowGroup(f)
		dst, hasDst := flowDst(f.Match)
		if !ok || !hasGroup || !hasDst {
			continue
		}
		fam := service.FamilyOf(dst)
		cip, _ := ports[name].ClusterIP(fam)
		u := use{fk: famKey{name, fam}, gid: gid, internal: cip == dst}
		if u.internal {
			internal[u.fk] = gid
		}
		uses = append(uses, u)
	}
	var keys []string
	reserved := map[string]bool{}
	for _, u := range uses {
		if !u.internal && internal[u.fk] == u.gid {
			continue // external addresses sharing the internal group
		}
		key := serviceflows.GroupKey(u.fk.name, u.fk.fam, !u.internal)
		if reserved[key] {
			continue
		}
		reserved[key] = true
		if err := p.ids.Reserve(key, u.gid); err != nil {
			p.log.WithError(err).WithField("service", u.fk.name.String()).Warn("cannot keep the group id installed; the service gets another")
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// releaseUnbuilt frees the ids restoreGroupIDs reserved that the first
// sync did not use (a port that changed while the agent was away).
func (p *Proxy) releaseUnbuilt(keys []string) {
	used := map[string]bool{}
	for _, b := range p.built {
		for _, g := range b.ids {
			used[g.key] = true
		}
	}
	for _, k := range keys {
		if !used[k] {
			p.ids.Release(k)
		}
	}
}

// flowGroup returns the first group a flow's apply-actions output to.
func flowGroup(f openflow.Flow) (uint32, bool) {
	for _, ins := range f.Instructions {
		if aa, ok := ins.(openflow.ApplyActions); ok {
			for _, act := range aa.Actions {
				if g, ok := act.(openflow.Group); ok {
					return g.ID, true
				}
			}
		}
	}
	return 0, false
}

// flowDst returns the exact IPv4 or IPv6 destination a match holds: the
// packet's, or the connection's original one (TCP and UDP services match
// ct_nw_dst and ct_ipv6_dst).
func flowDst(m openflow.Match) (netip.Addr, bool) {
	for _, want := range []openflow.Field{
		openflow.IPv4Dst(netip.IPv4Unspecified()), openflow.IPv6Dst(netip.IPv6Unspecified()),
		openflow.CtNwDst(netip.IPv4Unspecified()), openflow.CtIPv6Dst(netip.IPv6Unspecified()),
	} {
		for _, f := range m.Fields {
			if f.Class != want.Class || f.Field != want.Field || f.Mask != nil {
				continue
			}
			if a, ok := netip.AddrFromSlice(f.Value); ok {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}
