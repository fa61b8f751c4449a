package namespaceid

import (
	"errors"
	"fmt"
	"testing"
)

// Names with known homes, found by hashing "team-N", "app-N" and "edge-N"
// for growing N; TestCandidate checks them, so they cannot go stale.
var (
	// sameHome share the home id 6189508.
	sameHome = []string{"team-44685", "team-232056", "team-299504", "team-395821"}
	// home42 has the home id 42.
	home42 = "app-5445960"
	// homeLast has the home id LastID.
	homeLast = "edge-1613089"
)

func TestRanges(t *testing.T) {
	if FirstID != 1 || LastID != 1<<23-1 || FirstVNI != LastID+1 || LastVNI != 1<<24-1 {
		t.Fatalf("ranges: ids %#x..%#x, VNIs %#x..%#x", FirstID, LastID, FirstVNI, LastVNI)
	}
	if IDCount != 0x7fffff {
		t.Fatalf("IDCount = %#x", IDCount)
	}
	for _, id := range []uint32{None, FirstVNI, LastVNI, 1 << 24} {
		if ValidID(id) {
			t.Errorf("ValidID(%#x) = true", id)
		}
	}
	for _, id := range []uint32{FirstID, 4242, LastID} {
		if !ValidID(id) {
			t.Errorf("ValidID(%#x) = false", id)
		}
	}
}

func TestCandidate(t *testing.T) {
	tests := []struct {
		name    string
		ns      string
		attempt uint32
		want    uint32
	}{
		{"home", sameHome[0], 0, 6189508},
		{"same home, other name", sameHome[3], 0, 6189508},
		{"next probe", sameHome[0], 1, 6189509},
		{"third probe", sameHome[2], 2, 6189510},
		{"home 42", home42, 0, 42},
		{"home at the end of the range", homeLast, 0, LastID},
		{"wraps to the first id", homeLast, 1, FirstID},
		{"after the wrap", homeLast, 2, 2},
		{"a full turn is the home again", home42, IDCount, 42},
		{"a full turn plus one", home42, IDCount + 1, 43},
		{"largest attempt", homeLast, ^uint32(0), Candidate(homeLast, ^uint32(0)%IDCount)},
		{"empty name has a home too", "", 0, Candidate("", IDCount)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Candidate(tt.ns, tt.attempt); got != tt.want {
				t.Errorf("Candidate(%q, %d) = %d, want %d", tt.ns, tt.attempt, got, tt.want)
			}
		})
	}
	t.Run("always a namespace id", func(t *testing.T) {
		for i := range 20000 {
			ns := fmt.Sprintf("ns-%d", i)
			for _, a := range []uint32{0, 1, uint32(i), IDCount - 1, ^uint32(0)} {
				if c := Candidate(ns, a); !ValidID(c) {
					t.Fatalf("Candidate(%q, %d) = %#x: not a namespace id", ns, a, c)
				}
			}
		}
	})
	t.Run("consecutive attempts are consecutive ids", func(t *testing.T) {
		for a := range uint32(1000) {
			c0, c1 := Candidate("web", a), Candidate("web", a+1)
			if c1 != c0+1 && !(c0 == LastID && c1 == FirstID) {
				t.Fatalf("attempt %d: %d then %d", a, c0, c1)
			}
		}
	})
}

func TestChoose(t *testing.T) {
	set := func(ids ...uint32) func(uint32) bool {
		m := map[uint32]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return func(id uint32) bool { return m[id] }
	}
	tests := []struct {
		name        string
		ns          string
		from        uint32
		taken       func(uint32) bool
		want, wantA uint32
		wantErr     error
	}{
		{"nothing taken: the home", home42, 0, set(), 42, 0, nil},
		{"home taken", home42, 0, set(42), 43, 1, nil},
		{"a run taken", home42, 0, set(42, 43, 44, 46), 45, 3, nil},
		{"others' ids do not matter", home42, 0, set(41, 1, LastID), 42, 0, nil},
		{"wraps past the end", homeLast, 0, set(LastID, 1, 2), 3, 3, nil},
		{"from an attempt on", home42, 2, set(), 44, 2, nil},
		{"from an attempt on, taken", home42, 2, set(44), 45, 3, nil},
		{"only one id free", home42, 0, func(id uint32) bool { return id != 41 }, 41, IDCount - 1, nil},
		{"everything taken", home42, 0, func(uint32) bool { return true }, 0, 0, ErrExhausted},
		{"from past the last attempt", home42, IDCount, set(), 0, 0, ErrExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, a, err := Choose(tt.ns, tt.from, tt.taken)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Choose: error %v, want %v", err, tt.wantErr)
			}
			if id != tt.want || a != tt.wantA {
				t.Errorf("Choose = id %d at attempt %d, want %d at %d", id, a, tt.want, tt.wantA)
			}
			if err == nil && id != Candidate(tt.ns, a) {
				t.Errorf("id %d is not Candidate(%q, %d) = %d", id, tt.ns, a, Candidate(tt.ns, a))
			}
		})
	}
}

func TestParseID(t *testing.T) {
	tests := []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"1", 1, true},
		{"42", 42, true},
		{"8388607", LastID, true},
		{"8388608", 0, false}, // the first VNI
		{"16777215", 0, false},
		{"0", 0, false},
		{"007", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{" 1", 0, false},
		{"abc", 0, false},
		{"99999999999999999999", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseID(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParseID(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
			if tt.ok && FormatID(got) != tt.in {
				t.Errorf("FormatID(%d) = %q", got, FormatID(got))
			}
		})
	}
}

func TestCompareRV(t *testing.T) {
	tests := []struct {
		a, b string
		want int
		ok   bool
	}{
		{"0", "0", 0, true},
		{"0", "5", -1, true},
		{"5", "0", 1, true},
		{"9", "10", -1, true},
		{"100", "99", 1, true},
		{"42", "42", 0, true},
		{"", "5", 0, false},
		{"0", "x", 0, false},
		{"x", "0", 0, false},
		{"05", "6", 0, false},
	}
	for _, tt := range tests {
		got, err := compareRV(tt.a, tt.b)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("compareRV(%q, %q) = %d, %v; want %d, ok %v", tt.a, tt.b, got, err, tt.want, tt.ok)
		}
	}
}
