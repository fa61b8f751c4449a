package openflow

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// otSelectionFields is fields(ip_src,ip_dst,tcp_src,tcp_dst): each field's
// value is the all-ones mask.
func otSelectionFields() []Field {
	return []Field{
		{Class: 0x8000, Field: 11, Value: []byte{0xff, 0xff, 0xff, 0xff}},
		{Class: 0x8000, Field: 12, Value: []byte{0xff, 0xff, 0xff, 0xff}},
		{Class: 0x8000, Field: 13, Value: []byte{0xff, 0xff}},
		{Class: 0x8000, Field: 14, Value: []byte{0xff, 0xff}},
	}
}

// otServiceGroup is a select group as nodeflow builds one per service.
func otServiceGroup() GroupEntry {
	return GroupEntry{
		ID: 2, Type: GroupTypeSelect,
		SelectionMethod: "hash", SelectionFields: otSelectionFields(),
		Buckets: []Bucket{
			{ID: 0, Weight: 5, Actions: []Action{CT{Commit: true, Zone: 7, RecircTable: 0xff, Actions: []Action{NAT{Dst: true, MinAddr: otIP("10.0.0.2"), MinPort: 80}}}}},
			{ID: 7, Weight: 1, Actions: []Action{Output{Port: 2}}},
		},
	}
}

func TestGroupModMatchesOVS(t *testing.T) {
	otNeedOfctl(t)
	out1 := []Action{Output{Port: 1}}
	out2 := []Action{Output{Port: 2}}
	tests := []struct {
		name  string
		v     Version
		group GroupEntry
		text  string
	}{
		{"select hash fields, OF1.5", Version15, otServiceGroup(),
			"group_id=2,type=select,selection_method=hash,fields(ip_src,ip_dst,tcp_src,tcp_dst),bucket=bucket_id:0,weight:5,actions=ct(commit,zone=7,nat(dst=10.0.0.2:80)),bucket=bucket_id:7,actions=output:2"},
		{"select dp_hash param, OF1.5", Version15, GroupEntry{ID: 3, Type: GroupTypeSelect, SelectionMethod: "dp_hash", SelectionParam: 7,
			Buckets: []Bucket{{Weight: 1, Actions: out1}}},
			"group_id=3,type=select,selection_method=dp_hash,selection_method_param=7,bucket=bucket_id:0,actions=output:1"},
		{"select masked fields, OF1.5", Version15, GroupEntry{ID: 6, Type: GroupTypeSelect, SelectionMethod: "hash", SelectionParam: 9,
			SelectionFields: []Field{
				{Class: 0x8000, Field: 3, Value: []byte{0xff, 0xff, 0xff, 0, 0, 0}},
				{Class: 0x8000, Field: 11, Value: []byte{0xff, 0xff, 0, 0}},
			},
			Buckets: []Bucket{{Weight: 1, Actions: out1}}},
			"group_id=6,type=select,selection_method=hash,selection_method_param=9,fields(eth_dst=ff:ff:ff:00:00:00,ip_src=255.255.0.0),bucket=output:1"},
		{"all, OF1.5", Version15, GroupEntry{ID: 1, Type: GroupTypeAll, Buckets: []Bucket{{ID: 0, Actions: out1}, {ID: 1, Actions: out2}}},
			"group_id=1,type=all,bucket=output:1,bucket=output:2"},
		{"fast failover watches, OF1.5", Version15, GroupEntry{ID: 4, Type: GroupTypeFastFailover, Buckets: []Bucket{
			{ID: 0, WatchPort: 1, Actions: out1}, {ID: 1, WatchPort: 2, WatchGroup: 3, Actions: out2}}},
			"group_id=4,type=ff,bucket=watch_port:1,output:1,bucket=watch_port:2,watch_group:3,output:2"},
		{"indirect, OF1.5", Version15, GroupEntry{ID: 3, Type: GroupTypeIndirect, Buckets: []Bucket{{Actions: out1}}},
			"group_id=3,type=indirect,bucket=output:1"},
		{"select no buckets, OF1.5", Version15, GroupEntry{ID: 7, Type: GroupTypeSelect}, "group_id=7,type=select"},
		{"all, OF1.3", Version13, GroupEntry{ID: 1, Type: GroupTypeAll, Buckets: []Bucket{{ID: 0, Actions: out1}, {ID: 1, Actions: out2}}},
			"group_id=1,type=all,bucket=output:1,bucket=output:2"},
		{"select weights, OF1.3", Version13, GroupEntry{ID: 2, Type: GroupTypeSelect, Buckets: []Bucket{
			{ID: 0, Weight: 50, Actions: out1}, {ID: 1, Weight: 50, Actions: out2}}},
			"group_id=2,type=select,bucket=weight:50,actions=output:1,bucket=weight:50,actions=output:2"},
		{"fast failover, OF1.3", Version13, GroupEntry{ID: 4, Type: GroupTypeFastFailover, Buckets: []Bucket{
			{ID: 0, WatchPort: 1, Actions: out1}, {ID: 1, WatchPort: 2, Actions: out2}}},
			"group_id=4,type=ff,bucket=watch_port:1,output:1,bucket=watch_port:2,output:2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, printed := otParse(t, "parse-group", tc.v, tc.text)
			got := otMarshal(t, tc.v, tc.group.AddMod())
			otDiffHex(t, tc.text, got, want)
			back := otUnmarshal[*GroupMod](t, want)
			otDiffHex(t, "decoded and re-encoded", otMarshal(t, tc.v, back), want)
			if tc.v == Version15 {
				// ovs-ofctl prints " ADD <group>" on the line after the header.
				if w := "ADD " + back.Group().String(); !strings.Contains(printed, w) {
					t.Errorf("ovs-ofctl printed %q, want %q", printed, w)
				}
			}
		})
	}
}

// TestGroupModBucketCommands checks the OF1.5-only commands with ofp-print.
func TestGroupModBucketCommands(t *testing.T) {
	tests := []struct {
		name string
		mod  *GroupMod
		want string
	}{
		{"insert first", &GroupMod{Command: GroupInsertBucket, Type: GroupTypeSelect, GroupID: 3, CommandBucketID: BucketFirst,
			Buckets: []Bucket{{ID: 5, Weight: 1, Actions: []Action{Output{Port: 1}}}}},
			"INSERT_BUCKET command_bucket_id:first,group_id=3,bucket=bucket_id:5,actions=output:1"},
		{"insert last", &GroupMod{Command: GroupInsertBucket, Type: GroupTypeSelect, GroupID: 3, CommandBucketID: BucketLast,
			Buckets: []Bucket{{ID: 6, Weight: 2, Actions: []Action{Output{Port: 1}}}}},
			"INSERT_BUCKET command_bucket_id:last,group_id=3,bucket=bucket_id:6,weight:2,actions=output:1"},
		{"remove one", &GroupMod{Command: GroupRemoveBucket, Type: GroupTypeSelect, GroupID: 3, CommandBucketID: 5},
			"REMOVE_BUCKET command_bucket_id:5,group_id=3"},
		{"remove all", &GroupMod{Command: GroupRemoveBucket, Type: GroupTypeSelect, GroupID: 3, CommandBucketID: BucketAll},
			"REMOVE_BUCKET command_bucket_id:all,group_id=3"},
		{"delete", GroupEntry{ID: 3, Type: GroupTypeAll, Buckets: []Bucket{{Actions: []Action{Output{Port: 1}}}}}.DeleteMod(),
			"DEL group_id=3,type=all"},
		{"delete all", &GroupMod{Command: GroupDelete, GroupID: GroupAll}, "DEL group_id=4294967292,type=all"},
		{"add or modify", &GroupMod{Command: GroupAddOrModify, Type: GroupTypeIndirect, GroupID: 9, Buckets: []Bucket{{Actions: []Action{Output{Port: 1}}}}},
			"ADD_OR_MOD group_id=9,type=indirect,bucket=bucket_id:0,actions=output:1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := otMarshal(t, Version15, tc.mod)
			if got := otOfpPrint(t, b); got != tc.want {
				t.Errorf("ofp-print:\n got %q\nwant %q", got, tc.want)
			}
			if got := tc.mod.String(); got != tc.want {
				t.Errorf("String():\n got %q\nwant %q", got, tc.want)
			}
			back := otUnmarshal[*GroupMod](t, b)
			otDiffHex(t, "re-encoded", otMarshal(t, Version15, back), b)
		})
	}
}

func TestGroupModErrors(t *testing.T) {
	encode := []struct {
		name string
		v    Version
		mod  *GroupMod
		want error
		text string
	}{
		{"selection method in OF1.3", Version13, otServiceGroup().AddMod(), ErrUnsupported, "selection method needs OF1.5"},
		{"insert bucket in OF1.3", Version13, &GroupMod{Command: GroupInsertBucket, GroupID: 1}, ErrUnsupported, "INSERT_BUCKET needs OF1.5"},
		{"duplicate bucket ids", Version15, &GroupMod{Type: GroupTypeSelect, GroupID: 1, Buckets: []Bucket{{ID: 1}, {ID: 2}, {ID: 1}}}, ErrMalformed, "duplicate bucket id 1"},
		{"all-zero bucket ids", Version15, &GroupMod{Type: GroupTypeSelect, GroupID: 1, Buckets: []Bucket{{}, {}}}, ErrMalformed, "duplicate bucket id 0"},
		{"long method", Version15, &GroupMod{Type: GroupTypeSelect, SelectionMethod: "a-very-long-method"}, ErrMalformed, "longer than 15"},
		{"fields without method", Version15, &GroupMod{Type: GroupTypeSelect, SelectionFields: otSelectionFields()}, ErrMalformed, "without a method"},
		{"masked selection field", Version15, &GroupMod{Type: GroupTypeSelect, SelectionMethod: "hash",
			SelectionFields: []Field{{Class: 0x8000, Field: 11, Value: []byte{1, 2, 3, 4}, Mask: []byte{1, 2, 3, 4}}}}, ErrMalformed, "selection field 0"},
	}
	for _, tc := range encode {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Marshal(tc.v, 1, tc.mod)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Marshal: %v, want %v containing %q", err, tc.want, tc.text)
			}
		})
	}
	decode := []struct {
		name string
		hex  string
		want error
	}{
		{"add with command bucket id 0", `
			060f 0030 00000001 | 0000 00 00 00000003 | 0018 0000 00000000 |
			0018 0010 00000000 | 0000 0010 00000001 0000 000000000000`, ErrMalformed},
		{"bucket longer than the list", `
			060f 0030 00000001 | 0000 00 00 00000003 | 0018 0000 ffffffff |
			0040 0010 00000000 | 0000 0010 00000001 0000 000000000000`, ErrMalformed},
		{"bucket list longer than the message", `
			060f 0030 00000001 | 0000 00 00 00000003 | 0080 0000 ffffffff |
			0018 0010 00000000 | 0000 0010 00000001 0000 000000000000`, io.ErrUnexpectedEOF},
		{"watch group 0 in OF1.3", `
			040f 0030 00000001 | 0000 03 00 00000004 |
			0020 0000 00000001 00000000 00000000 | 0000 0010 00000001 0000 000000000000`, ErrUnsupported},
		{"short weight property", `
			060f 0036 00000001 | 0000 01 00 00000003 | 001e 0000 ffffffff |
			001e 0010 00000000 | 0000 0010 00000001 0000 000000000000 | 0000 0006 0001`, ErrMalformed},
		// Fuzz crasher: the decoder took OF1.5-only commands in OF1.3.
		{"remove bucket in OF1.3", "040f0010303030300005303030303030", ErrUnsupported},
		{"selection property without NUL", `
			060f 0040 00000001 | 0000 01 00 00000003 | 0000 0000 ffffffff |
			ffff 0028 0000154d 00000001 00000000 | 6161616161616161 6161616161616161 | 0000000000000000`, ErrMalformed},
	}
	for _, tc := range decode {
		t.Run("decode/"+tc.name, func(t *testing.T) {
			_, _, err := Unmarshal(otHex(t, tc.hex))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Unmarshal: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "group mod") {
				t.Errorf("error %q does not name the group mod", err)
			}
		})
	}
}

// TestGroupEntryMods splits a large group into an ADD and INSERT_BUCKET
// messages and checks that every message fits and the buckets come back in
// order.
func TestGroupEntryMods(t *testing.T) {
	g := otBigGroup(5000)
	for _, maxLen := range []int{0, 4096} {
		mods, err := g.Mods(GroupAdd, Version15, maxLen)
		if err != nil {
			t.Fatalf("Mods(%d): %v", maxLen, err)
		}
		limit := maxLen
		if limit == 0 {
			limit = MaxMessageLen - 16
		}
		var got []Bucket
		for i, m := range mods {
			b := otMarshal(t, Version15, m)
			if len(b) > limit {
				t.Errorf("maxLen %d: message %d is %d bytes", maxLen, i, len(b))
			}
			wantCmd, wantCBID := GroupInsertBucket, BucketLast
			if i == 0 {
				wantCmd, wantCBID = GroupAdd, BucketAll
				if m.SelectionMethod != "hash" {
					t.Errorf("first message lost the selection method")
				}
			} else if m.SelectionMethod != "" {
				t.Errorf("message %d repeats the selection method", i)
			}
			back := otUnmarshal[*GroupMod](t, b)
			if back.Command != wantCmd || back.CommandBucketID != wantCBID || back.GroupID != g.ID || back.Type != g.Type {
				t.Errorf("message %d: %v command_bucket_id %d", i, back.Command, back.CommandBucketID)
			}
			got = append(got, back.Buckets...)
		}
		if len(got) != len(g.Buckets) {
			t.Fatalf("maxLen %d: %d buckets in %d messages, want %d", maxLen, len(got), len(mods), len(g.Buckets))
		}
		for i := range got {
			if got[i].ID != g.Buckets[i].ID || ActionsString(got[i].Actions) != ActionsString(g.Buckets[i].Actions) {
				t.Fatalf("bucket %d = %+v, want %+v", i, got[i], g.Buckets[i])
			}
		}
		if maxLen == 0 && len(mods) < 2 {
			t.Errorf("5000 buckets fit one message?")
		}
	}
	if mods, err := otBigGroup(3).Mods(GroupModify, Version15, 0); err != nil || len(mods) != 1 || mods[0].Command != GroupModify {
		t.Errorf("small group: %v, %v", mods, err)
	}
	g13 := g
	g13.SelectionMethod, g13.SelectionFields = "", nil
	if _, err := g13.Mods(GroupAdd, Version13, 0); !errors.Is(err, ErrTooLong) {
		t.Errorf("OF1.3 big group: %v, want ErrTooLong", err)
	}
	g13.Buckets = g13.Buckets[:10]
	if mods, err := g13.Mods(GroupAdd, Version13, 0); err != nil || len(mods) != 1 {
		t.Errorf("OF1.3 small group: %v, %v", mods, err)
	}
	if _, err := g.Mods(GroupAdd, Version13, 0); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OF1.3 group with a selection method: %v, want ErrUnsupported", err)
	}
	if _, err := g.Mods(GroupAdd, Version15, 100); !errors.Is(err, ErrTooLong) {
		t.Errorf("100-byte limit: %v, want ErrTooLong", err)
	}
}

// otBigGroup is a select group of n service endpoints, each bucket a
// ct(commit,nat(dst=...)).
func otBigGroup(n int) GroupEntry {
	g := GroupEntry{ID: 10, Type: GroupTypeSelect, SelectionMethod: "hash", SelectionFields: otSelectionFields()}
	for i := 0; i < n; i++ {
		ip := otIP("10.128.0.0").As4()
		ip[2], ip[3] = byte(i>>8), byte(i)
		g.Buckets = append(g.Buckets, Bucket{ID: uint32(i), Weight: 1, Actions: []Action{
			CT{Commit: true, Zone: 10, RecircTable: 0xff, Actions: []Action{NAT{Dst: true, MinAddr: netip.AddrFrom4(ip), MinPort: 8080}}},
			ResubmitTable(30),
		}})
	}
	return g
}

// BenchmarkGroup5000Buckets splits a 5,000-bucket select group (each bucket
// ct(commit,zone=10,nat(dst=IP:8080)),resubmit(,30)) into its OF1.5 ADD and
// INSERT_BUCKET messages and encodes them. The reference is
// `ovs-ofctl -O OpenFlow15 parse-group` of a 500-bucket group (the largest
// that fits one message comfortably), scaled per bucket.
func BenchmarkGroup5000Buckets(b *testing.B) {
	const refBuckets = 500
	var ref time.Duration
	if _, err := exec.LookPath("ovs-ofctl"); err == nil {
		var sb strings.Builder
		sb.WriteString("group_id=10,type=select,selection_method=hash,fields(ip_src,ip_dst,tcp_src,tcp_dst)")
		for i := 0; i < refBuckets; i++ {
			fmt.Fprintf(&sb, ",bucket=bucket_id:%d,actions=ct(commit,zone=10,nat(dst=10.128.%d.%d:8080)),resubmit(,30)", i, i>>8, i&0xff)
		}
		ref = otTimeOfctl(b, "-O", "OpenFlow15", "parse-group", sb.String())
	}
	g := otBigGroup(5000)
	var buf []byte
	msgs := 0
	b.ReportAllocs()
	for b.Loop() {
		mods, err := g.Mods(GroupAdd, Version15, 0)
		if err != nil {
			b.Fatal(err)
		}
		buf = buf[:0]
		for _, m := range mods {
			if buf, err = AppendMessage(buf, Version15, 1, m); err != nil {
				b.Fatal(err)
			}
		}
		msgs = len(mods)
	}
	b.ReportMetric(float64(msgs), "messages")
	b.ReportMetric(float64(len(buf)), "bytes")
	if ref != 0 {
		// Per 5,000 buckets.
		otReport(b, ref*5000/refBuckets, 1, "group")
	}
}
