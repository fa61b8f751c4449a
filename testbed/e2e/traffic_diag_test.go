package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"nodeflow/testbed"
)

// dropWatch keeps the nodes' datapath drop counters from when some
// traffic started, so that a test that loses a request can say what the
// datapath dropped and what OVS and the agents logged around it: a failure
// seen once in CI is then explained by its own output.
type dropWatch struct {
	nodes []*testbed.Member
	base  []map[string]int64
}

// watchDrops reads the nodes' drop counters now.
func watchDrops(nodes []*testbed.Member) *dropWatch {
	w := &dropWatch{nodes: nodes}
	for _, m := range nodes {
		c, _ := dropCounters(m)
		w.base = append(w.base, c)
	}
	return w
}

var coverageLine = regexp.MustCompile(`^(\S+)\s.*total: (\d+)`)

// dropCounters returns the coverage counters of ovs-vswitchd whose names
// speak of drops (datapath_drop_*, drop_action_*, ...), by name.
func dropCounters(m *testbed.Member) (map[string]int64, error) {
	out, err := appctl(m, "coverage/show")
	if err != nil {
		return nil, fmt.Errorf("%s: coverage/show: %v: %s", m.Name, err, out)
	}
	c := map[string]int64{}
	for _, l := range strings.Split(out, "\n") {
		if sm := coverageLine.FindStringSubmatch(strings.TrimSpace(l)); sm != nil && strings.Contains(sm[1], "drop") {
			n, _ := strconv.ParseInt(sm[2], 10, 64)
			c[sm[1]] = n
		}
	}
	return c, nil
}

// report logs, for each node, the drop counters that grew since
// watchDrops (all of them, as they are, when ovs-vswitchd restarted
// meanwhile) and the lines of its ovs-vswitchd and agent logs stamped
// from from to to.
func (w *dropWatch) report(t *testing.T, from, to time.Time) {
	t.Helper()
	for i, m := range w.nodes {
		now, err := dropCounters(m)
		if err != nil {
			t.Log(err)
		}
		var grew []string
		for name, n := range now {
			if d := n - w.base[i][name]; d > 0 {
				grew = append(grew, fmt.Sprintf("%s +%d", name, d))
			} else if d < 0 {
				grew = append(grew, fmt.Sprintf("%s %d (restarted)", name, n))
			}
		}
		t.Logf("%s: datapath drops while the traffic ran: %s", m.Name, strings.Join(grew, ", "))
		if lines := droppingFlows(m); len(lines) > 0 {
			t.Logf("%s: datapath flows that dropped packets (they expire 10 s after their last packet):\n%s", m.Name, strings.Join(lines, "\n"))
		}
		logs, _ := filepath.Glob(filepath.Join(m.Dir, "*", "ovs-vswitchd.log"))
		for _, l := range append(logs, filepath.Join(m.Dir, "agent-e2e.log"), filepath.Join(m.Dir, "agent.log")) {
			if lines := logWindow(l, from, to, 80); len(lines) > 0 {
				t.Logf("%s: %s from %s to %s:\n%s", m.Name, filepath.Base(l), from.Format("15:04:05.000"), to.Format("15:04:05.000"), strings.Join(lines, "\n"))
			}
		}
	}
}

// droppingFlows returns the datapath flows of m's ovs-vswitchd that drop
// and have counted packets: what the pipeline dropped lately, by match.
func droppingFlows(m *testbed.Member) []string {
	out, err := appctl(m, "dpctl/dump-flows")
	if err != nil {
		return []string{fmt.Sprintf("dpctl/dump-flows: %v: %s", err, out)}
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), "actions:drop") && !strings.Contains(l, "packets:0,") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// logStamp finds the time of an ovs-vswitchd log line
// (2006-01-02T15:04:05.000Z|...) or of a logrus one (time="...").
var logStamp = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)\||time="([^"]+)"`)

// logWindow returns up to max lines of the log at path stamped between
// from and to (logrus stamps whole seconds: a line of the second of from
// counts).
func logWindow(path string, from, to time.Time, max int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		sm := logStamp.FindStringSubmatch(l)
		if sm == nil {
			continue
		}
		stamp := sm[1] + sm[2]
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || at.Before(from.Truncate(time.Second)) || at.After(to) {
			continue
		}
		if len(out) == max {
			out = append(out, "...")
			break
		}
		out = append(out, l)
	}
	return out
}
