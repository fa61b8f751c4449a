package networkpolicyfeature

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/model/networkpolicy"
)

// Pod is what the index needs to know about a pod.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	// IPs are its addresses; a pod without any contributes nothing yet.
	IPs []netip.Addr
	// Ports are its containers' ports, for named ports.
	Ports []v1.ContainerPort
	// HostNetwork pods are the node's: never selected, never peers.
	HostNetwork bool
	// Local pods run on this node; OFPort is their br0 port (0: not known
	// yet, so no egress flows for them).
	Local  bool
	OFPort uint32
}

func (p *Pod) key() string { return p.Namespace + "/" + p.Name }

// podState is a pod as the index last used it, with what it is part of.
type podState struct {
	pod *Pod
	// peerOf holds the rules whose peers include the pod.
	peerOf map[uint32]bool
	// appliedBy holds the policies that select it (local pods only).
	appliedBy map[string]bool
}

// ruleState is one rule of one policy.
type ruleState struct {
	id    uint32
	dir   networkpolicyflows.Direction
	index int // among its policy's rules of its direction
	pol   *policyState
	rule  networkpolicy.Rule
	// static are the peer keys that no pod decides: address blocks, or
	// every address when the rule has no peers.
	static []networkpolicyflows.Key
	// nsWide: a peer selects namespaces, so pods of other namespaces may
	// be peers; everyPod: an egress rule without peers with named ports,
	// which every pod's matching container port makes a destination.
	nsWide, everyPod bool
	// members are the pods (namespace/name) that are its peers.
	members map[string]bool
}

// peerGroup is the wide rules whose pod peers are the same: one pod is a
// peer of all of them or of none.
type peerGroup struct {
	sig     string
	rep     *ruleState // any of them, to judge pods with
	rules   map[uint32]*ruleState
	members map[string]bool
}

// peerSignature renders what decides whether a pod is a peer of r.
func peerSignature(r *ruleState) string {
	var b strings.Builder
	if r.everyPod {
		return "*"
	}
	for _, p := range r.rule.Peers {
		if p.Block != nil {
			continue
		}
		if p.Namespaces == nil {
			b.WriteString("ns=" + r.pol.namespace)
		} else {
			b.WriteString("nssel=" + p.Namespaces.String())
		}
		if p.Pods == nil {
			b.WriteString(";pods=*|")
		} else {
			b.WriteString(";pods=" + p.Pods.String() + "|")
		}
	}
	return b.String()
}

type policyState struct {
	key, namespace, name string
	p                    *networkpolicy.Policy
	rules                []*ruleState
}

// Index is the incremental model of NetworkPolicy on this node: the pods,
// namespaces and policies it is told about, and the clause keys each
// rule's conjunctions need, counted so that a key shared by several rules,
// or given twice to one, stays until its last user goes. Each change
// marks the owners whose flows it changed; Flows rebuilds one owner.
type Index struct {
	cfg networkpolicyflows.Config

	pods       map[string]*podState
	podsByNS   map[string]map[string]bool
	namespaces map[string]labels.Set
	logNS      map[string]bool
	policies   map[string]*policyState
	policyByNS map[string]map[string]bool
	rules      map[uint32]*ruleState
	// rulesByNS holds the rules whose peers are pods of their policy's
	// namespace only; wideRules the others with pod peers, in groups of
	// the same pod peers (peerGroup), so that a pod is judged once per
	// group, not once per rule.
	rulesByNS map[string]map[uint32]bool
	wideRules map[uint32]bool
	groups    map[string]*peerGroup

	refs      map[networkpolicyflows.Key]map[networkpolicyflows.Conj]int
	keyOwner  map[networkpolicyflows.Key]string
	ownerKeys map[string]map[networkpolicyflows.Key]bool
	// owners of pods and policies, to rebuild them.
	podOwners    map[string]string
	podByHash    map[uint64]string
	policyOwners map[string]string

	dirty  map[string]bool
	nextID uint32
	freeID []uint32
}

// NewIndex returns an empty index for a node with configuration cfg.
func NewIndex(cfg networkpolicyflows.Config) *Index {
	return &Index{
		cfg: cfg, pods: map[string]*podState{}, podsByNS: map[string]map[string]bool{},
		namespaces: map[string]labels.Set{}, logNS: map[string]bool{}, policies: map[string]*policyState{}, policyByNS: map[string]map[string]bool{},
		rules: map[uint32]*ruleState{}, rulesByNS: map[string]map[uint32]bool{}, wideRules: map[uint32]bool{},
		groups: map[string]*peerGroup{},
		refs:   map[networkpolicyflows.Key]map[networkpolicyflows.Conj]int{}, keyOwner: map[networkpolicyflows.Key]string{}, ownerKeys: map[string]map[networkpolicyflows.Key]bool{},
		podOwners: map[string]string{}, podByHash: map[uint64]string{}, policyOwners: map[string]string{},
		dirty: map[string]bool{networkpolicyflows.OwnerBase: true}, nextID: 1,
	}
}

// SetConfig replaces the node's configuration (base and rule flows depend
// on it).
func (x *Index) SetConfig(cfg networkpolicyflows.Config) {
	x.cfg = cfg
	x.dirty[networkpolicyflows.OwnerBase] = true
	for o := range x.policyOwners {
		x.dirty[o] = true
	}
}

// TakeDirty returns the owners changed since the last call, sorted.
func (x *Index) TakeDirty() []string {
	out := slices.Sorted(maps.Keys(x.dirty))
	clear(x.dirty)
	return out
}

// Policies returns how many policies the index holds.
func (x *Index) Policies() int { return len(x.policies) }

// Rules returns how many rules (conjunctions) the index holds.
func (x *Index) Rules() int { return len(x.rules) }

// Isolated reports whether pod key (namespace/name) is isolated for
// ingress and for egress.
func (x *Index) Isolated(key string) (ingress, egress bool) {
	ps := x.pods[key]
	if ps == nil {
		return false, false
	}
	return x.isolation(ps)
}

func (x *Index) isolation(ps *podState) (ingress, egress bool) {
	for k := range ps.appliedBy {
		if st := x.policies[k]; st != nil {
			ingress = ingress || st.p.Ingress
			egress = egress || st.p.Egress
		}
	}
	return ingress, egress
}

// SetLogging says whether namespace's denied packets are logged (a
// metered sample sent to the agent).
func (x *Index) SetLogging(namespace string, on bool) {
	if x.logNS[namespace] == on {
		return
	}
	if on {
		x.logNS[namespace] = true
	} else {
		delete(x.logNS, namespace)
	}
	for key := range x.podsByNS[namespace] {
		if ps := x.pods[key]; ps.pod.Local {
			x.dirty[x.podOwner(ps.pod.Namespace, ps.pod.Name)] = true
		}
	}
}

// SetNamespace records namespace name's labels (nil: deleted) and
// re-decides the pods of it that namespace-selecting peers may take.
func (x *Index) SetNamespace(name string, lbl map[string]string) {
	if lbl == nil {
		delete(x.namespaces, name)
	} else {
		x.namespaces[name] = labels.Set(maps.Clone(lbl))
	}
	for key := range x.podsByNS[name] {
		ps := x.pods[key]
		for _, g := range x.groups {
			x.updateGroup(g, ps, ps.pod)
		}
	}
}

// updateGroup moves pod state ps from its current pod to p (nil: gone) as
// a peer of every rule of group g.
func (x *Index) updateGroup(g *peerGroup, ps *podState, p *Pod) {
	key := ""
	if p != nil {
		key = p.key()
	} else if ps.pod != nil {
		key = ps.pod.key()
	}
	was := g.members[key]
	is := p != nil && x.isPeer(g.rep, p)
	if !was && !is {
		return
	}
	if is {
		g.members[key] = true
	} else {
		delete(g.members, key)
	}
	for _, r := range g.rules {
		x.setPeer(r, ps, p, key, is)
	}
}

// SetPod records a pod (nil: deleted) under key namespace/name.
func (x *Index) SetPod(key string, p *Pod) {
	old := x.pods[key]
	if old == nil && p == nil {
		return
	}
	if old == nil {
		old = &podState{peerOf: map[uint32]bool{}, appliedBy: map[string]bool{}}
	}
	ns := ""
	if p != nil {
		ns = p.Namespace
	} else {
		ns = old.pod.Namespace
	}
	// The rules that may take it as a peer: those of its namespace, and
	// the groups of wide rules.
	cand := map[uint32]bool{}
	for id := range x.rulesByNS[ns] {
		cand[id] = true
	}
	for id := range old.peerOf {
		if !x.wideRules[id] {
			cand[id] = true
		}
	}
	for id := range cand {
		x.updatePeer(x.rules[id], old, p)
	}
	for _, g := range x.groups {
		x.updateGroup(g, old, p)
	}
	// The policies that may select it.
	pols := map[string]bool{}
	maps.Copy(pols, x.policyByNS[ns])
	for k := range old.appliedBy {
		pols[k] = true
	}
	for k := range pols {
		x.updateApplied(x.policies[k], old, p)
	}
	wasLocal := old.pod != nil && old.pod.Local
	if p == nil {
		delete(x.pods, key)
		if set := x.podsByNS[ns]; set != nil {
			delete(set, key)
			if len(set) == 0 {
				delete(x.podsByNS, ns)
			}
		}
	} else {
		old.pod = p
		x.pods[key] = old
		if x.podsByNS[ns] == nil {
			x.podsByNS[ns] = map[string]bool{}
		}
		x.podsByNS[ns][key] = true
	}
	if wasLocal || p != nil && p.Local {
		// Its isolation flows follow its addresses, port and policies.
		o := x.podOwner(ns, keyName(key))
		x.dirty[o] = true
	}
}

func keyName(key string) string {
	_, name, _ := strings.Cut(key, "/")
	return name
}

func (x *Index) podOwner(ns, name string) string {
	o := networkpolicyflows.PodOwner(ns, name)
	if _, ok := x.podOwners[o]; !ok {
		x.podOwners[o] = ns + "/" + name
		x.podByHash[plan.OwnerHash(o)] = ns + "/" + name
	}
	return o
}

// RuleRef names a rule: its policy, direction and index among the
// policy's rules of that direction.
type RuleRef struct {
	Namespace, Name string
	Dir             networkpolicyflows.Direction
	Index           int
}

// Rule returns the rule of conjunction id.
func (x *Index) Rule(id uint32) (RuleRef, bool) {
	r := x.rules[id]
	if r == nil {
		return RuleRef{}, false
	}
	return RuleRef{Namespace: r.pol.namespace, Name: r.pol.name, Dir: r.dir, Index: r.index}, true
}

// PodOfOwnerHash returns the pod whose owner has cookie owner hash h.
func (x *Index) PodOfOwnerHash(h uint64) (namespace, name string, ok bool) {
	key, ok := x.podByHash[h]
	if !ok {
		return "", "", false
	}
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name, true
}

// updatePeer moves pod state ps from its current pod to p (nil: gone) as
// a peer of rule r.
func (x *Index) updatePeer(r *ruleState, ps *podState, p *Pod) {
	if r == nil {
		return
	}
	is := p != nil && x.isPeer(r, p)
	if !ps.peerOf[r.id] && !is {
		return
	}
	key := ""
	if p != nil {
		key = p.key()
	} else {
		key = ps.pod.key()
	}
	x.setPeer(r, ps, p, key, is)
}

// setPeer moves pod state ps (key) from its current pod to p as a peer of
// rule r, which it is (is) or not.
func (x *Index) setPeer(r *ruleState, ps *podState, p *Pod, key string, is bool) {
	was := ps.peerOf[r.id]
	if !was && !is {
		return
	}
	x.swap(r, x.peerKeys(r, ps.pod, was), x.peerKeys(r, p, is), networkpolicyflows.PeerOwner)
	if is {
		ps.peerOf[r.id] = true
		r.members[key] = true
	} else {
		delete(ps.peerOf, r.id)
		delete(r.members, key)
	}
}

// updateApplied moves pod state ps from its current pod to p as a pod that
// policy st may select.
func (x *Index) updateApplied(st *policyState, ps *podState, p *Pod) {
	if st == nil {
		return
	}
	was := ps.appliedBy[st.key]
	is := p != nil && applies(st, p)
	var owner func(networkpolicyflows.Key) string
	if p != nil {
		o := x.podOwner(p.Namespace, p.Name)
		owner = func(networkpolicyflows.Key) string { return o }
	} else if ps.pod != nil {
		o := x.podOwner(ps.pod.Namespace, ps.pod.Name)
		owner = func(networkpolicyflows.Key) string { return o }
	}
	for _, r := range st.rules {
		x.swap(r, appliedKeys(r, ps.pod, was), appliedKeys(r, p, is), owner)
	}
	if is {
		ps.appliedBy[st.key] = true
	} else {
		delete(ps.appliedBy, st.key)
	}
	if was != is {
		if ps.pod != nil {
			x.dirty[x.podOwner(ps.pod.Namespace, ps.pod.Name)] = true
		}
		if p != nil {
			x.dirty[x.podOwner(p.Namespace, p.Name)] = true
		}
	}
}

// applies reports whether policy st selects local pod p.
func applies(st *policyState, p *Pod) bool {
	return p.Local && !p.HostNetwork && p.Namespace == st.namespace && st.p.Selector.Matches(labels.Set(p.Labels))
}

// isPeer reports whether pod p is one of r's pod peers (or, for an egress
// rule without peers with named ports, any pod).
func (x *Index) isPeer(r *ruleState, p *Pod) bool {
	if p.HostNetwork {
		return false
	}
	if r.everyPod {
		return true
	}
	for _, peer := range r.rule.Peers {
		if peer.Block != nil {
			continue
		}
		if peer.Namespaces == nil {
			if p.Namespace != r.pol.namespace {
				continue
			}
		} else if !peer.Namespaces.Matches(x.namespaces[p.Namespace]) {
			continue
		}
		if peer.Pods == nil || peer.Pods.Matches(labels.Set(p.Labels)) {
			return true
		}
	}
	return false
}

// hostPrefix is the /32 or /128 of an address.
func hostPrefix(ip netip.Addr) netip.Prefix { return netip.PrefixFrom(ip, ip.BitLen()) }

// peerKeys returns the keys pod p gives rule r as a peer (member says it
// is one).
func (x *Index) peerKeys(r *ruleState, p *Pod, member bool) []networkpolicyflows.Key {
	if p == nil || !member {
		return nil
	}
	var out []networkpolicyflows.Key
	for _, ip := range p.IPs {
		if r.dir == networkpolicyflows.Ingress {
			out = append(out, networkpolicyflows.Key{Dir: networkpolicyflows.Ingress, V6: ip.Is6(), Src: hostPrefix(ip)})
			continue
		}
		var l4s []networkpolicyflows.L4
		if r.everyPod {
			l4s = namedL4s(r.rule.Ports, p)
		} else {
			l4s = append(numericL4s(r.rule.Ports), namedL4s(r.rule.Ports, p)...)
		}
		for _, l4 := range l4s {
			out = append(out, networkpolicyflows.Key{Dir: networkpolicyflows.Egress, V6: ip.Is6(), Dst: hostPrefix(ip), L4: l4})
		}
	}
	return out
}

// appliedKeys returns the keys local pod p gives rule r as a pod its
// policy selects.
func appliedKeys(r *ruleState, p *Pod, applied bool) []networkpolicyflows.Key {
	if p == nil || !applied {
		return nil
	}
	if r.dir == networkpolicyflows.Egress {
		if p.OFPort == 0 || p.OFPort >= openflow.PortMax {
			return nil
		}
		return []networkpolicyflows.Key{{Dir: networkpolicyflows.Egress, InPort: p.OFPort}}
	}
	l4s := append(numericL4s(r.rule.Ports), namedL4s(r.rule.Ports, p)...)
	var out []networkpolicyflows.Key
	for _, ip := range p.IPs {
		for _, l4 := range l4s {
			out = append(out, networkpolicyflows.Key{Dir: networkpolicyflows.Ingress, V6: ip.Is6(), Dst: hostPrefix(ip), L4: l4})
		}
	}
	return out
}

var protoNumbers = map[v1.Protocol]uint8{v1.ProtocolTCP: networkpolicyflows.ProtoTCP, v1.ProtocolUDP: networkpolicyflows.ProtoUDP, v1.ProtocolSCTP: networkpolicyflows.ProtoSCTP}

// numericL4s returns the matches of a rule's numeric ports (every port
// when it has none at all).
func numericL4s(ports []networkpolicy.Port) []networkpolicyflows.L4 {
	if len(ports) == 0 {
		return []networkpolicyflows.L4{{}}
	}
	var out []networkpolicyflows.L4
	for _, p := range ports {
		proto := protoNumbers[p.Protocol]
		switch {
		case p.Name != "":
		case p.Number == 0:
			out = append(out, networkpolicyflows.L4{Proto: proto})
		case p.EndPort != 0:
			out = append(out, networkpolicyflows.PortRange(proto, uint16(p.Number), uint16(p.EndPort))...)
		default:
			out = append(out, networkpolicyflows.L4{Proto: proto, Port: uint16(p.Number), Mask: 0xffff})
		}
	}
	return out
}

// namedL4s returns the matches of a rule's named ports as pod p resolves
// them: a name p's containers do not have for that protocol matches
// nothing.
func namedL4s(ports []networkpolicy.Port, p *Pod) []networkpolicyflows.L4 {
	var out []networkpolicyflows.L4
	for _, port := range ports {
		if port.Name == "" {
			continue
		}
		for _, cp := range p.Ports {
			proto := cp.Protocol
			if proto == "" {
				proto = v1.ProtocolTCP
			}
			if cp.Name == port.Name && proto == port.Protocol && cp.ContainerPort > 0 && cp.ContainerPort < 65536 {
				out = append(out, networkpolicyflows.L4{Proto: protoNumbers[proto], Port: uint16(cp.ContainerPort), Mask: 0xffff})
			}
		}
	}
	return out
}

// swap replaces keys old with keys new in rule r's conjunction, each
// counted; owner names the owner of a key that appears.
func (x *Index) swap(r *ruleState, old, new []networkpolicyflows.Key, owner func(networkpolicyflows.Key) string) {
	if len(old) == 0 && len(new) == 0 {
		return
	}
	for _, k := range new {
		x.ref(r.id, k, +1, owner)
	}
	for _, k := range old {
		x.ref(r.id, k, -1, owner)
	}
}

func (x *Index) ref(id uint32, k networkpolicyflows.Key, delta int, owner func(networkpolicyflows.Key) string) {
	c := networkpolicyflows.Conj{ID: id, Clause: k.Clause()}
	m := x.refs[k]
	if m == nil {
		if delta < 0 {
			return
		}
		m = map[networkpolicyflows.Conj]int{}
		x.refs[k] = m
		o := owner(k)
		x.keyOwner[k] = o
		if x.ownerKeys[o] == nil {
			x.ownerKeys[o] = map[networkpolicyflows.Key]bool{}
		}
		x.ownerKeys[o][k] = true
	}
	before := m[c]
	m[c] += delta
	if m[c] <= 0 {
		delete(m, c)
	}
	if (before > 0) == (m[c] > 0) {
		return
	}
	o := x.keyOwner[k]
	x.dirty[o] = true
	if len(m) == 0 {
		delete(x.refs, k)
		delete(x.keyOwner, k)
		if ks := x.ownerKeys[o]; ks != nil {
			delete(ks, k)
			if len(ks) == 0 {
				delete(x.ownerKeys, o)
			}
		}
	}
}

// SetPolicy records a compiled policy under key namespace/name (nil:
// deleted). Its rules keep their conjunction ids by position.
func (x *Index) SetPolicy(key string, p *networkpolicy.Policy) {
	old := x.policies[key]
	oldIDs := map[[2]int]uint32{}
	if old != nil {
		for _, r := range old.rules {
			oldIDs[[2]int{int(r.dir), r.index}] = r.id
		}
		x.removePolicy(old)
	}
	if p == nil {
		for _, id := range oldIDs {
			x.freeID = append(x.freeID, id)
		}
		return
	}
	st := &policyState{key: key, namespace: p.Namespace, name: p.Name, p: p}
	used := map[uint32]bool{}
	add := func(dir networkpolicyflows.Direction, rules []networkpolicy.Rule) {
		for i, rule := range rules {
			pos := [2]int{int(dir), i}
			id, ok := oldIDs[pos]
			if !ok {
				id = x.allocID()
			}
			used[id] = true
			r := newRule(id, dir, st, rule)
			r.index = i
			st.rules = append(st.rules, r)
		}
	}
	add(networkpolicyflows.Ingress, p.IngressRules)
	add(networkpolicyflows.Egress, p.EgressRules)
	for _, id := range oldIDs {
		if !used[id] {
			x.freeID = append(x.freeID, id)
		}
	}
	x.addPolicy(st)
}

func (x *Index) allocID() uint32 {
	if n := len(x.freeID); n > 0 {
		id := x.freeID[n-1]
		x.freeID = x.freeID[:n-1]
		return id
	}
	id := x.nextID
	x.nextID++
	return id
}

func newRule(id uint32, dir networkpolicyflows.Direction, st *policyState, rule networkpolicy.Rule) *ruleState {
	r := &ruleState{id: id, dir: dir, pol: st, rule: rule, members: map[string]bool{}}
	var prefixes []netip.Prefix
	anyPeer := len(rule.Peers) == 0
	for _, peer := range rule.Peers {
		switch {
		case peer.Block != nil:
			prefixes = append(prefixes, Subtract(peer.Block.CIDR, peer.Block.Except)...)
		case peer.Namespaces != nil:
			r.nsWide = true
		}
	}
	hasNamed := false
	for _, p := range rule.Ports {
		hasNamed = hasNamed || p.Name != ""
	}
	r.everyPod = dir == networkpolicyflows.Egress && anyPeer && hasNamed
	if dir == networkpolicyflows.Ingress {
		if anyPeer {
			r.static = []networkpolicyflows.Key{{Dir: networkpolicyflows.Ingress}, {Dir: networkpolicyflows.Ingress, V6: true}}
		}
		for _, p := range prefixes {
			r.static = append(r.static, networkpolicyflows.Key{Dir: networkpolicyflows.Ingress, V6: p.Addr().Is6(), Src: p})
		}
		return r
	}
	l4s := numericL4s(rule.Ports)
	if anyPeer {
		for _, l4 := range l4s {
			r.static = append(r.static, networkpolicyflows.Key{Dir: networkpolicyflows.Egress, L4: l4}, networkpolicyflows.Key{Dir: networkpolicyflows.Egress, V6: true, L4: l4})
		}
	}
	for _, p := range prefixes {
		for _, l4 := range l4s {
			r.static = append(r.static, networkpolicyflows.Key{Dir: networkpolicyflows.Egress, V6: p.Addr().Is6(), Dst: p, L4: l4})
		}
	}
	return r
}

// hasPodPeers reports whether some pod may be a peer of r.
func (r *ruleState) hasPodPeers() bool {
	if r.everyPod {
		return true
	}
	for _, p := range r.rule.Peers {
		if p.Block == nil {
			return true
		}
	}
	return false
}

func (x *Index) addPolicy(st *policyState) {
	x.policies[st.key] = st
	if x.policyByNS[st.namespace] == nil {
		x.policyByNS[st.namespace] = map[string]bool{}
	}
	x.policyByNS[st.namespace][st.key] = true
	po := networkpolicyflows.PolicyOwner(st.namespace, st.name)
	x.policyOwners[po] = st.key
	x.dirty[po] = true
	for _, r := range st.rules {
		x.rules[r.id] = r
		x.swap(r, nil, r.static, networkpolicyflows.PeerOwner)
		if !r.hasPodPeers() {
			continue
		}
		if r.nsWide || r.everyPod {
			x.wideRules[r.id] = true
			sig := peerSignature(r)
			g := x.groups[sig]
			if g == nil {
				g = &peerGroup{sig: sig, rep: r, rules: map[uint32]*ruleState{}, members: map[string]bool{}}
				x.groups[sig] = g
				for key, ps := range x.pods {
					if x.isPeer(r, ps.pod) {
						g.members[key] = true
					}
				}
			}
			g.rules[r.id] = r
			for key := range g.members {
				ps := x.pods[key]
				x.setPeer(r, ps, ps.pod, key, true)
			}
			continue
		}
		if x.rulesByNS[st.namespace] == nil {
			x.rulesByNS[st.namespace] = map[uint32]bool{}
		}
		x.rulesByNS[st.namespace][r.id] = true
		for key := range x.podsByNS[st.namespace] {
			ps := x.pods[key]
			x.updatePeer(r, ps, ps.pod)
		}
	}
	for key := range x.podsByNS[st.namespace] {
		ps := x.pods[key]
		x.updateApplied(st, ps, ps.pod)
	}
}

func (x *Index) removePolicy(st *policyState) {
	for key := range x.podsByNS[st.namespace] {
		ps := x.pods[key]
		if ps.appliedBy[st.key] {
			x.updateApplied(st, ps, nil)
			// updateApplied with nil forgets the selection; the pod is
			// still there.
		}
	}
	for _, r := range st.rules {
		for key := range r.members {
			if ps := x.pods[key]; ps != nil {
				x.swap(r, x.peerKeys(r, ps.pod, true), nil, networkpolicyflows.PeerOwner)
				delete(ps.peerOf, r.id)
			}
		}
		clear(r.members)
		x.swap(r, r.static, nil, networkpolicyflows.PeerOwner)
		delete(x.rules, r.id)
		if x.wideRules[r.id] {
			delete(x.wideRules, r.id)
			sig := peerSignature(r)
			if g := x.groups[sig]; g != nil {
				delete(g.rules, r.id)
				if len(g.rules) == 0 {
					delete(x.groups, sig)
				} else if g.rep == r {
					for _, other := range g.rules {
						g.rep = other
						break
					}
				}
			}
		}
		if set := x.rulesByNS[st.namespace]; set != nil {
			delete(set, r.id)
			if len(set) == 0 {
				delete(x.rulesByNS, st.namespace)
			}
		}
	}
	delete(x.policies, st.key)
	if set := x.policyByNS[st.namespace]; set != nil {
		delete(set, st.key)
		if len(set) == 0 {
			delete(x.policyByNS, st.namespace)
		}
	}
	po := networkpolicyflows.PolicyOwner(st.namespace, st.name)
	delete(x.policyOwners, po)
	x.dirty[po] = true
}

// Flows returns owner's flows as the index stands (none: remove the
// owner).
func (x *Index) Flows(owner string) ([]openflow.Flow, error) {
	if owner == networkpolicyflows.OwnerBase {
		return networkpolicyflows.BaseFlows(x.cfg)
	}
	var fs []openflow.Flow
	if key, ok := x.policyOwners[owner]; ok {
		if st := x.policies[key]; st != nil {
			for _, r := range st.rules {
				rf, err := networkpolicyflows.RuleFlows(x.cfg, r.dir, r.id)
				if err != nil {
					return nil, err
				}
				fs = append(fs, rf...)
			}
		}
		return fs, nil
	}
	for _, k := range slices.SortedFunc(maps.Keys(x.ownerKeys[owner]), compareKeys) {
		kf, err := networkpolicyflows.ClauseFlows(k, slices.Collect(maps.Keys(x.refs[k])))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", owner, err)
		}
		fs = append(fs, kf...)
	}
	if key, ok := x.podOwners[owner]; ok {
		if ps := x.pods[key]; ps != nil && ps.pod.Local {
			in, eg := x.isolation(ps)
			if in {
				iso, err := networkpolicyflows.IsolationFlows(networkpolicyflows.Ingress, 0, ps.pod.IPs, x.logNS[ps.pod.Namespace])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", owner, err)
				}
				fs = append(fs, iso...)
			}
			if eg && ps.pod.OFPort != 0 {
				iso, err := networkpolicyflows.IsolationFlows(networkpolicyflows.Egress, ps.pod.OFPort, nil, x.logNS[ps.pod.Namespace])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", owner, err)
				}
				fs = append(fs, iso...)
			}
		} else if len(fs) == 0 {
			delete(x.podOwners, owner)
			delete(x.podByHash, plan.OwnerHash(owner))
		}
	}
	return fs, nil
}

func compareKeys(a, b networkpolicyflows.Key) int { return strings.Compare(a.String(), b.String()) }

// Subtract returns the prefixes that cover cidr less every prefix of
// except, fewest first split: an ipBlock as flows.
func Subtract(cidr netip.Prefix, except []netip.Prefix) []netip.Prefix {
	cidr = cidr.Masked()
	var hit bool
	for _, e := range except {
		e = e.Masked()
		if e.Addr().Is4() != cidr.Addr().Is4() || !e.Overlaps(cidr) {
			continue
		}
		if e.Bits() <= cidr.Bits() {
			return nil // the except covers the whole block
		}
		hit = true
	}
	if !hit {
		return []netip.Prefix{cidr}
	}
	lo, hi := halves(cidr)
	return append(Subtract(lo, except), Subtract(hi, except)...)
}

// halves splits a prefix into its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().AsSlice()
	i := (bits - 1) / 8
	b[i] |= 0x80 >> ((bits - 1) % 8)
	a, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(a, bits)
}
