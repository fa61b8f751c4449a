package openflow

import (
	"reflect"
	"testing"
	"time"
)

func TestMeterMod(t *testing.T) {
	tests := []struct {
		name  string
		mod   *MeterMod
		hex   string // expected bytes, if known
		print string
	}{
		{"add pktps drop (reference capture)", MeterEntry{ID: 1, Flags: MeterFlagPktps, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 10}}}.Mod(MeterAdd),
			"041d 0020 00000001 | 0000 0002 00000001 | 0001 0010 0000000a 00000000 00000000",
			"ADD meter=1 pktps bands=\ntype=drop rate=10"},
		{"modify kbps burst stats", MeterEntry{ID: 2, Flags: MeterFlagKbps | MeterFlagBurst | MeterFlagStats,
			Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1000, BurstSize: 200}}}.Mod(MeterModify), "",
			"MOD meter=2 kbps burst stats bands=\ntype=drop rate=1000 burst_size=200"},
		{"delete", MeterEntry{ID: 3, Flags: MeterFlagKbps, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1}}}.Mod(MeterDelete),
			"041d 0010 00000001 | 0002 0000 00000003", "DEL meter=3 bands="},
		{"controller meter, dscp band", &MeterMod{Command: MeterAdd, Flags: MeterFlagPktps, MeterID: MeterController,
			Bands: []MeterBand{{Type: MeterBandDSCPRemark, Rate: 5, PrecLevel: 1}}}, "",
			"ADD meter=controller pktps bands=\ntype=dscp_remark rate=5 prec_level=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			otCheckEncoding(t, Version13, tc.mod, tc.hex, tc.print)
			b15 := otMarshal(t, Version15, tc.mod)
			if got := otOfpPrint(t, b15); got != tc.print {
				t.Errorf("OF1.5 ofp-print:\n got %q\nwant %q", got, tc.print)
			}
			back := otUnmarshal[*MeterMod](t, b15)
			if !reflect.DeepEqual(back, tc.mod) {
				t.Errorf("decoded %+v, want %+v", back, tc.mod)
			}
		})
	}
}

func TestMeterEntryString(t *testing.T) {
	tests := []struct {
		meter MeterEntry
		want  string
	}{
		{MeterEntry{ID: 1, Flags: MeterFlagPktps, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 10, BurstSize: 10}}},
			"meter=1,pktps,band=type=drop,rate=10"},
		{MeterEntry{ID: 2, Flags: MeterFlagKbps | MeterFlagBurst | MeterFlagStats, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1000, BurstSize: 200}}},
			"meter=2,kbps,burst,stats,band=type=drop,rate=1000,burst_size=200"},
		{MeterEntry{ID: MeterController, Flags: MeterFlagPktps | MeterFlagBurst, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 100, BurstSize: 200}, {Type: MeterBandDrop, Rate: 500}}},
			"meter=controller,pktps,burst,band=type=drop,rate=100,burst_size=200,type=drop,rate=500"},
	}
	for _, tc := range tests {
		if got := tc.meter.String(); got != tc.want {
			t.Errorf("String():\n got %q\nwant %q", got, tc.want)
		}
	}
}

func TestMeterReplies(t *testing.T) {
	meters := []MeterEntry{
		{ID: 1, Flags: MeterFlagPktps, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 10}}},
		{ID: 2, Flags: MeterFlagKbps | MeterFlagBurst | MeterFlagStats, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1000, BurstSize: 200}}},
	}
	stats := []MeterStats{
		{MeterID: 1, FlowCount: 2, PacketInCount: 30, ByteInCount: 3000, Duration: 2500 * time.Millisecond, Bands: []BandCounter{{5, 500}}},
	}
	for _, v := range []Version{Version13, Version15} {
		r, err := NewMeterConfigReply(v, meters)
		if err != nil {
			t.Fatal(err)
		}
		b := otMarshal(t, v, r)
		want := "meter=1 pktps bands=\ntype=drop rate=10\n\nmeter=2 kbps burst stats bands=\ntype=drop rate=1000 burst_size=200"
		if got := otOfpPrint(t, b); got != want {
			t.Errorf("%s meter config ofp-print:\n got %q\nwant %q", v, got, want)
		}
		back, err := otUnmarshal[*MultipartReply](t, b).MeterConfig()
		if err != nil || !reflect.DeepEqual(back, meters) {
			t.Errorf("%s: meter config decoded %+v, %v", v, back, err)
		}

		r, err = NewMeterStatsReply(v, stats)
		if err != nil {
			t.Fatal(err)
		}
		b = otMarshal(t, v, r)
		want = "meter:1 flow_count:2 packet_in_count:30 byte_in_count:3000 duration:2.500s bands:\n0: packet_count:5 byte_count:500"
		if got := otOfpPrint(t, b); got != want {
			t.Errorf("%s meter stats ofp-print:\n got %q\nwant %q", v, got, want)
		}
		sback, err := otUnmarshal[*MultipartReply](t, b).MeterStats()
		if err != nil || !reflect.DeepEqual(sback, stats) {
			t.Errorf("%s: meter stats decoded %+v, %v", v, sback, err)
		}
	}
}
