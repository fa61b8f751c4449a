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
