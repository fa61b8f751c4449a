package reconcile

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// sortFlows orders flows as an operator reads a table: by table, then
// highest priority first, then by text.
func sortFlows(fs []openflow.Flow) []string {
	type item struct {
		t    uint8
		p    uint16
		text string
	}
	items := make([]item, len(fs))
	for i := range fs {
		items[i] = item{fs[i].Table, fs[i].Priority, fs[i].String()}
	}
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if a.t != b.t {
			return a.t < b.t
		}
		if a.p != b.p {
			return a.p > b.p
		}
		return a.text < b.text
	})
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.text
	}
	return out
}

// stamped returns a copy of f carrying cookie.
func stamped(f *openflow.Flow, cookie uint64) openflow.Flow {
	c := *f
	c.Cookie = cookie
	return c
}

// Render writes the desired state of every owner whose name starts with
// prefix, owner by owner in name order: a "# owner" comment line, then its
// groups as `ovs-ofctl -O OpenFlow15 dump-groups` prints them, its meters
// as `dump-meters` does, and its flows as `dump-flows --no-stats` does,
// with the cookies of generation gen. An owner held back by its
// namespace's budget is one comment line that says why.
func (s *Store) Render(w io.Writer, prefix string, gen plan.Generation) error {
	s.mu.Lock()
	var owners []*owner
	for n, o := range s.owners {
		if strings.HasPrefix(n, prefix) {
			owners = append(owners, o)
		}
	}
	s.mu.Unlock()
	sort.Slice(owners, func(i, j int) bool { return owners[i].name < owners[j].name })
	for _, o := range owners {
		cookie := o.cookie | uint64(gen)
		s.mu.Lock()
		held, refusal := o.held, o.refusal
		s.mu.Unlock()
		if held {
			// Nothing of it is desired: the reason, not its flows.
			if _, err := fmt.Fprintf(w, "# owner %s (feature %s, cookie %#x): held back: %v\n", o.name, o.feature, cookie, refusal); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintf(w, "# owner %s (feature %s, cookie %#x)\n", o.name, o.feature, cookie); err != nil {
			return err
		}
		s.mu.Lock()
		gs := make([]openflow.GroupEntry, len(o.groups))
		for i := range o.groups {
			gs[i] = *o.groups[i].value()
		}
		s.mu.Unlock()
		sort.Slice(gs, func(i, j int) bool { return gs[i].ID < gs[j].ID })
		for _, g := range gs {
			if _, err := fmt.Fprintf(w, " %s\n", g.String()); err != nil {
				return err
			}
		}
		ms := make([]openflow.MeterEntry, len(o.meters))
		for i := range o.meters {
			ms[i] = *o.meters[i].meter
		}
		sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
		for _, m := range ms {
			if _, err := fmt.Fprintf(w, " %s\n", m.String()); err != nil {
				return err
			}
		}
		s.mu.Lock()
		fs := make([]openflow.Flow, len(o.flows))
		for i := range o.flows {
			fs[i] = stamped(o.flows[i].value(), cookie)
		}
		s.mu.Unlock()
		for _, line := range sortFlows(fs) {
			if _, err := fmt.Fprintln(w, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// Difference is one way the switch differs from the desired state.
type Difference struct {
	// Kind is what the reconciler would do: Add (wanted, missing), Delete
	// (on the switch, unwanted) or Modify (on the switch, different).
	Kind ChangeKind
	// Owner is the owner that wants it (Add, Modify) or whose cookie it
	// carries (Delete), or "" for a foreign flow.
	Owner string
	// What is "flow", "group" or "meter".
	What string
	// Have and Want are the switch's and the desired entry in ovs-ofctl
	// syntax; one of them is empty for Add and Delete.
	Have, Want string
}

// Compare reports how obs differs from what the owners whose name starts
// with prefix want. It changes nothing. Groups too big to read back (see
// groupReadLimit) are not compared. With an empty prefix, flows and
// groups that nobody wants (foreign ones included) are reported too; with
// a prefix, only those carrying a matching owner's cookie. Flows are
// compared as the reconciler compares them (cookie generation ignored,
// learned flows skipped); gen is the generation to show on wanted flows.
func (s *Store) Compare(obs *Observed, prefix string, gen plan.Generation) []Difference {
	s.mu.Lock()
	defer s.mu.Unlock()
	match := func(o *owner) bool { return o != nil && strings.HasPrefix(o.name, prefix) }
	var out []Difference
	seen := map[openflow.FlowKey]bool{}
	for i := range obs.Flows {
		f := &obs.Flows[i]
		if learned(f.Cookie) {
			continue
		}
		k := f.Key()
		seen[k] = true
		sl := s.flows[k]
		have := s.byHash[f.Cookie&uint64(plan.OwnerMask)]
		switch {
		case sl.desired == nil:
			if prefix == "" || match(have) {
				out = append(out, Difference{Kind: Delete, Owner: ownerName(have), What: "flow", Have: f.String()})
			}
		case !match(sl.desired.owner):
		case sl.desired.fp() != fingerprint(f, f.Cookie):
			w := stamped(sl.desired.value(), sl.desired.owner.cookie|uint64(gen))
			out = append(out, Difference{Kind: Modify, Owner: sl.desired.owner.name, What: "flow", Have: f.String(), Want: w.String()})
		}
	}
	for k, sl := range s.flows {
		if sl.desired == nil || seen[k] || !match(sl.desired.owner) {
			continue
		}
		w := stamped(sl.desired.value(), sl.desired.owner.cookie|uint64(gen))
		out = append(out, Difference{Kind: Add, Owner: sl.desired.owner.name, What: "flow", Want: w.String()})
	}
	gseen := map[uint32]bool{}
	for i := range obs.Groups {
		g := &obs.Groups[i]
		gseen[g.ID] = true
		sl := s.groups[g.ID]
		switch {
		case sl == nil || sl.desired == nil:
			if prefix == "" {
				out = append(out, Difference{Kind: Delete, What: "group", Have: " " + g.String()})
			}
		case !match(sl.desired.owner):
		case !sl.desired.sameAs(g):
			out = append(out, Difference{Kind: Modify, Owner: sl.desired.owner.name, What: "group", Have: " " + g.String(), Want: " " + sl.desired.String()})
		}
	}
	var queried map[uint32]bool
	if obs.GroupIDs != nil {
		queried = map[uint32]bool{}
		for _, id := range obs.GroupIDs {
			queried[id] = true
		}
	}
	for id, sl := range s.groups {
		if sl.desired == nil || gseen[id] || !match(sl.desired.owner) {
			continue
		}
		if queried != nil && !queried[id] {
			// Too big to read back: unknown, not missing.
			continue
		}
		out = append(out, Difference{Kind: Add, Owner: sl.desired.owner.name, What: "group", Want: " " + sl.desired.String()})
	}
	mseen := map[uint32]bool{}
	for i := range obs.Meters {
		m := &obs.Meters[i]
		mseen[m.ID] = true
		sl := s.meters[m.ID]
		switch {
		case sl == nil || sl.desired == nil:
			if prefix == "" {
				out = append(out, Difference{Kind: Delete, What: "meter", Have: " " + m.String()})
			}
		case !match(sl.desired.owner):
		case sl.desired.sum != stringSum(m.String()):
			out = append(out, Difference{Kind: Modify, Owner: sl.desired.owner.name, What: "meter", Have: " " + m.String(), Want: " " + sl.desired.meter.String()})
		}
	}
	for id, sl := range s.meters {
		if sl.desired == nil || mseen[id] || !match(sl.desired.owner) {
			continue
		}
		out = append(out, Difference{Kind: Add, Owner: sl.desired.owner.name, What: "meter", Want: " " + sl.desired.meter.String()})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.What != b.What {
			return whatOrder(a.What) < whatOrder(b.What)
		}
		return a.line() < b.line()
	})
	return out
}

func whatOrder(w string) int {
	switch w {
	case "group":
		return 0
	case "meter":
		return 1
	}
	return 2
}

func (d Difference) line() string {
	if d.Want != "" {
		return d.Want
	}
	return d.Have
}

func ownerName(o *owner) string {
	if o == nil {
		return ""
	}
	return o.name
}

// WriteDifferences renders differences as a unified-diff-like listing:
// "-" lines are on the switch and should not be, "+" lines are wanted and
// missing; a modification shows both. Each entry is followed by its owner.
func WriteDifferences(w io.Writer, ds []Difference) error {
	for _, d := range ds {
		owner := d.Owner
		var err error
		switch d.Kind {
		case Add:
			_, err = fmt.Fprintf(w, "+%s\n    # %s missing, wanted by %s\n", d.Want, d.What, owner)
		case Delete:
			if owner == "" {
				_, err = fmt.Fprintf(w, "-%s\n    # %s not wanted by any owner (foreign)\n", d.Have, d.What)
			} else {
				_, err = fmt.Fprintf(w, "-%s\n    # %s not wanted (carries the cookie of %s)\n", d.Have, d.What, owner)
			}
		case Modify:
			_, err = fmt.Fprintf(w, "-%s\n+%s\n    # %s differs from what %s wants\n", d.Have, d.Want, d.What, owner)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
