package serviceflows

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

func TestAddressAndCIDRFlows(t *testing.T) {
	st, err := AddressFlows(netip.MustParseAddr("10.96.0.10"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(st.Flows[0].String()), "table=30, priority=150,ct_state=+new+trk,ip,nw_dst=10.96.0.10 actions=set_field:0x2000/0xf000->reg0,resubmit(,120),controller(id=28262,userdata=02.00.00.00.00,meter_id=2)"; !strings.HasPrefix(got, strings.TrimSuffix(want, "id=28262,userdata=02.00.00.00.00,meter_id=2)")) || !strings.Contains(got, "userdata=02.00.00.00.00") || !strings.Contains(got, "meter_id=2") {
		t.Errorf("address flow:\n got %s\nwant %s", got, want)
	}
	st6, err := AddressFlows(netip.MustParseAddr("fd02::10"))
	if err != nil || !strings.Contains(st6.Flows[0].String(), "ipv6,ipv6_dst=fd02::10") {
		t.Errorf("IPv6 address flow: %v %v", st6.Flows, err)
	}
	cidrs, err := CIDRFlows([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd02::/112")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range cidrs.Flows {
		got = append(got, strings.TrimSpace(f.String()))
	}
	want := []string{"table=30, priority=110,ip,nw_dst=10.96.0.0/16 actions=drop", "table=30, priority=110,ipv6,ipv6_dst=fd02::/112 actions=drop"}
	if !slices.Equal(got, want) {
		t.Errorf("CIDR flows:\n got %q\nwant %q", got, want)
	}
	for _, bad := range []string{"10.96.0.1/16", "::ffff:10.96.0.0/112"} {
		if _, err := CIDRFlows([]netip.Prefix{netip.MustParsePrefix(bad)}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("CIDRFlows(%s): %v, want an error naming it", bad, err)
		}
	}
	if _, err := AddressFlows(netip.Addr{}); err == nil {
		t.Error("AddressFlows(invalid): no error")
	}
	for _, o := range []string{AddressOwner(netip.MustParseAddr("fd02::10")), CIDROwner} {
		if f, err := plan.OwnerFeature(o); err != nil || f != plan.FeatureService {
			t.Errorf("owner %q: feature %v, %v; want Service", o, f, err)
		}
	}
}

// TestOVSServiceAddressGuards traces, over the golden services plus the
// address and CIDR guards in a sandbox, what reaches table 30 addressed
// to a service CIDR: a served port is load-balanced, an unserved port of
// a ClusterIP is rejected (metered packet-in), and an address no Service
// holds is dropped; none of them reaches the routing table.
func TestOVSServiceAddressGuards(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-port", "br0", "br0-p1", "--", "set", "interface", "br0-p1", "type=dummy", "ofport_request=1",
		"--", "add-port", "br0", "br0-p2", "--", "set", "interface", "br0-p2", "type=dummy", "ofport_request=2"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-meter", "br0", RejectMeter().String()); err != nil {
		t.Fatal(err)
	}
	alloc := plan.NewIDAllocator(plan.ServiceGroups)
	var flows, groups []string
	addrs := map[netip.Addr]bool{}
	for _, tc := range goldenCases() {
		out, err := Build(testNode(), tc.in, alloc.Get)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range out.Pod.Flows {
			flows = append(flows, strings.TrimSpace(f.String()))
		}
		for _, g := range out.Pod.Groups {
			groups = append(groups, g.String())
		}
		for _, a := range tc.in.Port.ClusterIPs {
			addrs[a] = true
		}
	}
	for a := range addrs {
		st, err := AddressFlows(a)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, strings.TrimSpace(st.Flows[0].String()))
	}
	st, err := CIDRFlows([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd02::/112")})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st.Flows {
		flows = append(flows, strings.TrimSpace(f.String()))
	}
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-groups", "br0", writeLines(t, "groups", groups)); err != nil {
		t.Fatal(err)
	}
	// The stub routes everything else out of the patch port, as the
	// default route would.
	pipeline := append(slices.Clone(stubPipeline),
		"table=60, priority=10,ip actions=output:2", "table=60, priority=10,ipv6 actions=output:2")
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flows", "br0", writeLines(t, "flows", slices.Concat(pipeline, flows))); err != nil {
		t.Fatal(err)
	}
	const pod = "in_port=1,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,"
	for _, tr := range []struct {
		name, flow string
		want       string // in the trace
		datapath   string // the last datapath actions must contain it ("": not checked)
	}{
		{"served port", pod + "tcp,nw_src=10.128.0.5,nw_dst=10.96.0.10,tp_src=40000,tp_dst=80", "group:", ""},
		{"unserved port of a ClusterIP", pod + "tcp,nw_src=10.128.0.5,nw_dst=10.96.0.10,tp_src=40000,tp_dst=81", "priority 150", "userspace("},
		{"unserved port of an IPv6 ClusterIP", pod + "udp6,ipv6_src=fd01::5,ipv6_dst=fd02::10,udp_src=40000,udp_dst=81", "priority 150", "userspace("},
		{"ping to a ClusterIP", pod + "icmp,nw_src=10.128.0.5,nw_dst=10.96.0.10,icmp_type=8", "priority 150", "userspace("},
		{"address no Service holds", pod + "tcp,nw_src=10.128.0.5,nw_dst=10.96.0.99,tp_src=40000,tp_dst=80", "priority 110", "drop"},
		{"IPv6 address no Service holds", pod + "tcp6,ipv6_src=fd01::5,ipv6_dst=fd02::99,tp_src=40000,tp_dst=80", "priority 110", "drop"},
		{"host traffic through the patch port", "in_port=2,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:01,udp,nw_src=169.254.169.2,nw_dst=10.96.200.1,udp_src=40000,udp_dst=53", "priority 110", "drop"},
	} {
		t.Run(tr.name, func(t *testing.T) {
			out, err := sb.Appctl("ofproto/trace", "br0", flowtest.NewConnTrace(tr.flow))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, tr.want) {
				t.Errorf("trace lacks %q:\n%s", tr.want, out)
			}
			if tr.datapath == "" {
				return
			}
			dp := out[strings.LastIndex(out, "Datapath actions:"):]
			if !strings.Contains(dp, tr.datapath) || strings.Contains(out, "output:2") {
				t.Errorf("datapath actions %q, want %q and never the patch port:\n%s", strings.TrimSpace(dp), tr.datapath, out)
			}
		})
	}
}
