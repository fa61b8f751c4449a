package puntflows_test

import (
	"net/netip"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/datapath/reconcile"
)

func render(st reconcile.State) string {
	var sb strings.Builder
	for _, m := range st.Meters {
		sb.WriteString(m.String() + "\n")
	}
	for _, f := range st.Flows {
		sb.WriteString(strings.TrimSpace(f.String()) + "\n")
	}
	return sb.String()
}

// A pod's punt stage: for each category its meter, keyed by its port; the
// DNS meter applies to what is sent to its addresses; what passes goes on
// to its namespace's meters.
func TestSourceStateOfAPod(t *testing.T) {
	st, err := puntflows.SourceState(puntflows.Source{Port: 5, Namespace: 7,
		Dsts: []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00:10:244::5")}})
	if err != nil {
		t.Fatal(err)
	}
	want := `meter=65541,pktps,burst,band=type=drop,rate=200,burst_size=400
meter=131077,pktps,burst,band=type=drop,rate=100,burst_size=200
meter=196613,pktps,burst,band=type=drop,rate=400,burst_size=800
meter=262149,pktps,burst,band=type=drop,rate=10,burst_size=20
table=120, priority=100,reg0=0x1000/0xf000,in_port=5 actions=meter:65541,set_field:0x10005->reg2,set_field:0x7/0xffffff->reg6,resubmit(,121)
table=120, priority=100,reg0=0x2000/0xf000,in_port=5 actions=meter:131077,set_field:0x20005->reg2,set_field:0x7/0xffffff->reg6,resubmit(,121)
table=120, priority=100,ip,reg0=0x3000/0xf000,nw_dst=10.244.0.5 actions=meter:196613,set_field:0x30005->reg2,set_field:0x7/0xffffff->reg6,resubmit(,121)
table=120, priority=100,ipv6,reg0=0x3000/0xf000,ipv6_dst=fd00:10:244::5 actions=meter:196613,set_field:0x30005->reg2,set_field:0x7/0xffffff->reg6,resubmit(,121)
table=120, priority=100,reg0=0x4000/0xf000,in_port=5 actions=meter:262149,set_field:0x40005->reg2,set_field:0x7/0xffffff->reg6,resubmit(,121)
`
	if got := render(st); got != want {
		t.Errorf("pod's punt stage:\n--- got\n%s--- want\n%s", got, want)
	}
}

// A namespace's meters: one per category, for its pods together.
func TestNamespaceState(t *testing.T) {
	st, err := puntflows.NamespaceState(7)
	if err != nil {
		t.Fatal(err)
	}
	want := `meter=2164260871,pktps,burst,band=type=drop,rate=400,burst_size=800
meter=2181038087,pktps,burst,band=type=drop,rate=200,burst_size=400
meter=2197815303,pktps,burst,band=type=drop,rate=800,burst_size=1600
meter=2214592519,pktps,burst,band=type=drop,rate=20,burst_size=40
table=121, priority=100,reg0=0x1000/0xf000,reg6=0x7/0xffffff actions=meter:2164260871
table=121, priority=100,reg0=0x2000/0xf000,reg6=0x7/0xffffff actions=meter:2181038087
table=121, priority=100,reg0=0x3000/0xf000,reg6=0x7/0xffffff actions=meter:2197815303
table=121, priority=100,reg0=0x4000/0xf000,reg6=0x7/0xffffff actions=meter:2214592519
`
	if got := render(st); got != want {
		t.Errorf("namespace's punt stage:\n--- got\n%s--- want\n%s", got, want)
	}
	for _, ns := range []uint32{0, 0x800000} {
		if _, err := puntflows.NamespaceState(ns); err == nil || !strings.Contains(err.Error(), "punt: namespace") {
			t.Errorf("namespace id %#x: %v", ns, err)
		}
	}
}

// A node port (vxlan0, the patch port, mp0) has no DNS meter: DNS replies
// are metered by the pod they go to.
func TestSourceStateOfANodePort(t *testing.T) {
	st, err := puntflows.SourceState(puntflows.Source{Port: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Meters) != 3 || len(st.Flows) != 3 {
		t.Fatalf("%d meters and %d flows, want 3 and 3:\n%s", len(st.Meters), len(st.Flows), render(st))
	}
	if strings.Contains(render(st), "reg0=0x3000/0xf000") {
		t.Errorf("a DNS flow for a node port:\n%s", render(st))
	}
}

func TestSourceStateRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  puntflows.Source
		want string
	}{
		{"port 0", puntflows.Source{Port: 0}, "punt: source port 0"},
		{"port past the ofports", puntflows.Source{Port: plan.SourcePortMax + 1}, "punt: source port 65280"},
		{"the shared key as a port", puntflows.Source{Port: plan.SourceShared}, "punt: source port 65535"},
		{"namespace id too wide", puntflows.Source{Port: 3, Namespace: 1 << 24}, "punt: source port 3: namespace id"},
		{"mapped address", puntflows.Source{Port: 3, Dsts: []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}}, `address "::ffff:10.0.0.1"`},
		{"unspecified address", puntflows.Source{Port: 3, Dsts: []netip.Addr{netip.IPv4Unspecified()}}, `address "0.0.0.0"`},
		{"zoned address", puntflows.Source{Port: 3, Dsts: []netip.Addr{netip.MustParseAddr("fe80::1%eth0")}}, `address "fe80::1%eth0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := puntflows.SourceState(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The previous design: one meter per category for the whole node, below
// any source's flow.
func TestSharedState(t *testing.T) {
	want := `meter=131071,pktps,burst,band=type=drop,rate=200,burst_size=400
meter=196607,pktps,burst,band=type=drop,rate=100,burst_size=200
meter=262143,pktps,burst,band=type=drop,rate=2000,burst_size=4000
meter=327679,pktps,burst,band=type=drop,rate=20,burst_size=40
table=120, priority=50,reg0=0x1000/0xf000 actions=meter:131071,set_field:0x1ffff->reg2
table=120, priority=50,reg0=0x2000/0xf000 actions=meter:196607,set_field:0x2ffff->reg2
table=120, priority=50,reg0=0x3000/0xf000 actions=meter:262143,set_field:0x3ffff->reg2
table=120, priority=50,reg0=0x4000/0xf000 actions=meter:327679,set_field:0x4ffff->reg2
`
	if got := render(puntflows.SharedState()); got != want {
		t.Errorf("shared punt stage:\n--- got\n%s--- want\n%s", got, want)
	}
}

// Every category has its rates, the ceiling is ten sources' worth, and
// the shared rates are the single meters the design replaced.
func TestRates(t *testing.T) {
	old := map[plan.PacketInCategory]uint32{plan.PacketInUnidle: 200, plan.PacketInReject: 100, plan.PacketInDNS: 2000, plan.PacketInPolicyDenied: 20}
	var total uint32
	for _, c := range plan.PuntCategories {
		r, ok := puntflows.RatesOf(c)
		if !ok {
			t.Fatalf("%s: no rates", c)
		}
		if r.Ceiling != 10*r.Source || r.Namespace != 2*r.Source {
			t.Errorf("%s: ceiling %d, namespace %d, source %d: want ten and two sources' worth", c, r.Ceiling, r.Namespace, r.Source)
		}
		if r.Shared != old[c] {
			t.Errorf("%s: shared %d, the previous design had %d", c, r.Shared, old[c])
		}
		m := puntflows.CeilingMeter(c)
		if id, _ := plan.Ceiling(c); m.ID != id || m.Bands[0].Rate != r.Ceiling || m.Bands[0].BurstSize != 2*r.Ceiling {
			t.Errorf("%s: ceiling meter %s", c, m)
		}
		total += r.Ceiling
	}
	if total != 7100 {
		t.Errorf("the ceilings add up to %d packet-ins a second; docs/pipeline.md says 7,100", total)
	}
	if _, ok := puntflows.RatesOf(plan.PacketInCategory(9)); ok {
		t.Error("rates for an undeclared category")
	}
}

// Actions load the category and resubmit to the punt table; the flows that
// send packets to the agent put them before their controller action.
func TestActions(t *testing.T) {
	var parts []string
	for _, a := range puntflows.Actions(plan.PacketInDNS) {
		parts = append(parts, a.String())
	}
	if got, want := strings.Join(parts, ","), "set_field:0x3000/0xf000->reg0,resubmit(,120)"; got != want {
		t.Errorf("actions %s, want %s", got, want)
	}
}
