package reconcile

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// rootsOf returns the owners of each root unit of us, each sorted, the
// units in name order.
func rootsOf(us *unitSet) [][]string {
	var out [][]string
	us.roots(func(r *unit) {
		out = append(out, slices.Sorted(slices.Values(r.owners)))
	})
	slices.SortFunc(out, func(a, b []string) int { return slices.Compare(a, b) })
	return out
}

func TestUnitSetOf(t *testing.T) {
	us := newUnitSet()
	a := us.of(&owner{name: "a"})
	if again := us.of(&owner{name: "a"}); again != a {
		t.Error("a second *owner named a has another unit; want a's (units are keyed by name)")
	}
	if us.named("a") != a {
		t.Error(`named("a") is not of(a)`)
	}
	f := us.of(nil)
	if f.name != foreignOwner || !slices.Equal(f.owners, []string{foreignOwner}) {
		t.Errorf("of(nil) = %q %v, want the unit of %s", f.name, f.owners, foreignOwner)
	}
	if f == a {
		t.Error("of(nil) is a's unit")
	}
	if a.batch != -1 {
		t.Errorf("new unit's batch = %d, want -1", a.batch)
	}
}

func TestUnitSetUnion(t *testing.T) {
	us := newUnitSet()
	a, b, c := us.named("a"), us.named("b"), us.named("c")
	a.size, b.size, c.size = 1, 2, 4
	a.groupsBefore = []groupChange{{id: 1}}
	b.groupsAfter = []groupChange{{id: 2}}
	c.meters = []meterChange{{id: 3}}
	a.flowDeletes, b.flowUpdates, c.flowUpdates = 1, 2, 3

	ab := us.union(b, a)
	if ab != b {
		t.Error("union of two single units: want the first one the root")
	}
	if a.root() != b || us.named("a") != b {
		t.Error("a is not in b's unit after union(b, a)")
	}
	if ab.name != "a" {
		t.Errorf("merged name = %q, want the smallest owner name a", ab.name)
	}
	if again := us.union(a, b); again != ab {
		t.Error("union of a unit with itself changed the root")
	}
	// c joins: the root with more owners absorbs the other, whichever
	// comes first.
	abc := us.union(c, a)
	if abc != ab || c.root() != ab {
		t.Error("union(c, a): want a's two-owner unit to absorb c")
	}
	if got := rootsOf(us); !slices.Equal(got[0], []string{"a", "b", "c"}) || len(got) != 1 {
		t.Errorf("roots = %v, want one unit [a b c]", got)
	}
	if abc.size != 7 || abc.flowDeletes != 1 || abc.flowUpdates != 5 || abc.changes() != 8 {
		t.Errorf("merged size %d, flow deletes %d, updates %d, changes %d; want 7, 1, 5, 8",
			abc.size, abc.flowDeletes, abc.flowUpdates, abc.changes())
	}
	if len(abc.groupsBefore) != 1 || len(abc.groupsAfter) != 1 || len(abc.meters) != 1 {
		t.Errorf("merged changes: %d groups before, %d after, %d meters; want 1 each",
			len(abc.groupsBefore), len(abc.groupsAfter), len(abc.meters))
	}
	for _, u := range []*unit{a, c} {
		if u.owners != nil || u.groupsBefore != nil || u.groupsAfter != nil || u.meters != nil {
			t.Errorf("absorbed unit %p still holds owners or changes", u)
		}
	}
}

func TestUnitBlock(t *testing.T) {
	us := newUnitSet()
	a, b, c := us.named("a"), us.named("b"), us.named("c")
	first, second := errors.New("first"), errors.New("second")
	b.block(first)
	b.block(second)
	if b.err != first {
		t.Errorf("err = %v after two blocks, want the first", b.err)
	}
	// A blocked unit that is absorbed blocks the merged unit.
	ab := us.union(a, b)
	if ab != a || ab.err != first {
		t.Errorf("union(a, blocked b): root %p err %v, want a with the first error", ab, ab.err)
	}
	// Blocking through a child blocks the root; the root's own error
	// stands over an absorbed one.
	c.block(second)
	us.union(ab, c)
	if ab.err != first {
		t.Errorf("err = %v, want the root's own (first)", ab.err)
	}
	d := us.named("d")
	us.union(ab, d)
	d.block(second)
	if d.err != nil || ab.err != first {
		t.Errorf("block on child d: child err %v, root err %v; want nil and first", d.err, ab.err)
	}
}

// TestUnitSetRandom checks the union-find against a simple partition:
// after random unions, two owners share a root exactly when the
// partition puts them together, and every root holds its class's owners
// and sizes.
func TestUnitSetRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		const n = 40
		us := newUnitSet()
		class := make([]int, n) // owner i's class: the smallest owner in it
		for i := range class {
			class[i] = i
			us.named(fmt.Sprintf("o%02d", i)).size = i
		}
		for range rng.IntN(2 * n) {
			i, j := rng.IntN(n), rng.IntN(n)
			us.union(us.named(fmt.Sprintf("o%02d", i)), us.named(fmt.Sprintf("o%02d", j)))
			ci, cj := class[i], class[j]
			lo, hi := min(ci, cj), max(ci, cj)
			for k := range class {
				if class[k] == hi {
					class[k] = lo
				}
			}
		}
		sizes := map[int]int{}
		for i, c := range class {
			sizes[c] += i
		}
		for i := range n {
			ri := us.named(fmt.Sprintf("o%02d", i))
			if want := fmt.Sprintf("o%02d", class[i]); ri.name != want {
				t.Fatalf("round %d: o%02d's unit is named %s, want %s", round, i, ri.name, want)
			}
			if ri.size != sizes[class[i]] {
				t.Fatalf("round %d: o%02d's unit has size %d, want %d", round, i, ri.size, sizes[class[i]])
			}
			for j := range n {
				same := us.named(fmt.Sprintf("o%02d", j)) == ri
				if same != (class[i] == class[j]) {
					t.Fatalf("round %d: o%02d and o%02d share a unit: %v, want %v", round, i, j, same, !same)
				}
			}
		}
		total := 0
		for _, owners := range rootsOf(us) {
			total += len(owners)
		}
		if total != n {
			t.Fatalf("round %d: roots hold %d owners, want %d", round, total, n)
		}
	}
}
