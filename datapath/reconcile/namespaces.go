package reconcile

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// NamedStore is a bridge's Store under the bridge's name.
type NamedStore struct {
	Bridge string
	Store  *Store
}

// NamespaceCost is what one namespace's owners want of a node's bridges.
type NamespaceCost struct {
	// Namespace is "" for the node's own owners.
	Namespace string
	// Flows are its flows per bridge, in the order of the stores asked.
	Flows []int
	// Groups, Buckets and Bytes are summed over the bridges (see Use).
	Groups, Buckets int
	Bytes           int64
	// Budget is what its charged objects take of its budget, when the
	// stores have one.
	Budget *SpaceUse
}

// Entries returns the namespace's flows and buckets, its budget's unit.
func (c NamespaceCost) Entries() int {
	n := c.Buckets
	for _, f := range c.Flows {
		n += f
	}
	return n
}

// NamespaceCosts returns the cost of every namespace that wants something
// of stores (or has objects held back), most costly first (by Entries,
// then by name).
func NamespaceCosts(stores []NamedStore) []NamespaceCost {
	byNS := map[string]*NamespaceCost{}
	get := func(ns string) *NamespaceCost {
		c := byNS[ns]
		if c == nil {
			c = &NamespaceCost{Namespace: ns, Flows: make([]int, len(stores))}
			byNS[ns] = c
		}
		return c
	}
	var budget *Budget
	for i, st := range stores {
		for ns, u := range st.Store.NamespaceUse() {
			c := get(ns)
			c.Flows[i] += u.Flows
			c.Groups += u.Groups
			c.Buckets += u.Buckets
			c.Bytes += u.Bytes
		}
		if b := st.Store.Budget(); b != nil {
			budget = b
		}
	}
	if budget != nil {
		for ns, su := range budget.Spaces() {
			c := get(ns)
			c.Budget = &su
		}
	}
	out := make([]NamespaceCost, 0, len(byNS))
	for _, c := range byNS {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(x, y NamespaceCost) int {
		return cmp.Or(cmp.Compare(y.Entries(), x.Entries()), strings.Compare(x.Namespace, y.Namespace))
	})
	return out
}

// WriteNamespaces writes the cost of every namespace (NamespaceCosts) as
// a table, most costly first: flows per bridge, groups, buckets, the bytes
// the agent's stores hold for them, and, with a namespace budget, what the
// namespace's objects take of it; then the objects the budget holds back.
// The node's own owners are the row "(node)".
func WriteNamespaces(w io.Writer, stores []NamedStore) error {
	costs := NamespaceCosts(stores)
	var budget *Budget
	for _, st := range stores {
		if b := st.Store.Budget(); b != nil {
			budget = b
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"NAMESPACE"}
	for _, st := range stores {
		head = append(head, "FLOWS "+st.Bridge)
	}
	head = append(head, "GROUPS", "BUCKETS", "BYTES")
	if budget != nil {
		head = append(head, fmt.Sprintf("BUDGET (%d)", budget.Limit()), "HELD BACK")
	}
	if _, err := fmt.Fprintln(tw, strings.Join(head, "\t")+"\t"); err != nil {
		return err
	}
	for _, c := range costs {
		row := []string{c.Namespace}
		if c.Namespace == "" {
			row[0] = "(node)"
		}
		for _, f := range c.Flows {
			row = append(row, fmt.Sprint(f))
		}
		row = append(row, fmt.Sprint(c.Groups), fmt.Sprint(c.Buckets), fmt.Sprint(c.Bytes))
		if budget != nil {
			if c.Budget != nil {
				row = append(row, fmt.Sprint(c.Budget.Used), fmt.Sprint(c.Budget.Refused))
			} else {
				row = append(row, "-", "-")
			}
		}
		if _, err := fmt.Fprintln(tw, strings.Join(row, "\t")+"\t"); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if budget == nil {
		return nil
	}
	for _, r := range budget.Refused() {
		if _, err := fmt.Fprintf(w, "# held back: %s %s/%s: %d flows and buckets (created %s)\n", r.Kind, r.Namespace, r.Name, r.Cost, r.Created.UTC().Format("2006-01-02T15:04:05Z")); err != nil {
			return err
		}
	}
	return nil
}
