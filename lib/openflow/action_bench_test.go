package openflow

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// actBenchCase is an action list nodeflow encodes often, with the same
// actions in ovs-ofctl syntax for the reference measurement.
type actBenchCase struct {
	name  string
	match string
	text  string
	acts  []Action
}

func actBenchCases() []actBenchCase {
	return []actBenchCase{
		{
			// The endpoint DNAT of a service connection.
			name:  "service_ct_nat",
			match: "ip",
			text:  "ct(commit,table=40,zone=1,nat(dst=10.128.1.2:8080))",
			acts: []Action{CT{Commit: true, RecircTable: 40, Zone: 1, Actions: []Action{
				NAT{Dst: true, MinAddr: netip.MustParseAddr("10.128.1.2"), MinPort: 8080},
			}}},
		},
		{
			// One select-group bucket: endpoint address and port into
			// registers, then on to the DNAT table.
			name:  "group_bucket",
			match: "ip",
			text:  "set_field:0xa800102->reg3,load:0x1f90->NXM_NX_REG4[0..15],resubmit(,42)",
			acts: []Action{
				SetField{Field: actField("reg3", []byte{0x0a, 0x80, 0x01, 0x02}, nil)},
				RegLoad{Dst: MustParseFieldRef("reg4[0..15]"), Value: 0x1f90},
				ResubmitTable(42),
			},
		},
	}
}

// actOfctlRef caches the reference cost per flow text.
var actOfctlRef sync.Map

// actOfctlNsPerFlow measures what ovs-ofctl takes per flow to parse and
// encode flows with these actions: `ovs-ofctl -O OpenFlow15 parse-flows` of a
// file of 2000 such flows, timed as a whole (process start included, which
// amortises to little). It reports false when ovs-ofctl is missing.
func actOfctlNsPerFlow(b *testing.B, match, text string) (float64, bool) {
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		return 0, false
	}
	key := match + " " + text
	if v, ok := actOfctlRef.Load(key); ok {
		return v.(float64), true
	}
	const n = 2000
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "priority=%d,%s,actions=%s\n", i+1, match, text)
	}
	file := filepath.Join(b.TempDir(), "flows")
	if err := os.WriteFile(file, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	best := time.Duration(1<<63 - 1)
	for run := 0; run < 3; run++ {
		start := time.Now()
		out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "parse-flows", file).CombinedOutput()
		if err != nil {
			b.Fatalf("ovs-ofctl parse-flows: %v\n%s", err, out)
		}
		best = min(best, time.Since(start))
	}
	ns := float64(best.Nanoseconds()) / n
	actOfctlRef.Store(key, ns)
	return ns, true
}

// BenchmarkAppendActions encodes the actions of a service flow and of a
// group bucket for OF1.5, and reports the speed-up over ovs-ofctl encoding
// the same actions ("x-vs-ovs-ofctl"; ovs-ofctl also parses text and prints,
// which is the work nodeflow's per-change fork of ovs-ofctl used to do).
func BenchmarkAppendActions(b *testing.B) {
	for _, c := range actBenchCases() {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 0, 256)
			var err error
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = AppendActions(buf[:0], Version15, c.acts); err != nil {
					b.Fatal(err)
				}
			}
			goNs := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if ref, ok := actOfctlNsPerFlow(b, c.match, c.text); ok {
				b.ReportMetric(ref, "ovs-ofctl-ns/flow")
				b.ReportMetric(ref/goNs, "x-vs-ovs-ofctl")
			}
		})
	}
}

// BenchmarkUnmarshalActions decodes the same action lists.
func BenchmarkUnmarshalActions(b *testing.B) {
	for _, c := range actBenchCases() {
		b.Run(c.name, func(b *testing.B) {
			enc, err := AppendActions(nil, Version15, c.acts)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := UnmarshalActions(enc, Version15); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBenchCasesMatchOVS keeps the benchmark honest: the Go actions are the
// ones the text describes.
func TestBenchCasesMatchOVS(t *testing.T) {
	otNeedOfctl(t)
	for _, c := range actBenchCases() {
		t.Run(c.name, func(t *testing.T) {
			o := actParseFlow(t, Version15, "priority=1,"+c.match+",actions="+c.text)
			got, err := AppendInstructions(nil, Version15, []Instruction{ApplyActions{Actions: c.acts}})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(o.ins) {
				t.Errorf("got % x\nwant % x", got, o.ins)
			}
		})
	}
}
