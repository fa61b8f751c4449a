// Package flowtest holds checks shared by the flow builders' tests.
package flowtest

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
)

// InstallAndCompare replaces every flow on bridge with fs, sent over
// nodeflow's own OpenFlow connection in one bundle, then checks that
// `ovs-ofctl -O OpenFlow15 dump-flows --no-stats` prints exactly the lines
// Flow.String renders (in any order): the encoding is what the builders
// mean, and golden files read like a dump.
func InstallAndCompare(t *testing.T, sb *ovs.Sandbox, bridge string, fs []openflow.Flow) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := logrus.New()
	l.SetOutput(io.Discard)
	c, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock(bridge), ofconn.Options{Logger: l})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs := []openflow.Message{openflow.DeleteCookieMod(openflow.TableAll, 0, 0)}
	for _, f := range fs {
		msgs = append(msgs, f.AddMod())
	}
	if err := c.Bundle(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	out, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "--no-stats", bridge)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, " ") {
			got = append(got, line)
		}
	}
	for _, f := range fs {
		want = append(want, f.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("dump-flows %s differs from Flow.String:\n--- dump\n%s\n--- built\n%s", bridge, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// NewConnTrace returns an ofproto/trace flow for the first packet of a new
// TCP or UDP connection: flow (in ovs-ofctl's syntax, with tcp, udp, tcp6
// or udp6 and its addresses and ports) plus the connection tuple that
// conntrack gives such a packet (ct_state=new|trk, ct_nw_proto, ct_nw_src
// or ct_ipv6_src, and so on). ofproto/trace does not run conntrack: it
// resumes after ct() with the tuple the flow it was given holds, and the
// service flows match and hash that tuple. Other flows come back as they
// are.
func NewConnTrace(flow string) string {
	fields := map[string]string{}
	var proto string
	for _, kv := range strings.Split(flow, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			switch kv {
			case "tcp", "udp", "tcp6", "udp6":
				proto = kv
			}
			continue
		}
		fields[k] = v
	}
	if proto == "" {
		return flow
	}
	l4 := strings.TrimSuffix(proto, "6")
	number := map[string]string{"tcp": "6", "udp": "17"}[l4]
	port := func(dir string) string {
		if v, ok := fields["tp_"+dir]; ok {
			return v
		}
		return fields[l4+"_"+dir]
	}
	src, dst, prefix := fields["nw_src"], fields["nw_dst"], "ct_nw_"
	if strings.HasSuffix(proto, "6") {
		src, dst, prefix = fields["ipv6_src"], fields["ipv6_dst"], "ct_ipv6_"
	}
	return flow + ",ct_state=new|trk,ct_nw_proto=" + number +
		"," + prefix + "src=" + src + "," + prefix + "dst=" + dst +
		",ct_tp_src=" + port("src") + ",ct_tp_dst=" + port("dst")
}

// Render returns flows as golden files hold them: Flow.String, one a line.
func Render(fs []openflow.Flow) string {
	var sb strings.Builder
	for _, f := range fs {
		sb.WriteString(f.String())
		sb.WriteByte('\n')
	}
	return sb.String()
}

// MAC parses a fixture's MAC address; it panics on a bad one.
func MAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}
