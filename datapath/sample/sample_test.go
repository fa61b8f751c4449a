package sample

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
)

// TestBuild checks that the sample builds, that the plan-checking stores
// accept every owner, and that each feature's owners are there.
func TestBuild(t *testing.T) {
	d, err := Build(Default())
	if err != nil {
		t.Fatal(err)
	}
	for b, want := range map[plan.Bridge][]string{
		plan.Pod: {"pipeline/br0", "node/local", "node/remote/node2", "node/nd", "node/nexthops",
			"pod/sample/a", "pod/sample/b", "vnet/tenant/v1", "vnet/tenant/v2", "vnet/tenant/v6", "vnet/_vni/8388609", "service/_meters", "service/sample/web:http/TCP", "service/sample/empty:/SCTP"},
		plan.Gateway: {"pipeline/breth0", "gateway/defaults", "service-gateway/sample/web:http/TCP"},
	} {
		owners := d.Store(b).Owners("")
		for _, o := range want {
			if !slices.Contains(owners, o) {
				t.Errorf("%s: no owner %s among %v", b, o, owners)
			}
		}
		if errs := d.Store(b).Errors(); len(errs) > 0 {
			t.Errorf("%s: %v", b, errs)
		}
	}
	// The idled port is held back: its br0 flows drop, nothing else.
	for _, o := range d.Pod.Owners("") {
		if !strings.HasPrefix(o, "service/") || !strings.Contains(o, "/idled:") {
			continue
		}
		st, _ := d.Pod.Get(o)
		for _, f := range st.Flows {
			if !strings.HasSuffix(f.String(), "actions=drop") || f.Priority != uint16(plan.PriorityServiceNoEndpoints) {
				t.Errorf("idled port's flow %s: want a drop at priority %d", f.String(), plan.PriorityServiceNoEndpoints)
			}
		}
	}
	// Nothing for a service CIDR passes table 30 unjudged.
	for _, o := range []string{serviceflows.CIDROwner, serviceflows.AddressOwner(netip.MustParseAddr("10.96.0.10"))} {
		if _, ok := d.Pod.Get(o); !ok {
			t.Errorf("br0: no owner %s", o)
		}
	}
}

// Values that vary between nodes and objects, which a shape leaves out.
var (
	ipv4RE = regexp.MustCompile(`\b\d+\.\d+\.\d+\.\d+\b`)
	ipv6RE = regexp.MustCompile(`[0-9a-f]*::[0-9a-f]|[0-9a-f]+:[0-9a-f]+:[0-9a-f]+:`)
	hexRE  = regexp.MustCompile(`0x[0-9a-f]+`)
)

// TestShapes checks that shapes carry no node or object values, keep the
// plan's values, and are deduplicated.
func TestShapes(t *testing.T) {
	d, err := Build(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range plan.Bridges {
		shapes := d.Shapes(b)
		seen := map[Shape]bool{}
		for _, s := range shapes {
			text := s.Match + " " + s.Actions
			for _, re := range []*regexp.Regexp{ipv4RE, ipv6RE, hexRE} {
				if m := re.FindString(text); m != "" {
					t.Errorf("%s table %d: shape %q keeps the value %s", b, s.Table, text, m)
				}
			}
			if seen[s] {
				t.Errorf("%s: shape %+v twice", b, s)
			}
			seen[s] = true
			if _, ok := plan.LookupTable(b, s.Table); !ok {
				t.Errorf("%s: shape in undeclared table %d", b, s.Table)
			}
		}
		if !slices.IsSortedFunc(shapes, func(x, y Shape) int {
			if x.Table != y.Table {
				return int(x.Table) - int(y.Table)
			}
			return int(y.Priority) - int(x.Priority)
		}) {
			t.Errorf("%s: shapes not sorted by table and priority", b)
		}
	}
	// A few shapes, spelled out.
	want := map[plan.Bridge][]Shape{
		plan.Pod: {
			{plan.PodClassifier, 100, "in_port=vxlan0", "set PktSource=FromTunnel,goto_table:15", plan.FeatureNode},
			{plan.PodClassifier, 100, "in_port=pod", "set PktSource=FromPod,goto_table:10", plan.FeaturePod},
			{plan.PodServiceLB, 190, "ct_state=+new+trk,sctp,nw_dst,tp_dst", "set ServiceID,set PuntCategory=PuntReject,resubmit(,120),controller(reject,meter_id=2)", plan.FeatureService},
			{plan.PodPunt, 100, "PuntCategory=PuntReject,in_port=pod", "meter(reject,pod),set PuntSource,set PuntNamespace,resubmit(,121)", plan.FeaturePod},
			{plan.PodPunt, 100, "PuntCategory=PuntReject,in_port=vxlan0", "meter(reject,vxlan0),set PuntSource", plan.FeatureNode},
			{plan.PodPunt, 100, "ip,PuntCategory=PuntDNS,nw_dst", "meter(dns,pod),set PuntSource,set PuntNamespace,resubmit(,121)", plan.FeaturePod},
			{plan.PodPuntNamespace, 100, "PuntCategory=PuntReject,PuntNamespace", "meter(reject,namespace)", plan.FeaturePod},
			{plan.PodServiceLB, 200, "ct_state=+new+trk,ct_nw_dst,ct_nw_proto=17,ct_tp_dst,ip,EndpointSelected=0,AffinityChecked=AffinityLookedUp", "group", plan.FeatureService},
			{plan.PodEndpointDNAT, 100, "udp,EndpointIPv4,EndpointPort,ServiceID", "learn(table=31),ct(commit,table=40,zone=65000,nat(dst))", plan.FeatureService},
			{plan.PodSNAT, 130, "ct_state=+new+trk+dnat,ip,PktSource=FromGateway,nw_dst", "ct(commit,table=45,zone=65001,nat(src))", plan.FeatureNode},
			{plan.PodSNAT, 200, "ct_state=+new+trk+dnat,ip,nw_src,nw_dst", "ct(commit,table=45,zone=65001,nat(src))", plan.FeaturePod},
			{plan.PodTunnelIngress, 100, "tun_id,tun_src,in_port=vxlan0", "move tun_id[0..23]->NamespaceID,goto_table:20", plan.FeatureNode},
			{plan.PodTunnelIngress, 200, "tun_id,tun_src,in_port=vxlan0", "set NamespaceID,goto_table:110", plan.FeatureVNet},
			{plan.PodVNetForward, 100, "ip,NamespaceID,VNetLocal=FromLocalAttachment,dl_dst,nw_dst", "set tun_dst,set tun_id,output:vxlan0", plan.FeatureVNet},
			{plan.PodARP, 100, "icmp6,icmp_type=135", "output:mp0,output:pod...", plan.FeatureNode},
			{plan.PodServiceLB, 0, "", "goto_table:40", plan.FeaturePipeline},
		},
		plan.Gateway: {
			{plan.GatewayClassifier, 100, "ip,in_port=patch", "ct(commit,zone=64000,exec(set GatewayOrigin=OriginRouter)),output:uplink", plan.FeatureGateway},
			{plan.GatewayUplinkReturn, 100, "ct_state=+est+trk,GatewayOrigin=OriginHost,ip", "LOCAL", plan.FeatureGateway},
			{plan.GatewayClassifier, 110, "tcp,in_port=uplink,nw_dst,tp_dst", "output:patch", plan.FeatureServiceGateway},
		},
	}
	for b, ws := range want {
		shapes := d.Shapes(b)
		for _, w := range ws {
			if !slices.Contains(shapes, w) {
				t.Errorf("%s: no shape %+v", b, w)
			}
		}
	}
}
