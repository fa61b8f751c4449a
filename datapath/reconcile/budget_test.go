package reconcile

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"nodeflow/lib/openflow"
)

// svcState is a Service port's state for the budget tests: flows flows
// (destinations base, base+1, ...) and, when buckets is not 0, a select
// group gid of that many buckets.
func svcState(base, flows int, gid uint32, buckets int) State {
	var st State
	for i := range flows {
		st.Flows = append(st.Flows, dstFlow(0, 100, base+i, openflow.OutputPort(1)))
	}
	if buckets > 0 {
		ports := make([]uint32, buckets)
		for i := range ports {
			ports[i] = uint32(i + 1)
		}
		st.Groups = []openflow.GroupEntry{selectGroup(gid, ports...)}
	}
	return st
}

// budgetObject is one Service of a budget test: its owner on br0, and
// on breth0 when gw is not 0 (that many flows there).
type budgetObject struct {
	name    string
	created time.Time
	flows   int // on br0, each at its own destination
	buckets int
	gw      int
}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// set sets obj's owners in pod (and gw) charged to it; base spaces the
// destinations of different objects.
func (obj budgetObject) set(t *testing.T, pod, gw *Store, base int) {
	t.Helper()
	c := &Charge{Kind: "Service", APIVersion: "v1", Name: obj.name, Created: obj.created}
	st := svcState(base, obj.flows, uint32(base), obj.buckets)
	st.Charge = c
	mustSet(t, pod, "service/team/"+obj.name+":80/TCP", st)
	if obj.gw > 0 {
		g := svcState(base, obj.gw, 0, 0)
		g.Charge = c
		mustSet(t, gw, "service-gateway/team/"+obj.name+":80/TCP", g)
	}
}

// admitted returns the objects whose br0 owner is in pod's desired state
// (not held back), sorted.
func admitted(pod *Store) []string {
	errs := pod.Errors()
	var out []string
	for _, o := range pod.Owners("service/") {
		if errs[o] == nil {
			name, _, _ := strings.Cut(strings.TrimPrefix(o, "service/team/"), ":")
			out = append(out, name)
		}
	}
	return out
}

// TestBudgetHoldsTheNewest: with a budget of 100 flows and buckets, three
// Services of 40 each let the two oldest in and hold the newest back, in
// whatever order their states arrive; the held-back one's flows are not
// desired and Errors says why, naming the budget, the use and the cost.
func TestBudgetHoldsTheNewest(t *testing.T) {
	objs := []budgetObject{
		{name: "a", created: t0, flows: 10, buckets: 30},
		{name: "b", created: t0.Add(time.Second), flows: 10, buckets: 30},
		{name: "c", created: t0.Add(2 * time.Second), flows: 10, buckets: 30},
	}
	orders := [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {1, 0, 2}}
	for _, ord := range orders {
		t.Run(fmt.Sprint(ord), func(t *testing.T) {
			b := NewBudget(100)
			pod := NewStore(StoreOptions{Budget: b})
			for _, i := range ord {
				objs[i].set(t, pod, nil, 100*(i+1))
			}
			if got := admitted(pod); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("admitted %v, want [a b]", got)
			}
			flows, groups, _ := pod.Counts()
			if flows != 20 || groups != 2 {
				t.Errorf("desired: %d flows, %d groups; want a's and b's 20 and 2", flows, groups)
			}
			var be *BudgetError
			err := pod.Errors()["service/team/c:80/TCP"]
			if !errors.As(err, &be) || !errors.Is(err, ErrOverBudget) {
				t.Fatalf("c's error: %v, want a BudgetError", err)
			}
			if be.Cost != 40 || be.Use != 80 || be.Budget != 100 || be.Kind != "Service" || be.Name != "c" || be.Namespace != "team" {
				t.Errorf("c's refusal: %+v", be.Refusal)
			}
			for _, want := range []string{"Service team/c", "needs 40 flows and buckets", "uses 80 of its budget of 100"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("c's error %q lacks %q", err, want)
				}
			}
			if u := b.Spaces()["team"]; u != (SpaceUse{Used: 80, Wanted: 120, Refused: 1}) {
				t.Errorf("space: %+v", u)
			}
			// The namespace's use counts what is desired only.
			if u := pod.NamespaceUse()["team"]; u.Entries() != 80 {
				t.Errorf("namespace use %+v, want 80 entries", u)
			}
		})
	}
}

// TestBudgetReadmits: the held-back Service is let in, flows and all, once
// an older one goes; and an older one arriving later (a restart that
// lists it last) takes precedence over a newer one, as it would have had
// it come first. Each change is reported once the budget reports.
func TestBudgetReadmits(t *testing.T) {
	b := NewBudget(100)
	pod := NewStore(StoreOptions{Budget: b})
	sw := newFakeSwitch()
	a := budgetObject{name: "a", created: t0, flows: 10, buckets: 30}
	bb := budgetObject{name: "b", created: t0.Add(time.Second), flows: 10, buckets: 30}
	c := budgetObject{name: "c", created: t0.Add(2 * time.Second), flows: 10, buckets: 30}
	bb.set(t, pod, nil, 200)
	c.set(t, pod, nil, 300)
	var reports []Refusal
	b.Report(func(rs []Refusal) { reports = append(reports, rs...) })
	if len(reports) != 0 {
		t.Fatalf("reports with everything in: %+v", reports)
	}
	mustSync(t, pod, sw, DiffOptions{})
	if len(sw.flows) != 20 || len(sw.groups) != 2 {
		t.Fatalf("switch: %d flows, %d groups", len(sw.flows), len(sw.groups))
	}

	// a is older than both: c, the newest, makes room.
	a.set(t, pod, nil, 100)
	if got := admitted(pod); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("admitted %v, want [a b]", got)
	}
	if len(reports) != 1 || reports[0].Name != "c" || reports[0].Admitted {
		t.Fatalf("reports: %+v, want c held back", reports)
	}
	mustSync(t, pod, sw, DiffOptions{})
	if len(sw.flows) != 20 || sw.groups[300].ID != 0 || sw.groups[100].ID != 100 {
		t.Fatalf("switch after a: %d flows, groups %v", len(sw.flows), slices.Sorted(func(yield func(uint32) bool) {
			for id := range sw.groups {
				if !yield(id) {
					return
				}
			}
		}))
	}

	// A change of the held-back Service keeps it held back, unreported.
	c.buckets = 20
	c.set(t, pod, nil, 300)
	if len(reports) != 1 {
		t.Fatalf("reports after c changed: %+v", reports)
	}
	// b goes: c is let in again.
	mustSet(t, pod, "service/team/b:80/TCP", State{})
	if got := admitted(pod); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("admitted %v, want [a c]", got)
	}
	if len(reports) != 2 || reports[1].Name != "c" || !reports[1].Admitted {
		t.Fatalf("reports: %+v, want c let in", reports)
	}
	mustSync(t, pod, sw, DiffOptions{})
	if len(sw.flows) != 20 || sw.groups[300].ID != 300 || sw.groups[200].ID != 0 {
		t.Fatalf("switch after b went: %d flows", len(sw.flows))
	}
	if len(pod.Errors()) != 0 {
		t.Errorf("errors: %v", pod.Errors())
	}
}

// TestBudgetNeverEvictsOlder: a newer Service never takes an older one's
// room, however small; an older Service that grows holds back newer ones
// (the newest first), and one that alone exceeds the budget is held back
// itself while smaller ones fit.
func TestBudgetNeverEvictsOlder(t *testing.T) {
	b := NewBudget(100)
	pod := NewStore(StoreOptions{Budget: b})
	a := budgetObject{name: "a", created: t0, flows: 10, buckets: 80}
	a.set(t, pod, nil, 100)
	d := budgetObject{name: "d", created: t0.Add(time.Hour), flows: 11}
	d.set(t, pod, nil, 400)
	if got := admitted(pod); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("admitted %v, want [a]", got)
	}
	// a shrinks: d fits.
	a.buckets = 40
	a.set(t, pod, nil, 100)
	bb := budgetObject{name: "b", created: t0.Add(time.Minute), flows: 10, buckets: 20}
	bb.set(t, pod, nil, 200)
	if got := admitted(pod); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("admitted %v, want [a b d]", got)
	}
	// a grows back: d, the newest, goes first; b still fits.
	a.buckets = 50
	a.set(t, pod, nil, 100)
	if got := admitted(pod); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("admitted %v, want [a b]", got)
	}
	// a alone past the budget: held back; b and d fit.
	a.buckets = 200
	a.set(t, pod, nil, 100)
	if got := admitted(pod); !slices.Equal(got, []string{"b", "d"}) {
		t.Fatalf("admitted %v, want [b d]", got)
	}
}

// TestBudgetObjectAcrossStores: a Service's owners on both bridges are one
// object: its cost is their sum, and they are held back and let in
// together.
func TestBudgetObjectAcrossStores(t *testing.T) {
	b := NewBudget(100)
	pod, gw := NewStore(StoreOptions{Budget: b}), NewStore(StoreOptions{Budget: b})
	a := budgetObject{name: "a", created: t0, flows: 10, buckets: 30, gw: 20}
	a.set(t, pod, gw, 100)
	c := budgetObject{name: "c", created: t0.Add(time.Second), flows: 10, buckets: 20, gw: 20}
	c.set(t, pod, gw, 300)
	// a: 60, c: 50.
	if got := admitted(pod); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("admitted %v, want [a]", got)
	}
	if err := gw.Errors()["service-gateway/team/c:80/TCP"]; !errors.Is(err, ErrOverBudget) {
		t.Fatalf("c's breth0 owner: %v, want held back", err)
	}
	if f, _, _ := gw.Counts(); f != 20 {
		t.Fatalf("breth0 desires %d flows, want a's 20", f)
	}
	// a's breth0 owner goes: 40 + 50 fit.
	mustSet(t, gw, "service-gateway/team/a:80/TCP", State{})
	if len(pod.Errors())+len(gw.Errors()) != 0 {
		t.Fatalf("errors: %v %v", pod.Errors(), gw.Errors())
	}
	if f, _, _ := gw.Counts(); f != 20 {
		t.Fatalf("breth0 desires %d flows, want c's 20", f)
	}
}

// TestBudgetConflictAfterRefusal: an owner held back does not hold its
// flows; another owner may take one, and the held-back owner stays out,
// with the conflict as its error, when the budget lets it in again.
func TestBudgetConflictAfterRefusal(t *testing.T) {
	b := NewBudget(30)
	pod := NewStore(StoreOptions{Budget: b})
	a := budgetObject{name: "a", created: t0, flows: 20}
	a.set(t, pod, nil, 100)
	c := budgetObject{name: "c", created: t0.Add(time.Second), flows: 20}
	c.set(t, pod, nil, 300)
	// Someone else (not charged) takes c's first destination.
	mustSet(t, pod, "service/other/x:80/TCP", State{Flows: []openflow.Flow{dstFlow(0, 100, 300, openflow.OutputPort(2))}})
	mustSet(t, pod, "service/team/a:80/TCP", State{})
	err := pod.Errors()["service/team/c:80/TCP"]
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("c's error: %v, want the conflict", err)
	}
	if f, _, _ := pod.Counts(); f != 1 {
		t.Fatalf("%d flows desired, want x's one", f)
	}
}

// TestChargeNeedsANamespace: a charge on a node-wide owner, or without the
// object's name, is invalid.
func TestChargeNeedsANamespace(t *testing.T) {
	pod := NewStore(StoreOptions{Budget: NewBudget(10)})
	st := svcState(1, 1, 0, 0)
	st.Charge = &Charge{Kind: "Service", Name: "x"}
	if err := pod.Set("service/_cidrs", st); !errors.Is(err, ErrInvalid) {
		t.Errorf("charged node-wide owner: %v", err)
	}
	st.Charge = &Charge{Kind: "Service"}
	if err := pod.Set("service/team/x:80/TCP", st); !errors.Is(err, ErrInvalid) {
		t.Errorf("charge without a name: %v", err)
	}
}

// TestNamespaceUse: each owner's entries count for its namespace (the
// node's own under ""), and a namespace that wants nothing more is gone.
func TestNamespaceUse(t *testing.T) {
	s := NewStore(StoreOptions{})
	mustSet(t, s, "service/team-a/web:80/TCP", svcState(100, 3, 7, 5))
	mustSet(t, s, "pod/team-a/p", svcState(200, 2, 0, 0))
	mustSet(t, s, "service/team-b/web:80/TCP", svcState(300, 1, 8, 2))
	mustSet(t, s, "service/_cidrs", svcState(400, 4, 0, 0))
	use := s.NamespaceUse()
	a, bb, node := use["team-a"], use["team-b"], use[""]
	if a.Flows != 5 || a.Groups != 1 || a.Buckets != 5 || bb.Flows != 1 || bb.Buckets != 2 || node.Flows != 4 || len(use) != 3 {
		t.Fatalf("use: %+v", use)
	}
	if a.Bytes <= bb.Bytes || bb.Bytes <= 0 {
		t.Errorf("bytes: team-a %d, team-b %d", a.Bytes, bb.Bytes)
	}
	if tot := s.Total(); tot.Flows != 10 || tot.Buckets != 7 || tot.Bytes != a.Bytes+bb.Bytes+node.Bytes {
		t.Errorf("total %+v", tot)
	}
	mustSet(t, s, "service/team-b/web:80/TCP", State{})
	if _, ok := s.NamespaceUse()["team-b"]; ok {
		t.Errorf("team-b still listed: %+v", s.NamespaceUse())
	}
}

// TestWriteNamespaces: the table lists the namespaces most costly first,
// the node's own as "(node)", and the objects held back.
func TestWriteNamespaces(t *testing.T) {
	b := NewBudget(100)
	pod, gw := NewStore(StoreOptions{Budget: b}), NewStore(StoreOptions{Budget: b})
	budgetObject{name: "a", created: t0, flows: 10, buckets: 30, gw: 2}.set(t, pod, gw, 100)
	budgetObject{name: "c", created: t0.Add(time.Second), flows: 10, buckets: 70}.set(t, pod, gw, 300)
	mustSet(t, pod, "service/small/x:80/TCP", svcState(500, 1, 0, 0))
	mustSet(t, pod, "service/_cidrs", svcState(600, 3, 0, 0))
	var sb strings.Builder
	if err := WriteNamespaces(&sb, []NamedStore{{"br0", pod}, {"breth0", gw}}); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	t.Log("\n" + out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fields := func(i int) []string { return strings.Fields(lines[i]) }
	if h := fields(0); !slices.Equal(h[:4], []string{"NAMESPACE", "FLOWS", "br0", "FLOWS"}) {
		t.Fatalf("header %q", lines[0])
	}
	if r := fields(1); r[0] != "team" || r[1] != "10" || r[2] != "2" || r[3] != "1" || r[4] != "30" || r[6] != "42" || r[7] != "1" {
		t.Errorf("team row %q", lines[1])
	}
	if r := fields(2); r[0] != "(node)" || r[1] != "3" {
		t.Errorf("node row %q", lines[2])
	}
	if r := fields(3); r[0] != "small" || r[1] != "1" || r[6] != "-" {
		t.Errorf("small row %q", lines[3])
	}
	if !strings.Contains(lines[4], "# held back: Service team/c: 80 flows and buckets") {
		t.Errorf("held back line %q", lines[4])
	}
}

// TestBudgetIsAFunctionOfTheObjects applies random changes to random
// Services (some created in the same second) and checks, after each, that
// the Services let in are those the rule gives for the Services as they
// stand (oldest first, each if it fits), whatever came before: a restarted
// agent, or another node, that sees the same Services holds back the same.
func TestBudgetIsAFunctionOfTheObjects(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const limit = 100
	for run := range 50 {
		b := NewBudget(limit)
		pod := NewStore(StoreOptions{Budget: b})
		live := map[int]budgetObject{}
		for step := range 40 {
			i := rng.IntN(8)
			if _, ok := live[i]; ok && rng.IntN(4) == 0 {
				mustSet(t, pod, fmt.Sprintf("service/team/s%d:80/TCP", i), State{})
				delete(live, i)
			} else {
				obj := budgetObject{name: fmt.Sprintf("s%d", i), created: t0.Add(time.Duration(i/2) * time.Second),
					flows: 1 + rng.IntN(10), buckets: rng.IntN(50)}
				obj.set(t, pod, nil, 100*(i+1))
				live[i] = obj
			}
			// The rule, from the objects alone.
			var objs []budgetObject
			for _, o := range live {
				objs = append(objs, o)
			}
			slices.SortFunc(objs, func(x, y budgetObject) int {
				if c := x.created.Compare(y.created); c != 0 {
					return c
				}
				return strings.Compare(x.name, y.name)
			})
			var want []string
			used := 0
			for _, o := range objs {
				if c := o.flows + o.buckets; used+c <= limit {
					used += c
					want = append(want, o.name)
				}
			}
			slices.Sort(want)
			if got := admitted(pod); !slices.Equal(got, want) {
				t.Fatalf("run %d step %d: admitted %v, want %v", run, step, got, want)
			}
			if u := pod.NamespaceUse()["team"]; u.Entries() != used {
				t.Fatalf("run %d step %d: desired %d entries, want %d", run, step, u.Entries(), used)
			}
		}
	}
}
