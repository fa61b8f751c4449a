package openflow

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// TestActionsDumpFlowsText installs every oracle case into a private
// ovs-vswitchd with ovs-ofctl and checks that InstructionsString renders
// OVS's encoding of each flow exactly as `ovs-ofctl dump-flows` prints the
// installed flow, in OF1.3 and OF1.5.
func TestActionsDumpFlowsText(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	if out, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy", "fail-mode=secure",
		"protocols=OpenFlow13,OpenFlow15",
		"--", "add-port", "br0", "p1", "--", "set", "interface", "p1", "type=dummy", "ofport_request=1"); err != nil {
		t.Fatalf("add-br: %v: %s", err, out)
	}
	ofctl := func(args ...string) string {
		t.Helper()
		out, err := sb.Ofctl(args...)
		if err != nil {
			t.Fatalf("ovs-ofctl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// Meters and the group the cases refer to.
	for id := 1; id <= 3; id++ {
		ofctl("-O", "OpenFlow13", "add-meter", "br0", fmt.Sprintf("meter=%d,pktps,band=type=drop,rate=10", id))
	}
	ofctl("-O", "OpenFlow13", "add-group", "br0", "group_id=1,type=all,bucket=output:1")

	cookieRe := regexp.MustCompile(`cookie=0x([0-9a-f]+),.* actions=(.*)$`)
	for _, v := range []Version{Version13, Version15} {
		t.Run(v.String(), func(t *testing.T) {
			ofctl("-O", actOfName(v), "del-flows", "br0")
			cases := actOracleCases()
			want := map[uint64]string{}
			var flows strings.Builder
			for i, c := range cases {
				if !c.runsIn(v) {
					continue
				}
				o := actParseFlow(t, v, c.flow())
				ins, err := UnmarshalInstructions(o.ins, v)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				cookie := uint64(i + 1)
				want[cookie] = InstructionsString(ins)
				// Distinct priorities keep the flows apart.
				fmt.Fprintf(&flows, "cookie=%d,priority=%d,%s,actions=%s\n", cookie, i+1, c.flowMatch(), c.acts)
			}
			file := filepath.Join(t.TempDir(), "flows")
			if err := os.WriteFile(file, []byte(flows.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			ofctl("-O", actOfName(v), "add-flows", "br0", file)
			dump := ofctl("-O", actOfName(v), "dump-flows", "--no-stats", "br0")
			got := map[uint64]string{}
			for _, line := range strings.Split(dump, "\n") {
				m := cookieRe.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				c, err := strconv.ParseUint(m[1], 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				got[c] = m[2]
			}
			for i, c := range cases {
				cookie := uint64(i + 1)
				w, ok := want[cookie]
				if !ok {
					continue
				}
				if g, ok := got[cookie]; !ok {
					t.Errorf("%s: flow missing from dump-flows", c.name)
				} else if g != w {
					t.Errorf("%s:\nInstructionsString %q\n        dump-flows %q", c.name, w, g)
				}
			}
		})
	}
}
