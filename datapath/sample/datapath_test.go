package sample

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"nodeflow/datapath/plan"
)

// How a packet's recirculations are counted.
//
// ofproto/trace is not faithful enough for this: it resumes after every
// ct(table=N) with a made-up ct_state (+new unless told otherwise with
// --ct-next) and does not undo a NAT it did not see, so the reply and
// established paths, which depend on what conntrack remembers, would be
// traced through flows they never take. So the checks send real packets
// through the sandbox's userspace datapath, which runs the real
// conntrack, and read two things after each one:
//
//   - the datapath flows. Before each packet, revalidator/purge deletes
//     every datapath flow and its upcall bookkeeping, so that each pass of
//     the packet through the datapath misses and installs exactly one flow,
//     keyed by its recirc_id. The passes chain up from the flow with
//     recirc_id(0) through each recirc(N) action to the flow with
//     recirc_id(N), and through a tnl_pop to the flow that matches the
//     decapsulated packet. Every link of the chain is one recirculation as
//     the datapath counts them against its limit (each recirc and each
//     tunnel pop; a patch port is not one), so the count is the number of
//     passes less one.
//   - the OpenFlow flows' n_packets. The translation of a missed packet
//     credits every flow it matched, in both bridges (a patch port is
//     crossed inside one translation), once per match. The difference
//     before and after the packet is the multiset of table visits,
//     which the path model must list exactly, and each visit to a flow
//     with ct(..., table=N) (or to br0's in_port=vxlan0 flow, reached by a
//     tunnel pop) is a recirculation, which must agree with the datapath's
//     count.

// dpPass is one datapath flow: one pass of a packet through the datapath.
type dpPass struct {
	recircID string // "0" for a packet's first pass and for a decapsulated packet
	tunnel   bool   // the flow matches a decapsulated packet's tunnel metadata
	actions  string
	line     string
}

var (
	recircIDRE  = regexp.MustCompile(`recirc_id\((0x[0-9a-f]+|\d+)\)`)
	recircActRE = regexp.MustCompile(`recirc\((0x[0-9a-f]+|\d+)\)`)
)

// normID writes a recirculation id in one form.
func normID(s string) string {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return s
	}
	return strconv.FormatUint(n, 16)
}

// datapathFlows returns the datapath's flows.
func (r *rig) datapathFlows() []dpPass {
	r.t.Helper()
	out, err := r.sb.Appctl("dpctl/dump-flows")
	if err != nil {
		r.t.Fatal(err)
	}
	var fs []dpPass
	for _, l := range strings.Split(out, "\n") {
		match, actions, ok := strings.Cut(strings.TrimSpace(l), " actions:")
		if !ok {
			continue
		}
		m := recircIDRE.FindStringSubmatch(match)
		if m == nil {
			continue
		}
		fs = append(fs, dpPass{recircID: normID(m[1]), tunnel: strings.Contains(match, "tunnel("), actions: actions, line: strings.TrimSpace(l)})
	}
	return fs
}

// links returns where p goes on: the recirculation ids it recirculates
// to, and how many tunnel pops it does.
func (p dpPass) links() (ids []string, pops int) {
	for _, m := range recircActRE.FindAllStringSubmatch(p.actions, -1) {
		ids = append(ids, normID(m[1]))
	}
	return ids, strings.Count(p.actions, "tnl_pop(")
}

// chain orders the flows of one packet from its first pass. complete is
// false until the first pass's flow is there (it is installed last, after
// the passes it recirculates to); err says the flows are not one chain.
func chain(fs []dpPass) (passes []dpPass, complete bool, err error) {
	var root *dpPass
	byID := map[string]*dpPass{}
	var popped *dpPass
	for i := range fs {
		f := &fs[i]
		switch {
		case f.recircID == "0" && f.tunnel:
			popped = f
		case f.recircID == "0":
			if root != nil {
				return nil, false, fmt.Errorf("two first passes:\n%s\n%s", root.line, f.line)
			}
			root = f
		default:
			byID[f.recircID] = f
		}
	}
	if root == nil {
		return nil, false, nil
	}
	queue := []*dpPass{root}
	seen := 0
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		passes = append(passes, *p)
		seen++
		ids, pops := p.links()
		for _, id := range ids {
			next, ok := byID[id]
			if !ok {
				return nil, false, fmt.Errorf("pass %s recirculates to %s, which has no flow", p.line, id)
			}
			queue = append(queue, next)
		}
		for range pops {
			if popped == nil {
				return nil, false, fmt.Errorf("pass %s pops a tunnel, and no flow matches the decapsulated packet", p.line)
			}
			queue = append(queue, popped)
		}
	}
	if seen != len(fs) {
		return nil, false, fmt.Errorf("%d datapath flows, %d of them in the packet's chain", len(fs), seen)
	}
	return passes, true, nil
}

// hit is one visit of a packet to an OpenFlow flow.
type hit struct {
	bridge plan.Bridge
	table  plan.TableID
	flow   string // the flow as dump-flows prints it, without statistics
	recirc bool
}

var (
	tableRE    = regexp.MustCompile(`table=(\d+)`)
	ctRecircRE = regexp.MustCompile(`ct\([^()]*table=`)
	groupActRE = regexp.MustCompile(`group:(\d+)`)
)

// hits returns the visits between two n_packets snapshots of bridge b.
// tunnelPort is br0's vxlan0 ofport: a visit to br0's classifier flow for
// it follows a tunnel pop. recircGroups holds the ids of the groups whose
// buckets recirculate (a service group's buckets commit the DNAT with
// ct(..., table=N)): a visit to a flow that sends a packet to one is a
// recirculation.
func hits(b plan.Bridge, before, after map[string]uint64, tunnelPort uint32, recircGroups map[string]bool) []hit {
	var out []hit
	inTunnel := regexp.MustCompile(fmt.Sprintf(`in_port=%d([, ]|$)`, tunnelPort))
	for flow, n := range after {
		for range n - before[flow] {
			m := tableRE.FindStringSubmatch(flow)
			table := 0
			if m != nil {
				table, _ = strconv.Atoi(m[1])
			}
			match, acts, _ := strings.Cut(flow, " actions=")
			recirc := ctRecircRE.MatchString(acts) ||
				b == plan.Pod && plan.TableID(table) == plan.PodClassifier && inTunnel.MatchString(match)
			if g := groupActRE.FindStringSubmatch(acts); g != nil && recircGroups[g[1]] {
				recirc = true
			}
			out = append(out, hit{bridge: b, table: plan.TableID(table), flow: flow, recirc: recirc})
		}
	}
	return out
}

// visit is a table visit without the flow: what a plan.Step says.
type visit struct {
	bridge plan.Bridge
	table  plan.TableID
	recirc bool
}

func (v visit) String() string {
	s := fmt.Sprintf("%s:%d", shortBridge(v.bridge), v.table)
	if v.recirc {
		s += "*"
	}
	return s
}

func shortBridge(b plan.Bridge) string {
	if b == plan.Gateway {
		return "eth"
	}
	return "br"
}

// visits counts visits by bridge, table and recirculation.
func visits[T any](items []T, key func(T) visit) map[visit]int {
	m := map[visit]int{}
	for _, it := range items {
		m[key(it)]++
	}
	return m
}

// visitDiff describes how two visit multisets differ, or returns "".
func visitDiff(model, trace map[visit]int) string {
	var keys []visit
	for k := range model {
		keys = append(keys, k)
	}
	for k := range trace {
		if _, ok := model[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b visit) int {
		if a.bridge != b.bridge {
			return int(a.bridge) - int(b.bridge)
		}
		if a.table != b.table {
			return int(a.table) - int(b.table)
		}
		if a.recirc == b.recirc {
			return 0
		}
		if a.recirc {
			return 1
		}
		return -1
	})
	var diffs []string
	for _, k := range keys {
		if model[k] != trace[k] {
			diffs = append(diffs, fmt.Sprintf("%s: the model says %d, the trace %d", k, model[k], trace[k]))
		}
	}
	return strings.Join(diffs, "; ")
}

// traced is what one packet did.
type traced struct {
	passes []dpPass
	hits   []hit
	// sent holds, per interface, the frames it sent.
	sent map[string][][]byte
}

func (tr traced) recirculations() int { return len(tr.passes) - 1 }

// String renders the trace for a failure message.
func (tr traced) String() string {
	var sb strings.Builder
	sb.WriteString("datapath passes:\n")
	for i, p := range tr.passes {
		fmt.Fprintf(&sb, "  %d. recirc_id(%s) actions:%s\n", i, p.recircID, p.actions)
	}
	sb.WriteString("OpenFlow flows visited (* recirculates):\n")
	hs := slices.Clone(tr.hits)
	slices.SortFunc(hs, func(a, b hit) int {
		if a.bridge != b.bridge {
			return int(a.bridge) - int(b.bridge)
		}
		if a.table != b.table {
			return int(a.table) - int(b.table)
		}
		return strings.Compare(a.flow, b.flow)
	})
	for _, h := range hs {
		mark := " "
		if h.recirc {
			mark = "*"
		}
		fmt.Fprintf(&sb, "  %s %s %s\n", mark, bridgeName(h.bridge), h.flow)
	}
	for name, fs := range tr.sent {
		for _, f := range fs {
			seg, _ := parseSegment(f)
			fmt.Fprintf(&sb, "sent by %s: %s\n", name, seg)
		}
	}
	return sb.String()
}

// errOverLimit says the datapath dropped a packet for recirculating more
// than it allows.
var errOverLimit = errors.New("dropped by the datapath: more recirculations than it allows")

// send makes seg arrive on interface in, waits until the datapath has
// processed it, and returns what it did. A packet the datapath dropped for
// its recirculations gives errOverLimit.
func (r *rig) send(in string, seg segment) (traced, error) {
	t := r.t
	t.Helper()
	if r.stats == nil {
		// The groups do not change while packets are sent: read once.
		r.stats = map[plan.Bridge]map[string]uint64{}
		r.groups = map[plan.Bridge]map[string]bool{}
		for _, b := range plan.Bridges {
			r.stats[b] = r.ruleStats(b)
			r.groups[b] = r.recircGroups(b)
		}
	}
	if _, err := r.sb.Appctl("revalidator/purge"); err != nil {
		t.Fatal(err)
	}
	if left := r.datapathFlows(); len(left) > 0 {
		t.Fatalf("datapath flows left after a purge: %v", left)
	}
	drops := r.recircDrops()
	r.inject(in, seg.frame(t))

	var tr traced
	var err error
	complete := false
	deadline := time.Now().Add(5 * time.Second)
	for !complete && err == nil && time.Now().Before(deadline) {
		tr.passes, complete, err = chain(r.datapathFlows())
		if !complete && err == nil {
			time.Sleep(10 * time.Millisecond) // the polling interval
		}
	}
	tr.sent = r.sentAll()
	for _, b := range plan.Bridges {
		after := r.ruleStats(b)
		tr.hits = append(tr.hits, hits(b, r.stats[b], after, r.cfg.Ports.Tunnel, r.groups[b])...)
		r.stats[b] = after
	}
	if r.recircDrops() > drops {
		return tr, fmt.Errorf("%s on %s: %w (datapath flows: %v)", seg, in, errOverLimit, r.datapathFlows())
	}
	if err != nil {
		return tr, fmt.Errorf("%s on %s: datapath flows: %w", seg, in, err)
	}
	if !complete {
		return tr, fmt.Errorf("%s on %s: the datapath did not finish with it in 5 s", seg, in)
	}
	return tr, nil
}

// recircDrops returns how many packets the datapath has dropped for
// exceeding its recirculation limit.
func (r *rig) recircDrops() uint64 {
	r.t.Helper()
	out, err := r.sb.Appctl("coverage/read-counter", "datapath_drop_recirc_error")
	if err != nil {
		r.t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		r.t.Fatalf("coverage/read-counter: %q: %v", out, err)
	}
	return n
}

// sentAll returns the frames every observed interface sent since the last
// call, rotating all their pcap files in one transaction.
func (r *rig) sentAll() map[string][][]byte {
	t := r.t
	t.Helper()
	var names []string
	for n := range r.ifaces {
		names = append(names, n)
	}
	slices.Sort(names)
	var args []string
	for _, n := range names {
		i := r.ifaces[n]
		next := fmt.Sprintf("%s-%d.pcap", strings.TrimSuffix(i.pcap, fmt.Sprintf("-%d.pcap", len(i.closed))), len(i.closed)+1)
		args = append(args, "--", "set", "interface", n, "options:tx_pcap="+next)
		i.closed = append(i.closed, i.pcap)
		i.pcap = next
	}
	if _, err := r.sb.Vsctl(args[1:]...); err != nil {
		t.Fatal(err)
	}
	out := map[string][][]byte{}
	for _, n := range names {
		i := r.ifaces[n]
		fs, err := readPcap(i.closed[len(i.closed)-1])
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if len(fs) > 0 {
			out[n] = fs
		}
	}
	return out
}
