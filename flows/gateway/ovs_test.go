package gateway

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/flows/plan"
	"nodeflow/openflow"
	"nodeflow/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// TestOVSRendersTheSame installs the built flows over nodeflow's own
// OpenFlow connection into a sandboxed breth0 and checks that
// `ovs-ofctl -O OpenFlow15 dump-flows --no-stats` prints exactly the lines
// Flow.String renders: the encoding is what the builders mean, and the
// golden files read like a dump.
func TestOVSRendersTheSame(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "breth0", "--", "set", "bridge", "breth0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"seed", seedConfig()}, {"dual-stack", dualConfig()}} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := Flows(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, PipelineFlows(plan.Gateway)...)
			for i := range fs {
				fs[i].Cookie = uint64(plan.MakeCookie(plan.FeatureGateway, Owner, 7))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l := logrus.New()
			l.SetOutput(io.Discard)
			c, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock("breth0"), ofconn.Options{Logger: l})
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
			out, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "--no-stats", "breth0")
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
				t.Errorf("dump-flows differs from Flow.String:\n--- dump\n%s\n--- built\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
