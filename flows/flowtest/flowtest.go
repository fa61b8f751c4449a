// Package flowtest holds checks shared by the flow builders' tests.
package flowtest

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/openflow"
	"nodeflow/openflow/ofconn"
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
