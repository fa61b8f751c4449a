package flowtest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/testbed/ovs"
)

// Renderer renders flows as ovs-ofctl dump-flows prints them, one
// " cookie=" line a flow, as the reconciler's Store does.
type Renderer interface {
	Render(w io.Writer, prefix string, gen plan.Generation) error
}

// FlowFile writes r's flows, with generation gen, as an ovs-ofctl flow
// file in a temporary folder of tb, and returns its path.
func FlowFile(tb testing.TB, r Renderer, gen plan.Generation) string {
	tb.Helper()
	var sb strings.Builder
	if err := r.Render(&sb, "", gen); err != nil {
		tb.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(sb.String(), "\n") {
		if strings.HasPrefix(l, " cookie=") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	path := filepath.Join(tb.TempDir(), "flows.txt")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// CountFlows returns how many flows bridge holds, as ovs-ofctl
// dump-aggregate counts them.
func CountFlows(tb testing.TB, sb *ovs.Sandbox, bridge string) int {
	tb.Helper()
	out, err := sb.Ofctl("-O", "OpenFlow15", "dump-aggregate", bridge)
	if err != nil {
		tb.Fatal(err)
	}
	var n int
	if i := strings.Index(out, "flow_count="); i >= 0 {
		fmt.Sscanf(out[i:], "flow_count=%d", &n)
	}
	return n
}
