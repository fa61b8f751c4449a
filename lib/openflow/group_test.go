package openflow

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGroupEntryString checks GroupEntry.String against lines that
// `ovs-ofctl -O OpenFlow15 dump-groups` printed for the same groups on Open
// vSwitch 3.1.0 (TestGroupDescLive repeats this against a live switch).
func TestGroupEntryString(t *testing.T) {
	out1 := []Action{Output{Port: 1}}
	tests := []struct {
		name  string
		group GroupEntry
		want  string
	}{
		{"select weight 0", GroupEntry{ID: 9, Type: GroupTypeSelect, Buckets: []Bucket{{Weight: 0, Actions: out1}}},
			"group_id=9,type=select,bucket=bucket_id:0,weight:0,actions=output:1"},
		{"all", GroupEntry{ID: 1, Type: GroupTypeAll, Buckets: []Bucket{{ID: 0, Actions: out1}, {ID: 1, Actions: []Action{Output{Port: 2}}}}},
			"group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2"},
		{"ff", GroupEntry{ID: 4, Type: GroupTypeFastFailover, Buckets: []Bucket{{ID: 0, WatchPort: 1, Actions: out1},
			{ID: 1, WatchPort: 2, WatchGroup: 3, Actions: []Action{Output{Port: 2}}}}},
			"group_id=4,type=ff,bucket=bucket_id:0,watch_port:1,actions=output:1,bucket=bucket_id:1,watch_port:2,watch_group:3,actions=output:2"},
		{"masked fields", GroupEntry{ID: 6, Type: GroupTypeSelect, SelectionMethod: "hash", SelectionParam: 9,
			SelectionFields: []Field{
				{Class: 0x8000, Field: 3, Value: []byte{0xff, 0xff, 0xff, 0, 0, 0}},
				{Class: 0x8000, Field: 11, Value: []byte{0xff, 0xff, 0, 0}},
				{Class: 0x8000, Field: 26, Value: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
			},
			Buckets: []Bucket{{Weight: 1, Actions: out1}}},
			"group_id=6,type=select,selection_method=hash,selection_method_param=9,fields(eth_dst=ff:ff:ff:00:00:00,ip_src=255.255.0.0,ipv6_src),bucket=bucket_id:0,actions=output:1"},
		{"empty select", GroupEntry{ID: 7, Type: GroupTypeSelect}, "group_id=7,type=select"},
		{"drop bucket", GroupEntry{ID: 8, Type: GroupTypeAll, Buckets: []Bucket{{}}}, "group_id=8,type=all,bucket=bucket_id:0,actions=drop"},
		{"dp_hash", GroupEntry{ID: 5, Type: GroupTypeSelect, SelectionMethod: "dp_hash", SelectionParam: 0x100000007, Buckets: []Bucket{{Weight: 1, Actions: out1}}},
			"group_id=5,type=select,selection_method=dp_hash,selection_method_param=4294967303,bucket=bucket_id:0,actions=output:1"},
		{"service", otServiceGroup(),
			"group_id=2,type=select,selection_method=hash,fields(ip_src,ip_dst,tcp_src,tcp_dst),bucket=bucket_id:0,weight:5,actions=ct(commit,zone=7,nat(dst=10.0.0.2:80)),bucket=bucket_id:7,actions=output:2"},
		{"max id, watch LOCAL", GroupEntry{ID: 4294967040, Type: GroupTypeFastFailover, Buckets: []Bucket{{WatchPort: PortLocal, Actions: out1}}},
			"group_id=4294967040,type=ff,bucket=bucket_id:0,watch_port:LOCAL,actions=output:1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.group.String(); got != tc.want {
				t.Errorf("String():\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestGroupDescReply encodes group desc replies in both versions, checks
// ofp-print's reading of them, and decodes them back.
func TestGroupDescReply(t *testing.T) {
	groups := []GroupEntry{otServiceGroup(), {ID: 1, Type: GroupTypeAll, Buckets: []Bucket{{ID: 0, Actions: []Action{Output{Port: 1}}}, {ID: 1, Actions: []Action{Output{Port: 2}}}}}}
	for _, v := range []Version{Version13, Version15} {
		t.Run(v.String(), func(t *testing.T) {
			gs := groups
			if v == Version13 {
				g := otServiceGroup()
				g.SelectionMethod, g.SelectionFields = "", nil
				g.Buckets[1].ID = 1 // OF1.3 numbers buckets by position
				gs = []GroupEntry{g, groups[1]}
			}
			r, err := NewGroupDescReply(v, gs)
			if err != nil {
				t.Fatal(err)
			}
			b := otMarshal(t, v, r)
			printed := otOfpPrint(t, b)
			for _, g := range gs {
				want := g.String()
				if v == Version13 {
					want = otStripBucketIDs(want)
				}
				if !otContainsLine(printed, want) {
					t.Errorf("ofp-print lacks %q:\n%s", want, printed)
				}
			}
			back, err := otUnmarshal[*MultipartReply](t, b).GroupDesc()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, gs) {
				t.Errorf("decoded %v\nwant %v", back, gs)
			}
		})
	}
}

// otStripBucketIDs turns OF1.5 group text into OF1.3's, which has no
// bucket ids.
func otStripBucketIDs(s string) string {
	return regexp.MustCompile(`bucket_id:\d+,`).ReplaceAllString(s, "")
}

// otContainsLine reports whether text has a line equal to line after
// trimming spaces.
func otContainsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

func TestGroupStatsReply(t *testing.T) {
	stats := []GroupStats{
		{GroupID: 2, RefCount: 3, PacketCount: 10, ByteCount: 1000, Duration: 1500 * time.Millisecond,
			Buckets: []BucketCounter{{4, 400}, {6, 600}}},
		{GroupID: 7, Duration: time.Second},
	}
	for _, v := range []Version{Version13, Version15} {
		r, err := NewGroupStatsReply(v, stats)
		if err != nil {
			t.Fatal(err)
		}
		b := otMarshal(t, v, r)
		printed := otOfpPrint(t, b)
		want := "group_id=2,duration=1.500s,ref_count=3,packet_count=10,byte_count=1000,bucket0:packet_count=4,byte_count=400,bucket1:packet_count=6,byte_count=600"
		if !otContainsLine(printed, want) {
			t.Errorf("%s: ofp-print lacks %q:\n%s", v, want, printed)
		}
		back, err := otUnmarshal[*MultipartReply](t, b).GroupStats()
		if err != nil || !reflect.DeepEqual(back, stats) {
			t.Errorf("%s: decoded %+v, %v", v, back, err)
		}
	}
}
