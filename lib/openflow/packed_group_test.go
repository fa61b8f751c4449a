package openflow

import (
	"errors"
	"fmt"
	"testing"
)

// packedGroupCases are groups of the shapes nodeflow installs, and edges.
func packedGroupCases() []GroupEntry {
	out1 := []Action{Output{Port: 1}}
	var big GroupEntry
	big.ID, big.Type = 12, GroupTypeSelect
	for i := range 200 {
		big.Buckets = append(big.Buckets, Bucket{ID: uint32(i), Weight: 1, Actions: []Action{
			CT{Commit: true, Zone: 7, RecircTable: 0xff, Actions: []Action{NAT{Dst: true, MinAddr: otIP(fmt.Sprintf("10.1.%d.%d", i/250, 1+i%250)), MinPort: 80}}},
		}})
	}
	return []GroupEntry{
		otServiceGroup(),
		{ID: 7, Type: GroupTypeSelect},
		{ID: 4, Type: GroupTypeFastFailover, Buckets: []Bucket{{ID: 0, WatchPort: 1, Actions: out1}, {ID: 1, WatchPort: 2, WatchGroup: 3, Actions: []Action{Output{Port: 2}}}}},
		{ID: 5, Type: GroupTypeSelect, SelectionMethod: "dp_hash", SelectionParam: 0x100000007, Buckets: []Bucket{{Weight: 1, Actions: out1}}},
		big,
	}
}

// TestPackedGroup packs groups, checks their text after unpacking, and
// that their group mods encode to the bytes of the GroupEntry's own, in
// OpenFlow 1.3 and 1.5, split the same way when too big for one message.
func TestPackedGroup(t *testing.T) {
	for _, g := range packedGroupCases() {
		p, err := PackGroup(&g)
		if err != nil {
			t.Fatalf("pack group %d: %v", g.ID, err)
		}
		if p.String() != g.String() {
			t.Errorf("round trip:\n got %s\nwant %s", p.String(), g.String())
		}
		if b, err := Marshal(Version15, 0, g.AddMod()); err != nil || len(b) != p.MessageLen() {
			t.Errorf("group %d: MessageLen %d, the encoded group mod %d bytes (%v)", g.ID, p.MessageLen(), len(b), err)
		}
		scratch := make([]byte, 0, 16)
		if q, err := PackGroupInto(scratch, &g); err != nil || !q.Equal(&p) {
			t.Errorf("group %d: PackGroupInto gives %s (%v), PackGroup %s", g.ID, q.String(), err, p.String())
		}
		for _, v := range []Version{Version13, Version15} {
			for _, cmd := range []GroupModCommand{GroupAddOrModify, GroupModify, GroupDelete} {
				if v == Version13 && (cmd == GroupAddOrModify || g.SelectionMethod != "" || len(g.Buckets) > 50) {
					continue
				}
				want, err := g.Mods(cmd, v, 0)
				if err != nil {
					t.Fatal(err)
				}
				got, err := p.Mods(cmd, v, 0)
				if err != nil {
					t.Fatal(err)
				}
				// Split in several messages.
				want2, err := g.Mods(cmd, v, 4000)
				if err != nil {
					t.Fatal(err)
				}
				got2, err := p.Mods(cmd, v, 4000)
				if err != nil {
					t.Fatal(err)
				}
				want, got = append(want, want2...), append(got, got2...)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("group %d %s %s: %d messages, want %d", g.ID, v, cmd, len(got), len(want))
				}
				for i := range got {
					otDiffHex(t, fmt.Sprintf("group %d %s %s message %d", g.ID, v, cmd, i), otMarshal(t, v, got[i]), otMarshal(t, v, want[i]))
				}
			}
		}
	}
	var z PackedGroup
	if _, err := z.Unpack(); !errors.Is(err, ErrMalformed) {
		t.Errorf("unpack of the zero group: %v", err)
	}
	if _, err := Marshal(Version15, 1, &PackedGroupMod{Command: GroupAdd, Group: &z}); err == nil {
		t.Error("group mod of the zero PackedGroup encoded")
	}
	bad := GroupEntry{ID: 3, Type: GroupTypeAll, Buckets: []Bucket{{ID: 1}, {ID: 1}}}
	if _, err := PackGroup(&bad); err == nil {
		t.Error("a group with duplicate bucket ids packed")
	}
	huge := packedGroupCases()[4]
	for len(huge.Buckets) < 2000 {
		b := huge.Buckets[len(huge.Buckets)%200]
		b.ID = uint32(len(huge.Buckets))
		huge.Buckets = append(huge.Buckets, b)
	}
	if _, err := PackGroup(&huge); !errors.Is(err, ErrTooLong) {
		t.Errorf("a group past one message packed: %v, want ErrTooLong", err)
	}
}

// TestGroupDescInPlace reads a group desc reply in place: each entry
// decodes to the group encoded, and a packed group is the same as its own
// entry and as no other, nor as its entry with one byte changed.
func TestGroupDescInPlace(t *testing.T) {
	groups := packedGroupCases()
	body, err := appendGroupDescs(nil, Version15, groups)
	if err != nil {
		t.Fatal(err)
	}
	var entries [][]byte
	err = EachGroupDesc(body, Version15, func(i int, id uint32, entry []byte) error {
		if id != groups[i].ID {
			t.Errorf("entry %d: group %d, want %d", i, id, groups[i].ID)
		}
		g, err := DecodeGroupDesc(entry, Version15)
		if err != nil {
			return err
		}
		if g.String() != groups[i].String() {
			t.Errorf("entry %d decoded:\n got %s\nwant %s", i, g.String(), groups[i].String())
		}
		entries = append(entries, entry)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(groups) {
		t.Fatalf("%d entries, want %d", len(entries), len(groups))
	}
	for i := range groups {
		p, err := PackGroup(&groups[i])
		if err != nil {
			t.Fatal(err)
		}
		for j, e := range entries {
			if got := p.SameAsDesc(e, Version15); got != (i == j) {
				t.Errorf("group %d same as entry %d: %v", groups[i].ID, j, got)
			}
		}
		if p.SameAsDesc(entries[i], Version13) {
			t.Errorf("group %d same as its entry read as OpenFlow 1.3", groups[i].ID)
		}
		for _, at := range []int{2, 4, 9, len(entries[i]) - 1} {
			if at >= len(entries[i]) || (at == len(entries[i])-1 && len(entries[i]) == groupDesc15Len) {
				continue
			}
			changed := append([]byte(nil), entries[i]...)
			changed[at] ^= 1
			if p.SameAsDesc(changed, Version15) {
				t.Errorf("group %d same as its entry with byte %d changed", groups[i].ID, at)
			}
		}
	}
	// Framing errors name the entry.
	if err := EachGroupDesc(body[:len(body)-1], Version15, func(int, uint32, []byte) error { return nil }); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated reply: %v, want ErrMalformed", err)
	}
}

// otGroupDescInPlace checks that a group desc reply read in place agrees
// with its decoding: the same entries, each decoding alike.
func otGroupDescInPlace(t *testing.T, r *MultipartReply) {
	t.Helper()
	all, allErr := r.GroupDesc()
	if errors.Is(allErr, ErrUnsupported) {
		return // a version without group desc replies
	}
	n := 0
	err := EachGroupDesc(r.Body, r.Version, func(i int, id uint32, entry []byte) error {
		g, err := DecodeGroupDesc(entry, r.Version)
		if err != nil {
			return err
		}
		if allErr == nil && (i >= len(all) || g.String() != all[i].String() || id != g.ID) {
			t.Errorf("entry %d read in place differs from the reply's decoding", i)
		}
		if p, err := PackGroup(&g); err == nil && r.Version == Version15 {
			_ = p.SameAsDesc(entry, r.Version)
		}
		n++
		return nil
	})
	if (err == nil) != (allErr == nil) {
		t.Errorf("in place: %v; decoded whole: %v", err, allErr)
	}
	if err == nil && n != len(all) {
		t.Errorf("%d entries in place, %d decoded", n, len(all))
	}
}
