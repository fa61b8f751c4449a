package plan

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"nodeflow/lib/openflow"
)

func TestPlanIsConsistent(t *testing.T) {
	if err := CheckTables(); err != nil {
		t.Error(err)
	}
	if err := CheckFields(); err != nil {
		t.Error(err)
	}
}

func TestEveryTableHasFeatures(t *testing.T) {
	for _, b := range Bridges {
		for _, tb := range Tables(b) {
			if len(tb.Features) == 0 {
				t.Errorf("%s lists no feature", tb)
			}
		}
	}
}

func TestTableNumbersAreStable(t *testing.T) {
	// These numbers are in installed flows and in operators' notes: a
	// change must be deliberate (bump PipelineVersion and this list).
	want := map[Bridge]map[TableID]string{
		Pod: {0: "Classifier", 5: "ARP", 10: "PortSecurity", 15: "TunnelIngress", 20: "UnSNAT", 25: "Conntrack",
			30: "ServiceLB", 31: "SessionAffinity", 35: "EndpointDNAT", 40: "SNAT", 45: "EgressPolicy", 50: "EgressFirewall", 55: "EgressFirewallFragments",
			60: "Routing", 65: "IngressPolicy", 70: "LocalDelivery", 80: "TunnelEgress", 90: "EgressSNAT", 95: "GatewayOutput",
			100: "VNetPortSecurity", 105: "VNetARP", 110: "VNetForward", 120: "Punt", 121: "PuntNamespace", 253: "Version"},
		Gateway: {0: "Classifier", 1: "UplinkReturn", 2: "ToRouter", 3: "ToHost", 4: "HostHairpin", 5: "HairpinReturn", 253: "Version"},
	}
	for b, w := range want {
		got := Tables(b)
		if len(got) != len(w) {
			t.Errorf("%s: %d tables, want %d", b, len(got), len(w))
		}
		for _, tb := range got {
			if w[tb.ID] != tb.Name {
				t.Errorf("%s table %d is %q, want %q", b, tb.ID, tb.Name, w[tb.ID])
			}
		}
	}
}

func TestCheckTablesRejects(t *testing.T) {
	ok := Table{Pod, 10, "A", "a", MissDrop, 0, []Feature{FeatureNode}}
	tests := []struct {
		name   string
		tables []Table
		want   string
	}{
		{"duplicate number", []Table{ok, ok}, "is not after"},
		{"duplicate name", []Table{ok, {Pod, 11, "A", "a", MissDrop, 0, nil}}, "two tables named"},
		{"goto backwards", []Table{ok, {Pod, 20, "B", "b", MissGoto, 10, nil}}, "goes back"},
		{"goto undeclared", []Table{ok, {Pod, 20, "B", "b", MissGoto, 30, nil}}, "undeclared table"},
		{"next without goto", []Table{{Pod, 20, "B", "b", MissDrop, 30, nil}}, "has a next table"},
		{"no miss", []Table{{Pod, 20, "B", "b", 0, 0, nil}}, "no miss kind"},
		{"no summary", []Table{{Pod, 20, "B", "", MissDrop, 0, nil}}, "summary"},
		{"unknown feature", []Table{{Pod, 20, "B", "b", MissDrop, 0, []Feature{0x77}}}, "undeclared feature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkTables(tt.tables)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestNewFieldRangeChecks(t *testing.T) {
	tests := []struct {
		name                string
		space               Space
		index, start, end   int
		wantErr             bool
		wantString          string
		wantValue, wantMask uint32
		value               uint32
		valueErr            bool
	}{
		{name: "reg0 low nibble", space: SpaceReg, index: 0, start: 0, end: 3, wantString: "reg0[0..3]", value: 5, wantValue: 5, wantMask: 0xf},
		{name: "reg1 single bit 7", space: SpaceReg, index: 1, start: 7, end: 7, wantString: "reg1[7]", value: 1, wantValue: 0x80, wantMask: 0x80},
		{name: "whole reg15", space: SpaceReg, index: 15, start: 0, end: 31, wantString: "reg15", value: 0xffffffff, wantValue: 0xffffffff, wantMask: 0xffffffff},
		{name: "value too wide", space: SpaceReg, index: 0, start: 4, end: 5, wantString: "reg0[4..5]", value: 4, valueErr: true},
		{name: "ends past bit 31", space: SpaceReg, index: 0, start: 16, end: 32, wantErr: true},
		{name: "reg16 does not exist", space: SpaceReg, index: 16, start: 0, end: 3, wantErr: true},
		{name: "empty range", space: SpaceReg, index: 0, start: 5, end: 4, wantErr: true},
		{name: "negative start", space: SpaceReg, index: 0, start: -1, end: 4, wantErr: true},
		{name: "xxreg4 does not exist", space: SpaceXXReg, index: 4, start: 0, end: 127, wantErr: true},
		{name: "ct_mark past bit 31", space: SpaceCtMark, index: 0, start: 0, end: 32, wantErr: true},
		{name: "ct_label to bit 127", space: SpaceCtLabel, index: 0, start: 64, end: 127, wantString: "ct_label[64..127]"},
		{name: "unknown space", space: 9, index: 0, start: 0, end: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewField("F", Pod, tt.space, tt.index, tt.start, tt.end, "")
			if tt.wantErr {
				if err == nil || !errors.Is(err, ErrRange) && !strings.Contains(err.Error(), "unknown space") {
					t.Fatalf("got %v, want a range error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.String() != tt.wantString {
				t.Errorf("String() = %q, want %q", f.String(), tt.wantString)
			}
			if f.Space().width() != 32 {
				return
			}
			v, m, err := f.Value32(tt.value)
			if tt.valueErr {
				if !errors.Is(err, ErrRange) || !strings.Contains(err.Error(), "field F") {
					t.Fatalf("Value32(%#x) = %v, want a range error naming the field", tt.value, err)
				}
				return
			}
			if err != nil || v != tt.wantValue || m != tt.wantMask {
				t.Errorf("Value32(%#x) = %#x/%#x %v, want %#x/%#x", tt.value, v, m, err, tt.wantValue, tt.wantMask)
			}
		})
	}
}

func TestMarksFitTheirFields(t *testing.T) {
	if _, err := NewMark("TooBig", PktSource, 16); !errors.Is(err, ErrRange) {
		t.Errorf("mark 16 in a 4-bit field: %v", err)
	}
	seen := map[string]bool{}
	for _, m := range Marks() {
		if err := m.Field().Check(m.Value()); err != nil {
			t.Error(err)
		}
		k := m.Field().Name() + "=" + m.String()
		if seen[k] {
			t.Errorf("duplicate mark %s", m)
		}
		seen[k] = true
	}
	// Two marks of one field must have distinct values.
	vals := map[string]map[uint64]string{}
	for _, m := range Marks() {
		fv := vals[m.Field().Name()]
		if fv == nil {
			fv = map[uint64]string{}
			vals[m.Field().Name()] = fv
		}
		if other, dup := fv[m.Value()]; dup {
			t.Errorf("marks %s and %s share value %#x", other, m.Name(), m.Value())
		}
		fv[m.Value()] = m.Name()
	}
}

func TestOverlapDetection(t *testing.T) {
	mk := func(name string, b Bridge, s Space, idx, start, end int) Field {
		f, err := NewField(name, b, s, idx, start, end, "")
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	tests := []struct {
		name    string
		a, b    Field
		overlap bool
	}{
		{"same register, disjoint bits", mk("a", Pod, SpaceReg, 0, 0, 3), mk("b", Pod, SpaceReg, 0, 4, 7), false},
		{"same register, shared bit", mk("a", Pod, SpaceReg, 0, 0, 4), mk("b", Pod, SpaceReg, 0, 4, 7), true},
		{"different registers", mk("a", Pod, SpaceReg, 0, 0, 31), mk("b", Pod, SpaceReg, 1, 0, 31), false},
		{"different bridges", mk("a", Pod, SpaceReg, 0, 0, 31), mk("b", Gateway, SpaceReg, 0, 0, 31), false},
		// xxreg3 is reg12 (bits 96-127) .. reg15 (bits 0-31).
		{"xxreg3 low word is reg15", mk("a", Pod, SpaceXXReg, 3, 0, 31), mk("b", Pod, SpaceReg, 15, 5, 5), true},
		{"xxreg3 high word is reg12", mk("a", Pod, SpaceXXReg, 3, 96, 127), mk("b", Pod, SpaceReg, 12, 31, 31), true},
		{"xxreg3 high word is not reg15", mk("a", Pod, SpaceXXReg, 3, 96, 127), mk("b", Pod, SpaceReg, 15, 0, 31), false},
		{"xxreg0 is not reg4", mk("a", Pod, SpaceXXReg, 0, 0, 127), mk("b", Pod, SpaceReg, 4, 0, 31), false},
		{"xxreg1 spans reg4-7", mk("a", Pod, SpaceXXReg, 1, 30, 33), mk("b", Pod, SpaceReg, 6, 0, 0), true},
		{"ct_mark is not reg0", mk("a", Pod, SpaceCtMark, 0, 0, 31), mk("b", Pod, SpaceReg, 0, 0, 31), false},
		{"ct_mark bits", mk("a", Pod, SpaceCtMark, 0, 0, 3), mk("b", Pod, SpaceCtMark, 0, 3, 3), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Overlaps(tt.b); got != tt.overlap {
				t.Errorf("Overlaps = %v, want %v", got, tt.overlap)
			}
			if got := tt.b.Overlaps(tt.a); got != tt.overlap {
				t.Errorf("reverse Overlaps = %v, want %v", got, tt.overlap)
			}
			err := checkFields([]Field{tt.a, tt.b}, nil)
			if (err != nil) != tt.overlap {
				t.Errorf("checkFields = %v, want overlap %v", err, tt.overlap)
			}
			if tt.overlap {
				if err := checkFields([]Field{tt.a, tt.b}, []Alias{{"b", "a", "test"}}); err != nil {
					t.Errorf("declared alias still rejected: %v", err)
				}
			}
		})
	}
}

func TestCookieLayout(t *testing.T) {
	c, err := OwnerCookie("service/default/web:80/TCP", 7)
	if err != nil {
		t.Fatal(err)
	}
	if c.Feature() != FeatureService || c.Generation() != 7 || c.OwnerHash() != OwnerHash("service/default/web:80/TCP") {
		t.Errorf("cookie %s decodes to %s %#x %d", c, c.Feature(), c.OwnerHash(), c.Generation())
	}
	if !c.Owned() {
		t.Error("service cookie not owned")
	}
	c2, _ := OwnerCookie("service/default/web:80/TCP", 9)
	if c&OwnerMask != c2&OwnerMask || c == c2 {
		t.Error("generation must only change the generation bits")
	}
	if OwnerHash("pod/default/a") == OwnerHash("pod/default/b") {
		t.Error("owner hash collision between close names")
	}
	if Cookie(0).Owned() || Cookie(0xdeff105).Owned() {
		t.Error("foreign cookie counted as owned")
	}
	if LearnedCookie("service/x").Owned() || LearnedCookie("service/x").Feature() != FeatureLearned {
		t.Error("learned cookie must not be owned")
	}
	if Generation(0xffff).Next() != 1 || Generation(3).Next() != 4 {
		t.Error("generation wrap")
	}
}

func TestOwnerFeature(t *testing.T) {
	tests := []struct {
		owner string
		want  Feature
		err   string
	}{
		{"gateway/defaults", FeatureGateway, ""},
		{"service/default/web:80/TCP", FeatureService, ""},
		{"service-gateway/default/web:80/TCP", FeatureServiceGateway, ""},
		{"pod/default/a", FeaturePod, ""},
		{"pipeline", FeaturePipeline, ""},
		{"", 0, "empty"},
		{"bogus/x", 0, "unknown prefix"},
		{"pod/with space", 0, "not printable"},
		{"pod/" + strings.Repeat("x", MaxOwnerLen), 0, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.owner, func(t *testing.T) {
			f, err := OwnerFeature(tt.owner)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want an error containing %q", err, tt.err)
				}
				return
			}
			if err != nil || f != tt.want {
				t.Fatalf("got %s %v, want %s", f, err, tt.want)
			}
		})
	}
}

func TestFeaturePrefixesUnique(t *testing.T) {
	seen := map[string]bool{}
	ids := map[Feature]bool{}
	for _, f := range Features() {
		if ids[f.Feature] {
			t.Errorf("feature %#x declared twice", f.Feature)
		}
		ids[f.Feature] = true
		if f.Prefix == "" {
			continue
		}
		if seen[f.Prefix] {
			t.Errorf("prefix %q used twice", f.Prefix)
		}
		seen[f.Prefix] = true
	}
}

func TestBand(t *testing.T) {
	b := EgressFirewallRules
	p0, _ := b.Rank(0)
	p1, _ := b.Rank(1)
	if p0 <= p1 || p0 != b.High {
		t.Errorf("first rule must rank highest: %d %d", p0, p1)
	}
	if _, err := b.Rank(b.Size()); !errors.Is(err, ErrRange) {
		t.Errorf("rank past the band: %v", err)
	}
	last, err := b.Rank(b.Size() - 1)
	if err != nil || last != b.Low {
		t.Errorf("last rank %d %v", last, err)
	}
	if PriorityEgressFirewallBypass <= b.High {
		t.Error("the bypass must be above every rule")
	}
}

func TestIDAllocator(t *testing.T) {
	a := NewIDAllocator(IDRange{Name: "test", First: 10, Last: 13})
	seen := map[uint32]bool{}
	for _, o := range []string{"a", "b", "c", "d"} {
		id, err := a.Get(o)
		if err != nil {
			t.Fatal(err)
		}
		if id < 10 || id > 13 || seen[id] {
			t.Fatalf("%s got %d", o, id)
		}
		seen[id] = true
		if again, _ := a.Get(o); again != id {
			t.Fatalf("%s: unstable id %d then %d", o, id, again)
		}
	}
	if _, err := a.Get("e"); err == nil {
		t.Fatal("allocated past the range")
	}
	idA, _ := a.Get("a")
	if err := a.Reserve("b", idA); err == nil {
		t.Fatal("reserved an id held by another owner")
	}
	a.Release("a")
	if err := a.Reserve("e", idA); err != nil {
		t.Fatal(err)
	}
	if o, _ := a.Owner(idA); o != "e" {
		t.Fatalf("owner of %d is %s", idA, o)
	}
	if err := a.Reserve("e", 99); !errors.Is(err, ErrRange) {
		t.Fatalf("reserve outside range: %v", err)
	}
	// The same name gets the same id in a fresh allocator (stable across
	// restarts when nothing collides).
	x := NewIDAllocator(ServiceGroups)
	y := NewIDAllocator(ServiceGroups)
	ix, _ := x.Get("service/default/web:80/TCP")
	iy, _ := y.Get("service/default/web:80/TCP")
	if ix != iy {
		t.Fatalf("ids differ across allocators: %d %d", ix, iy)
	}
}

func TestPathsFitTheRecirculationBudget(t *testing.T) {
	if err := CheckPaths(); err != nil {
		t.Fatal(err)
	}
	longest := 0
	for _, p := range Paths() {
		longest = max(longest, p.Recirculations())
	}
	// The host -> service -> host endpoint on this node path uses the whole
	// budget (ANCHORS: it worked at exactly 6); if it shows less, a step
	// is missing from the model.
	if longest != MaxRecirculations {
		t.Errorf("longest path has %d recirculations, want %d", longest, MaxRecirculations)
	}
}

func TestOpenFlowAdapters(t *testing.T) {
	tests := []struct {
		name  string
		got   fmt.Stringer
		match string
	}{
		{"pkt source mark", actionString{FromGateway.Load()}, "set_field:0x3/0xf->reg0"},
		{"snat kind mark", actionString{SNATToNodeIP.Load()}, "set_field:0x1/0xf->ct_mark"},
		{"endpoint chosen", actionString{EndpointChosen.Load()}, "set_field:0x10/0x10->reg0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s := tt.got.String(); s != tt.match {
				t.Errorf("got %q, want %q", s, tt.match)
			}
		})
	}
	m := openflow.NewMatch(FromPod.Match(), SNATToNodeIP.Match())
	if s := m.String(); !strings.Contains(s, "reg0=0x1/0xf") || !strings.Contains(s, "ct_mark=0x1/0xf") {
		t.Errorf("match %q", s)
	}
	if _, err := NamespaceID.MatchValue(1 << 24); !errors.Is(err, ErrRange) {
		t.Errorf("24-bit field took a 25-bit value: %v", err)
	}
	if r := EndpointPort.Ref().String(); r != "NXM_NX_REG4[0..15]" {
		t.Errorf("ref %q", r)
	}
	v6, err := EndpointIPv6.MatchValue(1)
	if err != nil {
		t.Fatal(err)
	}
	// Open vSwitch prints a 128-bit register match as its four 32-bit
	// registers.
	if s := openflow.NewMatch(v6).String(); s != "reg12=0,reg13=0,reg14=0,reg15=0x1" {
		t.Errorf("xxreg match %q", s)
	}
}

type actionString struct{ a openflow.Action }

func (a actionString) String() string { return a.a.String() }

// TestIDsDistinct: every packet-in category and every br0 meter is one
// feature's.
func TestIDsDistinct(t *testing.T) {
	cats := []PacketInCategory{PacketInUnidle, PacketInReject, PacketInDNS, PacketInPolicyDenied}
	meters := []uint32{MeterUnidle, MeterReject, MeterEgressFirewallDNS, MeterPolicyLog}
	for i := range cats {
		for j := range i {
			if cats[i] == cats[j] {
				t.Errorf("packet-in categories %s and %s are both %d", cats[i], cats[j], uint8(cats[i]))
			}
			if meters[i] == meters[j] {
				t.Errorf("meters %d and %d are both %d", i, j, meters[i])
			}
		}
	}
	if len(packetInNames) != len(cats) {
		t.Errorf("%d packet-in names for %d categories", len(packetInNames), len(cats))
	}
}

// TestSourceMeters: a source's meters are the category and the port, one
// per pair, never a ceiling, and only for ports and the shared key.
func TestSourceMeters(t *testing.T) {
	seen := map[uint32]string{}
	for _, id := range []uint32{MeterUnidle, MeterReject, MeterEgressFirewallDNS, MeterPolicyLog} {
		seen[id] = "a ceiling"
		if _, _, ok := SplitSourceMeter(id); ok {
			t.Errorf("ceiling %d splits as a source's meter", id)
		}
	}
	for _, c := range PuntCategories {
		ceiling, ok := Ceiling(c)
		if !ok {
			t.Errorf("%s: no ceiling", c)
		}
		m, err := PuntMark(c)
		if err != nil || m.Value() != uint64(c) {
			t.Errorf("%s: punt mark %v, %v", c, m, err)
		}
		for _, key := range []uint32{1, 2, 0x1234, SourcePortMax, SourceShared} {
			id, err := SourceMeter(c, key)
			if err != nil {
				t.Fatalf("%s, source %d: %v", c, key, err)
			}
			if id == ceiling {
				t.Errorf("%s, source %d: the ceiling's id", c, key)
			}
			what := fmt.Sprintf("%s of source %d", c, key)
			if o, dup := seen[id]; dup {
				t.Errorf("meter %d is both %s and %s", id, o, what)
			}
			seen[id] = what
			gc, gk, ok := SplitSourceMeter(id)
			if !ok || gc != c || gk != key {
				t.Errorf("meter %d splits as %s, %d, %v; want %s, %d", id, gc, gk, ok, c, key)
			}
			if id > openflow.MeterMax {
				t.Errorf("meter %d past the largest meter id", id)
			}
		}
		for _, key := range []uint32{0, SourcePortMax + 1, 0xfffe, 0x10000} {
			if _, err := SourceMeter(c, key); !errors.Is(err, ErrRange) {
				t.Errorf("%s, source %#x: %v, want ErrRange", c, key, err)
			}
		}
	}
	if _, err := SourceMeter(PacketInCategory(9), 1); err == nil {
		t.Error("a meter for an undeclared category")
	}
	for _, id := range []uint32{0, 5, 0x10000, 0x9_0001, 0x1fffe, 0xff_0001} {
		if c, k, ok := SplitSourceMeter(id); ok {
			t.Errorf("meter %#x splits as %s, %d", id, c, k)
		}
	}
}

// TestNamespaceMeters: a namespace's meters are the category and the
// namespace id, never a source's meter or a ceiling, and only for
// namespace ids.
func TestNamespaceMeters(t *testing.T) {
	for _, c := range PuntCategories {
		for _, ns := range []uint32{1, 7, 0x7fffff} {
			id, err := NamespaceMeter(c, ns)
			if err != nil {
				t.Fatalf("%s, namespace %d: %v", c, ns, err)
			}
			if gc, gn, ok := SplitNamespaceMeter(id); !ok || gc != c || gn != ns {
				t.Errorf("meter %#x splits as %s, %d, %v", id, gc, gn, ok)
			}
			if _, _, ok := SplitSourceMeter(id); ok {
				t.Errorf("namespace meter %#x splits as a source's", id)
			}
			if id > openflow.MeterMax {
				t.Errorf("meter %#x past the largest meter id", id)
			}
		}
		for _, ns := range []uint32{0, 0x800000, 0xffffff} {
			if _, err := NamespaceMeter(c, ns); !errors.Is(err, ErrRange) {
				t.Errorf("%s, namespace %#x: %v, want ErrRange", c, ns, err)
			}
		}
		src, _ := SourceMeter(c, 5)
		if _, _, ok := SplitNamespaceMeter(src); ok {
			t.Errorf("source meter %#x splits as a namespace's", src)
		}
	}
	for _, id := range []uint32{MeterReject, 0x8000_0000, 0x8900_0001, 0x8200_0000, 0x8280_0000} {
		if c, ns, ok := SplitNamespaceMeter(id); ok {
			t.Errorf("meter %#x splits as %s, %d", id, c, ns)
		}
	}
}
