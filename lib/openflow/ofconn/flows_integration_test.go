package ofconn

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

// ofctlLines runs ovs-ofctl -O OpenFlow15 and returns its output lines
// without the reply header line.
func ofctlLines(t testing.TB, sb *ovs.Sandbox, args ...string) []string {
	t.Helper()
	out, err := sb.Ofctl(append([]string{"-O", "OpenFlow15"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, "OFPST_") || strings.HasPrefix(l, "NXST_") {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// dumpFlows returns `dump-flows --no-stats` lines, sorted.
func dumpFlows(t testing.TB, sb *ovs.Sandbox) []string {
	t.Helper()
	lines := ofctlLines(t, sb, "dump-flows", "br0", "--no-stats")
	slices.Sort(lines)
	return lines
}

func flowStrings(flows ...openflow.Flow) []string {
	var s []string
	for _, f := range flows {
		s = append(s, f.String())
	}
	slices.Sort(s)
	return s
}

func apply(actions ...openflow.Action) []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: actions}}
}

// testFlow is table=T,priority=P,tcp,tp_dst=PORT actions=drop.
func testFlow(table uint8, prio uint16, port uint16) openflow.Flow {
	return openflow.Flow{Table: table, Priority: prio, Cookie: 0x77,
		Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPProto(6), openflow.TCPDst(port))}
}

func addMods(flows ...openflow.Flow) []openflow.Message {
	var msgs []openflow.Message
	for _, f := range flows {
		msgs = append(msgs, f.AddMod())
	}
	return msgs
}

// allFlowStats asks c for the statistics of every flow.
func allFlowStats(t *testing.T, ctx context.Context, c *Conn) []openflow.FlowStats {
	t.Helper()
	reply, err := c.MultipartReply(ctx, openflow.NewFlowStatsRequest())
	if err != nil {
		t.Fatal(err)
	}
	stats, err := reply.FlowStats()
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

func TestIntegrationBundle(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	for _, v := range []openflow.Version{openflow.Version15, openflow.Version13} {
		t.Run(v.String(), func(t *testing.T) {
			c := testDial(t, addr, Options{Versions: []openflow.Version{v}})
			if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
				t.Fatal(err)
			}
			good := []openflow.Flow{testFlow(1, 10, 80), testFlow(1, 10, 81), testFlow(2, 5, 80)}

			t.Run("commit installs everything", func(t *testing.T) {
				if err := c.Bundle(ctx, addMods(good...)); err != nil {
					t.Fatal(err)
				}
				if got, want := dumpFlows(t, sb), flowStrings(good...); !slices.Equal(got, want) {
					t.Errorf("flows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})

			// Refused bundles: nothing installed, the message named.
			toGroup := func(port uint16) openflow.Flow {
				f := testFlow(3, 1, port)
				f.Instructions = apply(openflow.Group{ID: 99})
				return f
			}
			bad := testFlow(255, 1, 1).AddMod()
			for _, tc := range []struct {
				name         string
				msgs         []openflow.Message
				index, total int
				named        openflow.Message // when not nil, the message the error names
				errName      string
				prefix       string   // of the error text
				text         []string // in the error text
			}{{
				name:  "message rejected when added: nothing installed",
				msgs:  slices.Concat(addMods(testFlow(3, 1, 1)), []openflow.Message{bad}, addMods(testFlow(3, 1, 2))),
				index: 1, total: 3, named: bad, errName: "OFPFMFC_BAD_TABLE_ID",
				prefix: "ofconn: bundle ", text: []string{" add: message 2 of 3 ("},
			}, {
				name:  "message failing at commit: nothing installed",
				msgs:  addMods(testFlow(3, 1, 1), testFlow(3, 1, 2), toGroup(3)),
				index: 2, total: 3, errName: "OFPBAC_BAD_OUT_GROUP",
				text: []string{" commit: message 3 of 3 (", "group:99"},
			}, {
				// A bundle of one goes as the message and a barrier.
				name:  "one message, refused: nothing installed, the message named",
				msgs:  addMods(toGroup(4)),
				index: 0, total: 1, errName: "OFPBAC_BAD_OUT_GROUP",
				text: []string{"message 1 of 1 (", "group:99"},
			}} {
				t.Run(tc.name, func(t *testing.T) {
					err := c.Bundle(ctx, tc.msgs)
					var me *MessageError
					if !errors.As(err, &me) || me.Index != tc.index || me.Total != tc.total || tc.named != nil && me.Message != tc.named {
						t.Fatalf("err = %v, want message %d of %d named", err, tc.index+1, tc.total)
					}
					var oe *openflow.OFError
					if !errors.As(err, &oe) || oe.Name() != tc.errName {
						t.Fatalf("err = %v, want %s", err, tc.errName)
					}
					if !strings.HasPrefix(err.Error(), tc.prefix) {
						t.Errorf("error text %q does not start with %q", err, tc.prefix)
					}
					for _, part := range tc.text {
						if !strings.Contains(err.Error(), part) {
							t.Errorf("error text %q lacks %q", err, part)
						}
					}
					if got, want := dumpFlows(t, sb), flowStrings(good...); !slices.Equal(got, want) {
						t.Errorf("flows changed:\n%s", strings.Join(got, "\n"))
					}
				})
			}

			t.Run("one message: installed", func(t *testing.T) {
				one := testFlow(3, 1, 5)
				if err := c.Bundle(ctx, addMods(one)); err != nil {
					t.Fatal(err)
				}
				if got, want := dumpFlows(t, sb), flowStrings(append(slices.Clone(good), one)...); !slices.Equal(got, want) {
					t.Errorf("flows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				if err := c.Bundle(ctx, []openflow.Message{one.DeleteStrictMod()}); err != nil {
					t.Fatal(err)
				}
			})

			t.Run("unencodable message: nothing installed", func(t *testing.T) {
				huge := &openflow.PacketOut{InPort: openflow.PortController, Data: make([]byte, 70000)}
				msgs := append(addMods(testFlow(3, 1, 1)), huge)
				msgs = append(msgs, addMods(testFlow(3, 1, 2))...)
				err := c.Bundle(ctx, msgs)
				var me *MessageError
				if !errors.As(err, &me) || me.Index != 1 || !errors.Is(err, openflow.ErrTooLong) {
					t.Fatalf("err = %v, want message 2 too long", err)
				}
				if got, want := dumpFlows(t, sb), flowStrings(good...); !slices.Equal(got, want) {
					t.Errorf("flows changed:\n%s", strings.Join(got, "\n"))
				}
				if err := c.Barrier(ctx); err != nil {
					t.Errorf("connection unusable afterwards: %v", err)
				}
			})

			t.Run("discard installs nothing", func(t *testing.T) {
				b, err := c.OpenBundle(ctx, openflow.BundleAtomic|openflow.BundleOrdered)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Add(ctx, addMods(testFlow(4, 1, 1))...); err != nil {
					t.Fatal(err)
				}
				if err := b.Discard(ctx); err != nil {
					t.Fatal(err)
				}
				if err := b.Commit(ctx); !errors.Is(err, ErrBundleDone) {
					t.Errorf("commit after discard: %v", err)
				}
				if got, want := dumpFlows(t, sb), flowStrings(good...); !slices.Equal(got, want) {
					t.Errorf("flows changed:\n%s", strings.Join(got, "\n"))
				}
			})

			t.Run("replace atomically: delete by cookie and add", func(t *testing.T) {
				next := []openflow.Flow{testFlow(5, 1, 1), testFlow(5, 1, 2)}
				for i := range next {
					next[i].Cookie = 0x88
				}
				msgs := append([]openflow.Message{openflow.DeleteCookieMod(openflow.TableAll, 0x77, 0xff)}, addMods(next...)...)
				if err := c.Bundle(ctx, msgs); err != nil {
					t.Fatal(err)
				}
				if got, want := dumpFlows(t, sb), flowStrings(next...); !slices.Equal(got, want) {
					t.Errorf("flows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		})
	}
}

func TestIntegrationMultipartReassembly(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	c := testDial(t, addr, Options{})
	var flows []openflow.Flow
	for i := 0; i < 3000; i++ {
		flows = append(flows, testFlow(uint8(i%3), 100, uint16(i)))
	}
	if err := c.Bundle(ctx, addMods(flows...)); err != nil {
		t.Fatal(err)
	}
	parts, err := c.Multipart(ctx, openflow.NewFlowStatsRequest())
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 2 {
		t.Fatalf("%d reply parts; want several for 3000 flows", len(parts))
	}
	for i, p := range parts {
		if more := p.(*openflow.MultipartReply).More(); more != (i < len(parts)-1) {
			t.Errorf("part %d of %d: more=%v", i+1, len(parts), more)
		}
	}
	stats := allFlowStats(t, ctx, c)
	var got []string
	for _, s := range stats {
		got = append(got, openflow.FlowFromStats(s).String())
	}
	slices.Sort(got)
	if want := flowStrings(flows...); !slices.Equal(got, want) {
		t.Errorf("read back %d flows, want %d (first %q)", len(got), len(want), got[:min(1, len(got))])
	}
	if ofctl := dumpFlows(t, sb); len(ofctl) != 3000 {
		t.Errorf("ovs-ofctl sees %d flows", len(ofctl))
	}
}

// selectGroup returns a select group with n buckets that each load their
// index into reg0, hashing the TCP 5-tuple.
func selectGroup(id uint32, n int) *openflow.GroupMod {
	gm := &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeSelect, GroupID: id,
		SelectionMethod: "hash",
		SelectionFields: []openflow.Field{
			fieldAllOnes(openflow.IPv4Src(netip.IPv4Unspecified())), fieldAllOnes(openflow.IPv4Dst(netip.IPv4Unspecified())),
			fieldAllOnes(openflow.TCPSrc(0)), fieldAllOnes(openflow.TCPDst(0)),
		}}
	for i := 0; i < n; i++ {
		gm.Buckets = append(gm.Buckets, openflow.Bucket{ID: uint32(i), Weight: 1,
			Actions: []openflow.Action{openflow.SetField{Field: openflow.Reg(0, uint32(i), 0xffffffff)}}})
	}
	return gm
}

// fieldAllOnes turns a match field into a selection field (value all ones).
func fieldAllOnes(f openflow.Field) openflow.Field {
	f.Value = bytes.Repeat([]byte{0xff}, len(f.Value))
	f.Mask = nil
	return f
}

func TestIntegrationGroupsAndMeters(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	c := testDial(t, addr, Options{})

	t.Run("select group with hash selection", func(t *testing.T) {
		gm := selectGroup(1, 3)
		if err := c.Apply(ctx, gm); err != nil {
			t.Fatal(err)
		}
		want := gm.Group().String()
		lines := ofctlLines(t, sb, "dump-groups", "br0")
		if len(lines) != 1 || strings.TrimSpace(lines[0]) != strings.TrimSpace(want) {
			t.Errorf("dump-groups:\n%s\nwant:\n%s", strings.Join(lines, "\n"), want)
		}
		if !strings.Contains(lines[0], "selection_method=hash,fields(") {
			t.Errorf("selection method lost: %s", lines[0])
		}
		reply, err := c.MultipartReply(ctx, &openflow.GroupDescRequest{GroupID: openflow.GroupAll})
		if err != nil {
			t.Fatal(err)
		}
		groups, err := reply.GroupDesc()
		if err != nil || len(groups) != 1 || groups[0].String() != want {
			t.Errorf("group desc: %v %v", groups, err)
		}
	})

	t.Run("5000-bucket group installed atomically", func(t *testing.T) {
		// Each bucket loads its index into reg0 and resubmits to table 10,
		// which sends the packet to the controller: packet-ins tell which
		// bucket a connection took. (Reading such a group back is not
		// possible: OVS 3.1 wraps the 16-bit lengths of group entries over
		// 64 KiB, in ovs-ofctl dump-groups too.)
		pins := make(chan *openflow.PacketIn, 1024)
		pc := testDial(t, addr, Options{Handlers: Handlers{PacketIn: func(m AsyncMessage) {
			if p, ok := m.Message.(*openflow.PacketIn); ok {
				pins <- p
			}
		}}})
		bigGroup := func(cmd openflow.GroupModCommand, id uint32, n int) *openflow.GroupMod {
			gm := selectGroup(id, n)
			gm.Command = cmd
			for i := range gm.Buckets {
				gm.Buckets[i].Actions = append(gm.Buckets[i].Actions, openflow.ResubmitTable(10))
			}
			return gm
		}
		toGroup := openflow.Flow{Table: 0, Priority: 10,
			Match:        openflow.NewMatch(openflow.InPort(openflow.PortController), openflow.EthType(0x0800), openflow.IPProto(6)),
			Instructions: apply(openflow.Group{ID: 2})}
		punt := openflow.Flow{Table: 10, Priority: 1, Instructions: apply(openflow.OutputPort(openflow.PortController))}

		gm := bigGroup(openflow.GroupAdd, 2, 5000)
		msgs, err := SplitGroupMod(c.Version(), gm)
		if err != nil {
			t.Fatal(err)
		}
		firstPart := len(msgs[0].(*openflow.GroupMod).Buckets)
		t.Logf("5000 buckets in %d messages, %d in the first", len(msgs), firstPart)
		if len(msgs) < 3 {
			t.Fatalf("split into %d messages", len(msgs))
		}
		if err := c.InstallGroup(ctx, gm); err != nil {
			t.Fatal(err)
		}
		if err := c.Bundle(ctx, addMods(toGroup, punt)); err != nil {
			t.Fatal(err)
		}
		// buckets sends n connections through the group and returns the
		// bucket each one took.
		buckets := func(n int) map[uint32]int {
			var pos []openflow.Message
			for i := 0; i < n; i++ {
				syn := tcpSYN(t, netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(1 + i%250)}), netip.MustParseAddr("172.30.0.10"), uint16(20000+i), 80)
				pos = append(pos, &openflow.PacketOut{InPort: openflow.PortController, Actions: []openflow.Action{openflow.OutputPort(openflow.PortTable)}, Data: syn})
			}
			if err := c.Apply(ctx, pos...); err != nil {
				t.Fatal(err)
			}
			got := map[uint32]int{}
			for i := 0; i < n; i++ {
				select {
				case p := <-pins:
					got[p.Reg(0)]++
				case <-ctx.Done():
					t.Fatalf("%d of %d packet-ins", i, n)
				}
			}
			return got
		}
		check := func(got map[uint32]int, total int) {
			t.Helper()
			late := 0
			for b := range got {
				if b >= uint32(total) {
					t.Errorf("bucket %d of a %d-bucket group", b, total)
				}
				if b >= uint32(firstPart) {
					late++
				}
			}
			if late == 0 || len(got) < 150 {
				t.Errorf("%d distinct buckets used, %d of them added by insert_bucket", len(got), late)
			}
		}
		check(buckets(300), 5000)

		// Shrink with MODIFY: one atomic change again.
		if err := c.InstallGroup(ctx, bigGroup(openflow.GroupModify, 2, 4500)); err != nil {
			t.Fatal(err)
		}
		check(buckets(300), 4500)

		// A bad bucket in the last part fails the whole group.
		bad := bigGroup(openflow.GroupAdd, 3, 5000)
		bad.Buckets[4999].Actions = []openflow.Action{openflow.OutputPort(0xff00)}
		err = c.InstallGroup(ctx, bad)
		var me *MessageError
		if !errors.As(err, &me) || me.Index != len(msgs)-1 {
			t.Fatalf("err = %v, want the last part named", err)
		}
		t.Logf("bad group: %v", err)
		// OVS 3.1 sends group 2's stats (over 64 KiB) with wrapped lengths:
		// the connection notices the stream is out of step, drops the
		// session and reconnects, rather than reading bucket counters as
		// messages.
		_, err = c.MultipartReply(ctx, &openflow.GroupStatsRequest{GroupID: 2})
		if !errors.Is(err, ErrDisconnected) || !errors.Is(err, openflow.ErrMalformed) {
			t.Errorf("stats of a 4500-bucket group: %v, want a dropped session", err)
		}
		waittest.Poll(t, "reconnect", 20*time.Second, func() error { return c.Barrier(ctx) })

		// Group 3 does not exist.
		reply, err := c.MultipartReply(ctx, &openflow.GroupStatsRequest{GroupID: 3})
		if err != nil {
			t.Fatal(err)
		}
		if gs, err := reply.GroupStats(); err != nil || len(gs) != 0 {
			t.Errorf("group 3 after the failed install: %v %v", gs, err)
		}
		_ = pc
	})

	t.Run("meter", func(t *testing.T) {
		mm := &openflow.MeterMod{Command: openflow.MeterAdd, Flags: openflow.MeterFlagPktps | openflow.MeterFlagBurst, MeterID: 5,
			Bands: []openflow.MeterBand{{Type: openflow.MeterBandDrop, Rate: 100, BurstSize: 200}}}
		if err := c.Apply(ctx, mm); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(ofctlLines(t, sb, "dump-meters", "br0"), "\n")
		if want := "meter=5 pktps burst bands=\ntype=drop rate=100 burst_size=200"; out != want {
			t.Errorf("dump-meters:\n%s\nwant:\n%s", out, want)
		}
		want := mm.Meter().String()
		reply, err := c.MultipartReply(ctx, &openflow.MeterConfigRequest{MeterID: openflow.MeterAll})
		if err != nil {
			t.Fatal(err)
		}
		meters, err := reply.MeterConfig()
		if err != nil || len(meters) != 1 || meters[0].String() != want {
			t.Errorf("meter config: %v %v", meters, err)
		}
	})
}

// tcpSYN builds an Ethernet/IPv4/TCP SYN with correct checksums.
func tcpSYN(t testing.TB, src, dst netip.Addr, sport, dport uint16) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true, Seq: 1, Window: 64240}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestIntegrationPacketIn(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	pins := make(chan AsyncMessage, 16)
	c := testDial(t, addr, Options{ControllerID: 7, Handlers: Handlers{PacketIn: func(m AsyncMessage) { pins <- m }}})

	userdata := []byte{1, 2, 3}
	classify := openflow.Flow{Table: 0, Priority: 10, Cookie: 0x1,
		Match:        openflow.NewMatch(openflow.InPort(openflow.PortController), openflow.EthType(0x0800), openflow.IPProto(6)),
		Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.SetField{Field: openflow.Reg(3, 0x1234, 0xffffffff)}}}, openflow.GotoTable{Table: 5}}}
	punt := openflow.Flow{Table: 5, Priority: 20, Cookie: 0xabc,
		Match:        openflow.NewMatch(openflow.EthType(0x0800), openflow.IPProto(6), openflow.TCPDst(80)),
		Instructions: apply(openflow.Controller2{MaxLen: 0xffff, ControllerID: 7, Reason: openflow.ControllerReasonAction, Userdata: userdata})}
	if err := c.Bundle(ctx, addMods(classify, punt)); err != nil {
		t.Fatal(err)
	}

	syn := tcpSYN(t, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("172.30.0.10"), 40000, 80)
	po := &openflow.PacketOut{InPort: openflow.PortController, Actions: []openflow.Action{openflow.OutputPort(openflow.PortTable)}, Data: syn}
	if err := c.Apply(ctx, po); err != nil {
		t.Fatal(err)
	}
	var m AsyncMessage
	select {
	case m = <-pins:
	case <-ctx.Done():
		t.Fatal("no packet-in")
	}
	pin, ok := m.Message.(*openflow.PacketIn)
	if !ok {
		t.Fatalf("packet-in decoded as %T (%v)", m.Message, m.Err)
	}
	if pin.Format != openflow.PacketInFormatNXT2 {
		t.Errorf("format %d, want NXT_PACKET_IN2", pin.Format)
	}
	if !bytes.Equal(pin.Userdata, userdata) || pin.Cookie != 0xabc || pin.Table != 5 || pin.Reg(3) != 0x1234 ||
		pin.InPort() != openflow.PortController || !bytes.Equal(pin.Data, syn) {
		t.Errorf("packet-in: userdata %x cookie %#x table %d reg3 %#x in_port %#x data equal %v",
			pin.Userdata, pin.Cookie, pin.Table, pin.Reg(3), pin.InPort(), bytes.Equal(pin.Data, syn))
	}
	pkt := gopacket.NewPacket(pin.Data, layers.LayerTypeEthernet, gopacket.Default)
	if tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP); !ok || !tcp.SYN || tcp.DstPort != 80 {
		t.Errorf("packet-in frame is not the SYN: %v", pkt)
	}

	// The packet-out re-entered the pipeline: both flows counted it.
	stats := allFlowStats(t, ctx, c)
	for _, s := range stats {
		if s.PacketCount != 1 {
			t.Errorf("table %d priority %d: n_packets=%d, want 1", s.Table, s.Priority, s.PacketCount)
		}
	}
	if len(stats) != 2 {
		t.Errorf("%d flows", len(stats))
	}
	if st := c.Stats().Async[KindPacketIn]; st.Received != 1 || st.Dropped != 0 {
		t.Errorf("packet-in stats %+v", st)
	}
	_ = sb
}

func TestIntegrationSelectGroupSpreads(t *testing.T) {
	_, addr := testBridge(t)
	ctx := testCtx(t)
	c := testDial(t, addr, Options{})
	gm := selectGroup(1, 4)
	toGroup := openflow.Flow{Table: 0, Priority: 10,
		Match:        openflow.NewMatch(openflow.InPort(openflow.PortController), openflow.EthType(0x0800), openflow.IPProto(6)),
		Instructions: apply(openflow.Group{ID: 1})}
	if err := c.Bundle(ctx, []openflow.Message{gm, toGroup.AddMod()}); err != nil {
		t.Fatal(err)
	}
	const conns = 200
	var msgs []openflow.Message
	for i := 0; i < conns; i++ {
		syn := tcpSYN(t, netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(1 + i%250)}), netip.MustParseAddr("172.30.0.10"), uint16(30000+i), 80)
		msgs = append(msgs, &openflow.PacketOut{InPort: openflow.PortController, Actions: []openflow.Action{openflow.OutputPort(openflow.PortTable)}, Data: syn})
	}
	if err := c.Apply(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	reply, err := c.MultipartReply(ctx, &openflow.GroupStatsRequest{GroupID: 1})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := reply.GroupStats()
	if err != nil || len(gs) != 1 {
		t.Fatalf("group stats %v %v", gs, err)
	}
	var total uint64
	for i, b := range gs[0].Buckets {
		t.Logf("bucket %d: %d packets", i, b.PacketCount)
		if b.PacketCount < conns/4/3 {
			t.Errorf("bucket %d got %d of %d connections", i, b.PacketCount, conns)
		}
		total += b.PacketCount
	}
	if total != conns || gs[0].PacketCount != conns {
		t.Errorf("buckets counted %d, group %d, want %d", total, gs[0].PacketCount, conns)
	}
}

func TestIntegrationFlowRemovedAndPortStatus(t *testing.T) {
	sb, addr := testBridge(t)
	ctx := testCtx(t)
	removed := make(chan AsyncMessage, 4)
	ports := make(chan AsyncMessage, 16)
	c := testDial(t, addr, Options{Handlers: Handlers{
		FlowRemoved: func(m AsyncMessage) { removed <- m },
		PortStatus:  func(m AsyncMessage) { ports <- m },
	}})
	f := testFlow(3, 7, 99)
	f.Flags = openflow.FlowSendFlowRem
	if err := c.Apply(ctx, f.AddMod()); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, f.DeleteStrictMod()); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-removed:
		if m.Header.Type != openflow.TypeFlowRemoved {
			t.Errorf("flow removed: %+v", m.Header)
		}
	case <-ctx.Done():
		t.Fatal("no flow removed")
	}
	if _, err := sb.Vsctl("add-port", "br0", "p1", "--", "set", "interface", "p1", "type=internal"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ports:
		if m.Header.Type != openflow.TypePortStatus {
			t.Errorf("port status: %+v", m.Header)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no port status")
	}
	_ = context.Background
}
