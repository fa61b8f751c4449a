package openflow

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// Live tests: a private ovs-vswitchd (the userspace datapath with dummy
// ports), flows and groups installed with ovs-ofctl, and a minimal raw
// OpenFlow client written here (the connection package is separate). The
// messages Open vSwitch sends are decoded and compared with what ovs-ofctl
// prints; with NODEFLOW_UPDATE_FIXTURES=1 they are also stored under
// testdata/ as fixtures for the offline tests and the fuzz seeds.

// otSandbox starts a sandbox with bridge br0 (datapath_type=dummy,
// fail-mode=secure) and dummy ports p1 (1) and p2 (2).
func otSandbox(t *testing.T) *ovs.Sandbox {
	t.Helper()
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	if out, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy", "fail-mode=secure",
		"--", "add-port", "br0", "p1", "--", "set", "interface", "p1", "type=dummy", "ofport_request=1",
		"--", "add-port", "br0", "p2", "--", "set", "interface", "p2", "type=dummy", "ofport_request=2"); err != nil {
		t.Fatalf("add-br: %v: %s", err, out)
	}
	return sb
}

// otOfctlSB runs ovs-ofctl against the sandbox and fails the test on error.
func otOfctlSB(t *testing.T, sb *ovs.Sandbox, args ...string) string {
	t.Helper()
	out, err := sb.Ofctl(args...)
	if err != nil {
		t.Fatalf("ovs-ofctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// otConn is a minimal OpenFlow client for tests: it says HELLO for one
// version, answers echo requests and reads whole messages.
type otConn struct {
	t   testing.TB
	c   net.Conn
	r   *bufio.Reader
	v   Version
	xid uint32
}

// otDial connects to br0's management socket and negotiates v.
func otDial(t testing.TB, sb *ovs.Sandbox, v Version) *otConn {
	t.Helper()
	c, err := net.Dial("unix", sb.MgmtSock("br0"))
	if err != nil {
		t.Fatalf("dial %s: %v", sb.MgmtSock("br0"), err)
	}
	t.Cleanup(func() { c.Close() })
	oc := &otConn{t: t, c: c, r: bufio.NewReader(c), v: v, xid: 100}
	// HELLO with a version bitmap element naming only v.
	hello := []byte{byte(v), byte(TypeHello), 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hello[12:], 1<<v)
	oc.sendRaw(hello)
	h, _ := oc.read(5 * time.Second)
	if h.Type != TypeHello {
		t.Fatalf("first message is type %d, want HELLO", h.Type)
	}
	return oc
}

func (c *otConn) sendRaw(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send encodes m with a new xid and sends it.
func (c *otConn) send(m Message) uint32 {
	c.t.Helper()
	c.xid++
	b, err := Marshal(c.v, c.xid, m)
	if err != nil {
		c.t.Fatalf("Marshal %T: %v", m, err)
	}
	c.sendRaw(b)
	return c.xid
}

// read returns the next message other than an echo request, failing the
// test after timeout.
func (c *otConn) read(timeout time.Duration) (Header, []byte) {
	c.t.Helper()
	for {
		if err := c.c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			c.t.Fatal(err)
		}
		hdr := make([]byte, HeaderLen)
		if _, err := io.ReadFull(c.r, hdr); err != nil {
			c.t.Fatalf("read header: %v", err)
		}
		var h Header
		if err := h.UnmarshalBinary(hdr); err != nil {
			c.t.Fatal(err)
		}
		b := make([]byte, h.Length)
		copy(b, hdr)
		if _, err := io.ReadFull(c.r, b[HeaderLen:]); err != nil {
			c.t.Fatalf("read body: %v", err)
		}
		if h.Type == TypeEchoRequest {
			b[1] = byte(TypeEchoReply)
			c.sendRaw(b)
			continue
		}
		return h, b
	}
}

// barrier sends a barrier request and returns every message that arrives
// before its reply.
func (c *otConn) barrier() [][]byte {
	c.t.Helper()
	c.xid++
	xid := c.xid
	req := []byte{byte(c.v), byte(TypeBarrierRequest), 0, 8, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(req[4:], xid)
	c.sendRaw(req)
	var got [][]byte
	for {
		h, b := c.read(10 * time.Second)
		if h.Type == TypeBarrierReply && h.Xid == xid {
			return got
		}
		got = append(got, b)
	}
}

// mustApply sends messages and a barrier and fails on any error reply.
func (c *otConn) mustApply(ms ...Message) {
	c.t.Helper()
	for _, m := range ms {
		c.send(m)
	}
	for _, b := range c.barrier() {
		_, m, err := Unmarshal(b)
		if e, ok := m.(*OFError); ok {
			c.t.Fatalf("switch answered %s (%x)", e.Name(), b)
		}
		if err != nil {
			c.t.Fatalf("unexpected message %x: %v", b, err)
		}
	}
}

// multipart sends a multipart request and returns the raw reply messages
// and their merged reply.
func (c *otConn) multipart(m Message) ([][]byte, *MultipartReply) {
	c.t.Helper()
	xid := c.send(m)
	var raw [][]byte
	var parts []*MultipartReply
	for {
		h, b := c.read(10 * time.Second)
		if h.Xid != xid {
			continue
		}
		_, msg, err := Unmarshal(b)
		if err != nil {
			c.t.Fatalf("decode reply %x: %v", b, err)
		}
		r, ok := msg.(*MultipartReply)
		if !ok {
			c.t.Fatalf("reply is %T (%v)", msg, msg)
		}
		raw = append(raw, b)
		parts = append(parts, r)
		if !r.More() {
			break
		}
	}
	merged, err := MergeMultipartReplies(parts)
	if err != nil {
		c.t.Fatal(err)
	}
	return raw, merged
}

// enableAsync turns on asynchronous messages (packet-ins, flow monitor
// updates, port status) for this service connection: SET_CONFIG with
// miss_send_len 0xffff, then NXT_SET_PACKET_IN_FORMAT if format is not 0.
func (c *otConn) enableAsync(format PacketInFormat) {
	c.t.Helper()
	setConfig := []byte{byte(c.v), byte(TypeSetConfig), 0, 12, 0, 0, 0, 0, 0, 0, 0xff, 0xff}
	c.sendRaw(setConfig)
	if format != 0 {
		b := []byte{byte(c.v), byte(TypeExperimenter), 0, 20, 0, 0, 0, 0, 0, 0, 0x23, 0x20, 0, 0, 0, 16, 0, 0, 0, byte(format)}
		c.sendRaw(b)
	}
	c.barrier()
}

// waitMsg reads until a message satisfies ok or the deadline passes.
func (c *otConn) waitMsg(timeout time.Duration, what string, ok func(h Header, m Message) bool) []byte {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		h, b := c.read(time.Until(deadline))
		_, m, err := Unmarshal(b)
		if err != nil {
			c.t.Fatalf("decode %x: %v", b, err)
		}
		if ok(h, m) {
			return b
		}
	}
	c.t.Fatalf("no %s within %s", what, timeout)
	return nil
}

// otFixture is a stored capture: comments, expected text lines and hex
// messages.
type otFixture struct {
	comments []string
	want     []string
	msgs     [][]byte
}

// otFixturePath names a fixture file.
func otFixturePath(name string) string { return filepath.Join("testdata", name) }

// otSaveFixture stores f when NODEFLOW_UPDATE_FIXTURES is set. Format: '#'
// comment lines, '>' expected lines, and one message per hex line.
func otSaveFixture(t *testing.T, name string, f otFixture) {
	t.Helper()
	if os.Getenv("NODEFLOW_UPDATE_FIXTURES") == "" {
		return
	}
	var sb strings.Builder
	for _, c := range f.comments {
		fmt.Fprintf(&sb, "# %s\n", c)
	}
	for _, w := range f.want {
		fmt.Fprintf(&sb, ">%s\n", w)
	}
	for _, m := range f.msgs {
		fmt.Fprintf(&sb, "%s\n", hex.EncodeToString(m))
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otFixturePath(name), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", otFixturePath(name))
}

// otLoadFixture reads a fixture written by otSaveFixture.
func otLoadFixture(t testing.TB, name string) otFixture {
	t.Helper()
	data, err := os.ReadFile(otFixturePath(name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	var f otFixture
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
			f.comments = append(f.comments, strings.TrimSpace(line[1:]))
		case strings.HasPrefix(line, ">"):
			f.want = append(f.want, line[1:])
		case strings.TrimSpace(line) != "":
			f.msgs = append(f.msgs, otHex(t, line))
		}
	}
	return f
}

// otLines splits ovs-ofctl output into its non-empty lines, dropping reply
// headers such as "OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):".
func otLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "OFPST_") || strings.HasPrefix(l, "NXST_") {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// otSameLines compares two sets of lines regardless of order.
func otSameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		t.Errorf("%s:\n got:\n%s\nwant:\n%s", what, strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// otLiveFlows are installed with ovs-ofctl in table 10 and up; each line
// exercises one part of dump-flows' format.
var otLiveFlows = []string{
	"table=10,priority=32768,in_port=1,actions=output:2",
	"table=10,priority=0,actions=drop",
	"table=10,cookie=0xabc,idle_timeout=1000,hard_timeout=2000,priority=100,importance=7,send_flow_rem,ip,nw_src=10.0.0.1,actions=ct(commit,zone=5,nat(dst=10.0.0.2:80)),resubmit(,10)",
	"table=10,priority=5,check_overlap,reset_counts,no_packet_counts,no_byte_counts,tcp,actions=controller(userdata=01.02.03)",
	"table=10,cookie=0x1,priority=5,reg0=0x5/0xff,actions=goto_table:11",
	"table=10,cookie=0xffffffffffffffff,priority=65535,ct_state=+trk+est-new,ct_zone=5,ip,actions=ct(zone=5,nat,table=12)",
	"table=10,priority=300,udp6,ipv6_dst=fd00::1,udp_dst=53,actions=load:0x1->NXM_NX_REG1[0..3],group:1",
	"table=10,priority=20,arp,arp_tpa=10.0.0.1,arp_op=1,actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:aa:bb:cc:dd:ee:ff->eth_src,IN_PORT",
	"table=10,priority=21,tun_id=0x64,in_port=2,actions=set_field:10.0.0.9->tun_dst,output:1",
	"table=10,priority=22,tcp,tp_dst=0x1000/0xf000,actions=learn(table=20,hard_timeout=60,NXM_OF_ETH_DST[]=NXM_OF_ETH_SRC[],output:NXM_OF_IN_PORT[])",
	"table=10,priority=23,ip,nw_dst=10.96.0.0/12,actions=meter:1,write_metadata:0x5/0xff,goto_table:30",
}

func TestOVSLive(t *testing.T) {
	sb := otSandbox(t)
	otOfctlSB(t, sb, "-O", "OpenFlow15", "add-group", "br0", "group_id=1,type=all,bucket=output:1")
	otOfctlSB(t, sb, "-O", "OpenFlow15", "add-meter", "br0", "meter=1,pktps,band=type=drop,rate=10")
	for _, f := range otLiveFlows {
		otOfctlSB(t, sb, "-O", "OpenFlow15", "add-flow", "br0", f)
	}
	t.Run("flow stats", func(t *testing.T) { otLiveFlowStats(t, sb) })
	t.Run("group desc", func(t *testing.T) { otLiveGroupDesc(t, sb) })
	t.Run("big group", func(t *testing.T) { otLiveBigGroup(t, sb) })
	t.Run("meters", func(t *testing.T) { otLiveMeters(t, sb) })
	t.Run("port desc and status", func(t *testing.T) { otLivePorts(t, sb) })
	t.Run("packet-in2 and ct flush", func(t *testing.T) { otLivePacketIn(t, sb) })
	t.Run("error", func(t *testing.T) { otLiveError(t, sb) })
	t.Run("flow monitor", func(t *testing.T) { otLiveFlowMonitor(t, sb) })
	t.Run("flow removed", func(t *testing.T) { otLiveFlowRemoved(t, sb) })
}

// otLiveFlowStats decodes flow stats replies in both versions and compares
// each flow's String with dump-flows --no-stats.
func otLiveFlowStats(t *testing.T, sb *ovs.Sandbox) {
	// One flow installed by this package, to check the Key of what comes
	// back.
	mine := otCTFlow()
	mine.Table, mine.Instructions = 10, otApply(Output{Port: 1})
	mine.Match = NewMatch(EthType(EthTypeIPv4), IPProto(IPProtoTCP), IPv4Dst(otIP("10.96.0.10")), TCPDst(443), Reg(3, 1, 0xffffffff))
	c15 := otDial(t, sb, Version15)
	c15.mustApply(mine.AddMod())

	for _, v := range []Version{Version15, Version13} {
		c := c15
		if v == Version13 {
			c = otDial(t, sb, Version13)
		}
		req := NewFlowStatsRequest()
		req.Table = 10
		raw, reply := c.multipart(req)
		stats, err := reply.FlowStats()
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var got []string
		found := false
		for _, s := range stats {
			got = append(got, s.String())
			if s.Key() == mine.Key() {
				found = true
				want := mine
				if v == Version13 {
					want.Importance = 0
				}
				if s.String() != want.String() {
					t.Errorf("%s: our flow came back as %q, want %q", v, s.String(), want.String())
				}
			}
			if s.Duration < 0 || s.Duration > time.Hour {
				t.Errorf("%s: duration %v", v, s.Duration)
			}
		}
		if !found {
			t.Errorf("%s: flow with key %v not in the reply", v, mine.Key())
		}
		ver := map[Version]string{Version13: "OpenFlow13", Version15: "OpenFlow15"}[v]
		want := otLines(otOfctlSB(t, sb, "-O", ver, "dump-flows", "br0", "table=10", "--no-stats"))
		otSameLines(t, v.String()+" Flow.String vs dump-flows --no-stats", got, want)
		otSaveFixture(t, "flowstats_"+strings.ToLower(strings.ReplaceAll(v.String(), ".", ""))+".txt", otFixture{
			comments: append([]string{
				fmt.Sprintf("OFPST_FLOW reply (%s) from ovs-vswitchd 3.1.0 to a flow stats request for table 10, after", v),
				"ovs-ofctl -O OpenFlow15 add-flow br0 of each of these flows (and one flow mod from this package):",
			}, otLiveFlows...),
			want: want,
			msgs: raw,
		})
	}
}

// otLiveGroupDesc compares GroupEntry.String with dump-groups, and installs
// a group with this package.
func otLiveGroupDesc(t *testing.T, sb *ovs.Sandbox) {
	groups := []string{
		"group_id=2,type=select,selection_method=hash,fields(ip_src,ip_dst,tcp_src,tcp_dst),bucket=bucket_id:0,weight:5,actions=ct(commit,zone=7,nat(dst=10.0.0.2:80)),bucket=bucket_id:7,actions=output:2",
		"group_id=3,type=indirect,bucket=output:1",
		"group_id=4,type=ff,bucket=watch_port:1,output:1,bucket=watch_port:2,watch_group:3,output:2",
		"group_id=5,type=select,selection_method=dp_hash,selection_method_param=0x100000007,bucket=output:1",
		"group_id=6,type=select,selection_method=hash,selection_method_param=9,fields(eth_dst=ff:ff:ff:00:00:00,ip_src=255.255.0.0,ipv6_src),bucket=output:1",
		"group_id=7,type=select",
		"group_id=8,type=all,bucket=actions=drop",
		"group_id=9,type=select,bucket=weight:0,actions=output:1,bucket=weight:100,actions=output:2",
	}
	for _, g := range groups {
		otOfctlSB(t, sb, "-O", "OpenFlow15", "add-group", "br0", g)
	}
	c := otDial(t, sb, Version15)
	mine := otServiceGroup()
	mine.ID = 20
	c.mustApply(mine.AddMod())

	for _, v := range []Version{Version15, Version13} {
		cv := c
		if v == Version13 {
			cv = otDial(t, sb, Version13)
		}
		raw, reply := cv.multipart(&GroupDescRequest{GroupID: GroupAll})
		got, err := reply.GroupDesc()
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var lines []string
		for _, g := range got {
			s := g.String()
			if v == Version13 {
				s = otStripBucketIDs(s)
			}
			lines = append(lines, " "+s)
			if g.ID == mine.ID && v == Version15 && g.String() != mine.String() {
				t.Errorf("our group came back as %q, want %q", g.String(), mine.String())
			}
		}
		ver := map[Version]string{Version13: "OpenFlow13", Version15: "OpenFlow15"}[v]
		want := otLines(otOfctlSB(t, sb, "-O", ver, "dump-groups", "br0"))
		otSameLines(t, v.String()+" GroupEntry.String vs dump-groups", lines, want)
		otSaveFixture(t, "groupdesc_"+strings.ToLower(strings.ReplaceAll(v.String(), ".", ""))+".txt", otFixture{
			comments: append([]string{
				fmt.Sprintf("OFPST_GROUP_DESC reply (%s) from ovs-vswitchd 3.1.0, after ovs-ofctl -O OpenFlow15 add-group br0 of", v),
			}, append(append([]string{}, groups...), "group_id=1,type=all,bucket=output:1", "and a group mod from this package: "+mine.String())...),
			want: want,
			msgs: raw,
		})
	}
}

// otLiveBigGroup installs a 2,000-bucket select group split into an ADD and
// INSERT_BUCKET messages, then checks that Open vSwitch holds every bucket.
func otLiveBigGroup(t *testing.T, sb *ovs.Sandbox) {
	g := otBigGroup(2000)
	g.ID = 100
	mods, err := g.Mods(GroupAdd, Version15, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 2 {
		t.Fatalf("2000 buckets in %d message(s)", len(mods))
	}
	c := otDial(t, sb, Version15)
	msgs := make([]Message, len(mods))
	for i, m := range mods {
		msgs[i] = m
	}
	c.mustApply(msgs...)
	out := otOfctlSB(t, sb, "-O", "OpenFlow15", "dump-group-stats", "br0", "group_id=100")
	if n := strings.Count(out, "bucket"); n != 2000 {
		t.Errorf("dump-group-stats shows %d buckets, want 2000", n)
	}
	_, reply := c.multipart(&GroupStatsRequest{GroupID: 100})
	stats, err := reply.GroupStats()
	if err != nil || len(stats) != 1 || len(stats[0].Buckets) != 2000 {
		t.Errorf("group stats: %d entries, %v", len(stats), err)
	}
	// Replace the buckets with MODIFY + INSERT_BUCKET, then remove one.
	g.Buckets = g.Buckets[:1500]
	mods, err = g.Mods(GroupModify, Version15, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs = msgs[:0]
	for _, m := range mods {
		msgs = append(msgs, m)
	}
	msgs = append(msgs, &GroupMod{Command: GroupRemoveBucket, Type: g.Type, GroupID: g.ID, CommandBucketID: 7})
	c.mustApply(msgs...)
	_, reply = c.multipart(&GroupStatsRequest{GroupID: 100})
	if stats, err = reply.GroupStats(); err != nil || len(stats) != 1 || len(stats[0].Buckets) != 1499 {
		t.Errorf("after modify and remove: %+v, %v", stats, err)
	}
}

// otLiveMeters installs meters with ovs-ofctl and checks MeterEntry.String,
// and installs one with this package.
func otLiveMeters(t *testing.T, sb *ovs.Sandbox) {
	texts := []string{
		"meter=2,kbps,burst,stats,band=type=drop,rate=1000,burst_size=200",
		"meter=3,pktps,band=type=drop,rate=5",
	}
	for _, m := range texts {
		otOfctlSB(t, sb, "-O", "OpenFlow15", "add-meter", "br0", m)
	}
	c := otDial(t, sb, Version15)
	mine := MeterEntry{ID: 4, Flags: MeterFlagPktps | MeterFlagBurst, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 100, BurstSize: 200}}}
	c.mustApply(mine.Mod(MeterAdd))
	_, reply := c.multipart(&MeterConfigRequest{MeterID: MeterAll})
	meters, err := reply.MeterConfig()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range meters {
		got = append(got, m.String())
	}
	otSameLines(t, "meters", got, append([]string{"meter=1,pktps,band=type=drop,rate=10", mine.String()}, texts...))
	_, reply = c.multipart(&MeterStatsRequest{MeterID: 2})
	if stats, err := reply.MeterStats(); err != nil || len(stats) != 1 || stats[0].MeterID != 2 || len(stats[0].Bands) != 1 {
		t.Errorf("meter stats: %+v, %v", stats, err)
	}
}

// otLivePorts checks port desc against dump-ports-desc and decodes the
// port status messages of a new port.
func otLivePorts(t *testing.T, sb *ovs.Sandbox) {
	for _, v := range []Version{Version15, Version13} {
		c := otDial(t, sb, v)
		raw, reply := c.multipart(&PortDescRequest{PortNo: PortAny})
		ports, err := reply.PortDesc()
		if err != nil {
			t.Fatal(err)
		}
		ver := map[Version]string{Version13: "OpenFlow13", Version15: "OpenFlow15"}[v]
		out := otOfctlSB(t, sb, "-O", ver, "dump-ports-desc", "br0")
		var want []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "addr:") {
				want = append(want, strings.TrimSpace(l))
			}
		}
		var got []string
		for _, p := range ports {
			got = append(got, p.String())
		}
		otSameLines(t, v.String()+" ports", got, want)
		if v == Version15 {
			otSaveFixture(t, "portdesc_of15.txt", otFixture{
				comments: []string{"OFPST_PORT_DESC reply (OF1.5) from ovs-vswitchd 3.1.0: br0 with dummy ports p1 and p2"},
				want:     want, msgs: raw,
			})
		}
	}
	c := otDial(t, sb, Version15)
	c.enableAsync(0)
	if out, err := sb.Vsctl("add-port", "br0", "p3", "--", "set", "interface", "p3", "type=dummy", "ofport_request=3"); err != nil {
		t.Fatalf("add-port: %v: %s", err, out)
	}
	b := c.waitMsg(10*time.Second, "port status ADD for p3", func(h Header, m Message) bool {
		ps, ok := m.(*PortStatus)
		return ok && ps.Reason == PortAdded && ps.Port.Name == "p3" && ps.Port.No == 3
	})
	otSaveFixture(t, "portstatus_of15.txt", otFixture{
		comments: []string{"OFPT_PORT_STATUS (OF1.5) from ovs-vswitchd 3.1.0 after ovs-vsctl add-port br0 p3 (type=dummy, ofport 3)"},
		msgs:     [][]byte{b},
	})
}

// otLivePacketIn triggers NXT_PACKET_IN2 and OFPT_PACKET_IN with a
// packet-out through a ct() pipeline, checks the metadata accessors, then
// flushes the conntrack zone.
func otLivePacketIn(t *testing.T, sb *ovs.Sandbox) {
	otOfctlSB(t, sb, "-O", "OpenFlow15", "add-flow", "br0", "table=0,priority=50,in_port=CONTROLLER,udp,actions=ct(commit,zone=5,exec(set_field:0x42->ct_mark),table=40)")
	otOfctlSB(t, sb, "-O", "OpenFlow15", "add-flow", "br0", "table=40,cookie=0x4040,priority=1,actions=set_field:0x1234->reg3,controller(userdata=01.02.03)")
	nx := otDial(t, sb, Version15)
	nx.enableAsync(PacketInFormatNXT2)
	std := otDial(t, sb, Version15)
	std.enableAsync(PacketInFormatStandard)

	frame := otFrame(t)
	out := otDial(t, sb, Version15)
	out.mustApply(&PacketOut{InPort: PortController, Actions: []Action{Output{Port: PortTable}}, Data: frame})

	for _, c := range []*otConn{nx, std} {
		b := c.waitMsg(10*time.Second, "packet-in", func(h Header, m Message) bool { _, ok := m.(*PacketIn); return ok })
		p := otUnmarshal[*PacketIn](t, b)
		wantFormat := PacketInFormatNXT2
		if c == std {
			wantFormat = PacketInFormatStandard
		}
		checks := []struct {
			name      string
			got, want any
		}{
			{"format", p.Format, wantFormat},
			{"in_port", p.InPort(), PortController},
			{"table", p.Table, uint8(40)},
			{"cookie", p.Cookie, uint64(0x4040)},
			{"reason", p.Reason, PacketInAction},
			{"reg3", p.Reg(3), uint32(0x1234)},
			{"ct_state", p.CtState(), CtNew | CtTrk},
			{"ct_zone", p.CtZone(), uint16(5)},
			{"ct_mark", p.CtMark(), uint32(0x42)},
			{"ct_nw_src", p.CtNwSrc(), otIP("10.0.0.1")},
			{"ct_nw_dst", p.CtNwDst(), otIP("10.0.0.2")},
			{"ct_nw_proto", p.CtNwProto(), uint8(17)},
			{"ct_tp_src", p.CtTpSrc(), uint16(1000)},
			{"ct_tp_dst", p.CtTpDst(), uint16(80)},
			{"total_len", p.TotalLen, uint32(len(frame))},
			{"data", hex.EncodeToString(p.Data), hex.EncodeToString(frame)},
		}
		if c == nx {
			checks = append(checks, struct {
				name      string
				got, want any
			}{"userdata", hex.EncodeToString(p.Userdata), "010203"})
		}
		for _, ck := range checks {
			if fmt.Sprint(ck.got) != fmt.Sprint(ck.want) {
				t.Errorf("%d: %s = %v, want %v", p.Format, ck.name, ck.got, ck.want)
			}
		}
		name := "packetin2_of15.txt"
		if c == std {
			name = "packetin_of15.txt"
		}
		otSaveFixture(t, name, otFixture{
			comments: []string{
				fmt.Sprintf("packet-in (format %d) from ovs-vswitchd 3.1.0 on an OF1.5 connection, triggered by a packet-out", p.Format),
				"(in_port=CONTROLLER, actions=output:TABLE, a 42-byte UDP frame 10.0.0.1:1000 -> 10.0.0.2:80) through:",
				"table=0,priority=50,in_port=CONTROLLER,udp,actions=ct(commit,zone=5,exec(set_field:0x42->ct_mark),table=40)",
				"table=40,cookie=0x4040,priority=1,actions=set_field:0x1234->reg3,controller(userdata=01.02.03)",
				"expected: in_port=CONTROLLER reg3=0x1234 ct_state=new|trk ct_zone=5 ct_mark=0x42 ct tuple 10.0.0.1:1000 -> 10.0.0.2:80 udp",
			},
			msgs: [][]byte{b},
		})
	}

	// The committed connection is in zone 5 until flushed.
	ctEntries := func() string {
		out, err := sb.Appctl("dpctl/dump-conntrack", "-m", "zone=5")
		if err != nil {
			t.Fatalf("dump-conntrack: %v: %s", err, out)
		}
		return out
	}
	if !strings.Contains(ctEntries(), "dst=10.0.0.2") {
		t.Fatalf("no conntrack entry in zone 5: %q", ctEntries())
	}
	out.mustApply(&CtFlush{Zone: otPtr[uint16](6)})
	if !strings.Contains(ctEntries(), "dst=10.0.0.2") {
		t.Errorf("flushing zone 6 removed zone 5's entry")
	}
	out.mustApply(&CtFlush{Zone: otPtr[uint16](5), IPProto: 17, Orig: CtTuple{Src: otIP("10.0.0.1"), Dst: otIP("10.0.0.2"), SrcPort: 1000, DstPort: 80}})
	if s := ctEntries(); strings.Contains(s, "dst=10.0.0.2") {
		t.Errorf("ct flush of the tuple left %q", s)
	}
	// Once more, to flush with the zone message.
	out.mustApply(&PacketOut{InPort: PortController, Actions: []Action{Output{Port: PortTable}}, Data: frame})
	if !strings.Contains(ctEntries(), "dst=10.0.0.2") {
		t.Fatalf("no conntrack entry after the second packet-out")
	}
	out.mustApply(&CtFlushZone{Zone: 5})
	if s := ctEntries(); strings.Contains(s, "dst=10.0.0.2") {
		t.Errorf("ct flush zone left %q", s)
	}
}

func otPtr[T any](v T) *T { return &v }

// otLiveError captures the error Open vSwitch sends for a flow that uses a
// missing group.
func otLiveError(t *testing.T, sb *ovs.Sandbox) {
	c := otDial(t, sb, Version15)
	f := Flow{Table: 50, Priority: 1, Instructions: otApply(Group{ID: 999})}
	xid := c.send(f.AddMod())
	msgs := c.barrier()
	if len(msgs) != 1 {
		t.Fatalf("%d messages before the barrier reply, want 1 error", len(msgs))
	}
	h, m, err := Unmarshal(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	e, ok := m.(*OFError)
	if !ok || h.Xid != xid || e.Name() != "OFPBAC_BAD_OUT_GROUP" {
		t.Fatalf("got %T %v (xid %d), want OFPBAC_BAD_OUT_GROUP for xid %d", m, m, h.Xid, xid)
	}
	otSaveFixture(t, "error_of15.txt", otFixture{
		comments: []string{"OFPT_ERROR (OF1.5) from ovs-vswitchd 3.1.0 for a flow mod whose actions name the missing group 999:",
			f.String()},
		want: []string{"OFPBAC_BAD_OUT_GROUP"},
		msgs: msgs,
	})
}

// otLiveFlowMonitor starts an OFPMP_FLOW_MONITOR on table 60 and checks the
// updates for flows that ovs-ofctl adds, modifies and deletes, and the
// abbreviated update for a change made on the monitoring connection.
func otLiveFlowMonitor(t *testing.T, sb *ovs.Sandbox) {
	c := otDial(t, sb, Version15)
	c.enableAsync(0)
	req := NewFlowMonitorRequest(7, MonitorInitial|MonitorAdded|MonitorRemoved|MonitorModified|MonitorInstructions)
	req.Table = 60
	_, initial := c.multipart(req)
	if u, err := initial.FlowUpdates(); err != nil || len(u) != 0 {
		t.Fatalf("initial updates %v, %v", u, err)
	}
	otOfctlSB(t, sb, "-O", "OpenFlow15", "add-flow", "br0", "table=60,priority=99,cookie=0x77,ip,actions=drop")
	otOfctlSB(t, sb, "-O", "OpenFlow15", "mod-flows", "br0", "table=60,ip,actions=output:1")
	otOfctlSB(t, sb, "-O", "OpenFlow15", "del-flows", "br0", "table=60")
	xid := c.send(Flow{Table: 60, Priority: 5, Match: NewMatch(InPort(1))}.AddMod())

	want := []string{
		"ADDED cookie=0x77, table=60, priority=99,ip actions=drop",
		"MODIFIED cookie=0x77, table=60, priority=99,ip actions=output:1",
		"DELETED reason=delete cookie=0x77, table=60, priority=99,ip actions=output:1",
		fmt.Sprintf("ABBREV xid=0x%x", xid),
	}
	var got []string
	var raw [][]byte
	for len(got) < len(want) {
		b := c.waitMsg(10*time.Second, "flow update", func(h Header, m Message) bool {
			r, ok := m.(*MultipartReply)
			return ok && r.Type == MultipartFlowMonitor
		})
		raw = append(raw, b)
		u, err := otUnmarshal[*MultipartReply](t, b).FlowUpdates()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range u {
			got = append(got, x.String())
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("updates:\n got %q\nwant %q", got, want)
	}
	otSaveFixture(t, "flowmonitor_of15.txt", otFixture{
		comments: []string{
			"OFPMP_FLOW_MONITOR replies (OF1.5) from ovs-vswitchd 3.1.0 to monitor 7 on table 60 (initial,add,delete,modify,actions)",
			"after: add-flow table=60,priority=99,cookie=0x77,ip,actions=drop; mod-flows table=60,ip,actions=output:1;",
			"del-flows table=60; and a flow mod on the monitoring connection itself (abbreviated update with its xid)",
		},
		want: want,
		msgs: raw,
	})
	// Cancel the monitor; OVS sends no reply on success.
	cancel := &FlowMonitorRequest{ID: 7, OutPort: PortAny, OutGroup: GroupAny, Table: TableAll, Command: FlowMonitorDelete}
	c.mustApply(cancel)
}

// otLiveFlowRemoved installs a flow with a 1-second hard timeout and
// send_flow_rem and decodes the flow removed message.
func otLiveFlowRemoved(t *testing.T, sb *ovs.Sandbox) {
	c := otDial(t, sb, Version15)
	c.enableAsync(0)
	f := Flow{Table: 70, Priority: 7, Cookie: 0x99, HardTimeout: 1, Flags: FlowSendFlowRem, Match: NewMatch(InPort(1))}
	c.mustApply(f.AddMod())
	b := c.waitMsg(10*time.Second, "flow removed", func(h Header, m Message) bool { _, ok := m.(*FlowRemoved); return ok })
	r := otUnmarshal[*FlowRemoved](t, b)
	if r.Reason != FlowRemovedHardTimeout || r.Cookie != 0x99 || r.Table != 70 || r.Priority != 7 || r.HardTimeout != 1 ||
		r.Duration < time.Second || r.Match.String() != "in_port=1" {
		t.Errorf("flow removed: %v", r)
	}
	otSaveFixture(t, "flowremoved_of15.txt", otFixture{
		comments: []string{"OFPT_FLOW_REMOVED (OF1.5) from ovs-vswitchd 3.1.0 for " + f.String()},
		msgs:     [][]byte{b},
	})
}

// TestFixtures decodes the stored captures (see TestOVSLive) without a
// switch.
func TestFixtures(t *testing.T) {
	for _, name := range []string{"flowstats_of15.txt", "flowstats_of13.txt"} {
		t.Run(name, func(t *testing.T) {
			f := otLoadFixture(t, name)
			var parts []*MultipartReply
			for _, b := range f.msgs {
				parts = append(parts, otUnmarshal[*MultipartReply](t, b))
			}
			r, err := MergeMultipartReplies(parts)
			if err != nil {
				t.Fatal(err)
			}
			stats, err := r.FlowStats()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range stats {
				got = append(got, s.String())
			}
			otSameLines(t, "flows", got, f.want)
		})
	}
	for _, name := range []string{"groupdesc_of15.txt", "groupdesc_of13.txt"} {
		t.Run(name, func(t *testing.T) {
			f := otLoadFixture(t, name)
			groups, err := otUnmarshal[*MultipartReply](t, f.msgs[0]).GroupDesc()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range groups {
				s := g.String()
				if name == "groupdesc_of13.txt" {
					s = otStripBucketIDs(s)
				}
				got = append(got, " "+s)
			}
			otSameLines(t, "groups", got, f.want)
		})
	}
	t.Run("packetin2_of15.txt", func(t *testing.T) {
		p := otUnmarshal[*PacketIn](t, otLoadFixture(t, "packetin2_of15.txt").msgs[0])
		if p.Format != PacketInFormatNXT2 || p.Reg(3) != 0x1234 || p.CtState() != CtNew|CtTrk || p.CtZone() != 5 || p.CtMark() != 0x42 ||
			p.InPort() != PortController || string(p.Userdata) != "\x01\x02\x03" || p.CtTpDst() != 80 || p.CtNwSrc() != otIP("10.0.0.1") {
			t.Errorf("decoded %+v", p)
		}
	})
	t.Run("packetin_of15.txt", func(t *testing.T) {
		p := otUnmarshal[*PacketIn](t, otLoadFixture(t, "packetin_of15.txt").msgs[0])
		if p.Format != PacketInFormatStandard || p.Reg(3) != 0x1234 || p.CtZone() != 5 || p.Table != 40 || p.Cookie != 0x4040 {
			t.Errorf("decoded %+v", p)
		}
	})
	t.Run("error_of15.txt", func(t *testing.T) {
		f := otLoadFixture(t, "error_of15.txt")
		e := otUnmarshal[*OFError](t, f.msgs[0])
		if e.Name() != f.want[0] {
			t.Errorf("error %s, want %s", e.Name(), f.want[0])
		}
		var oe *OFError
		if !errors.As(error(e), &oe) {
			t.Error("OFError is not an error")
		}
	})
	t.Run("flowmonitor_of15.txt", func(t *testing.T) {
		f := otLoadFixture(t, "flowmonitor_of15.txt")
		var got []string
		for _, b := range f.msgs {
			u, err := otUnmarshal[*MultipartReply](t, b).FlowUpdates()
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range u {
				got = append(got, x.String())
			}
		}
		if !slices.Equal(got, f.want) {
			t.Errorf("updates:\n got %q\nwant %q", got, f.want)
		}
	})
	t.Run("portdesc_of15.txt", func(t *testing.T) {
		f := otLoadFixture(t, "portdesc_of15.txt")
		ports, err := otUnmarshal[*MultipartReply](t, f.msgs[0]).PortDesc()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range ports {
			got = append(got, p.String())
		}
		otSameLines(t, "ports", got, f.want)
	})
	t.Run("portstatus_of15.txt", func(t *testing.T) {
		ps := otUnmarshal[*PortStatus](t, otLoadFixture(t, "portstatus_of15.txt").msgs[0])
		if ps.Reason != PortAdded || ps.Port.Name != "p3" || ps.Port.No != 3 {
			t.Errorf("decoded %+v", ps)
		}
	})
	t.Run("flowremoved_of15.txt", func(t *testing.T) {
		r := otUnmarshal[*FlowRemoved](t, otLoadFixture(t, "flowremoved_of15.txt").msgs[0])
		if r.Reason != FlowRemovedHardTimeout || r.Cookie != 0x99 || r.Table != 70 {
			t.Errorf("decoded %v", r)
		}
	})
}
