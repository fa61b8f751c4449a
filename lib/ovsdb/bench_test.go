package ovsdb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// createPortsOps is one transaction adding n plain ports (one interface
// each, type "") to bridge.
func createPortsOps(bridge string, n int) []Operation {
	ops := make([]Operation, 0, 2*n+1)
	ports := make(Set, 0, n)
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("p%d", i)
		iface, port := fmt.Sprintf("i%d", i), fmt.Sprintf("p%d", i)
		ops = append(ops,
			Insert(TableInterface, Row{"name": name}, iface),
			Insert(TablePort, Row{"name": name, "interfaces": MakeUUIDSet(NamedUUID(iface))}, port))
		ports = append(ports, NamedUUID(port))
	}
	return append(ops, Mutate(TableBridge, []Condition{Equal("name", bridge)}, InsertMutation("ports", ports)))
}

// BenchmarkCreate1000Ports compares one nodeflow transaction creating 1,000
// plain ports on br0 with one ovs-vsctl invocation doing the same
// (`ovs-vsctl --no-wait add-port br0 p1 -- add-port br0 p2 -- ...`).
// ovs-vswitchd is stopped, so both measure the database alone. It reports
// nodeflow-ns/op, vsctl-ns/op and ratio (vsctl time / nodeflow time).
func BenchmarkCreate1000Ports(b *testing.B) {
	const n = 1000
	sb := ovstest.New(b, ovs.Options{})
	if err := sb.KillVswitchd(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c, err := Dial(ctx, "unix:"+sb.DBSock(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.EnsureBridge(ctx, BridgeSpec{Name: "br0", DatapathType: "netdev"}); err != nil {
		b.Fatal(err)
	}
	local, err := c.Transact(ctx, DatabaseName, Select(TablePort, []Condition{Equal("name", "br0")}, "_uuid"))
	if err != nil {
		b.Fatal(err)
	}
	localPort := local[0].Rows[0]["_uuid"]
	clean := func() {
		if _, err := c.Transact(ctx, DatabaseName,
			Update(TableBridge, []Condition{Equal("name", "br0")}, Row{"ports": Set{localPort}})); err != nil {
			b.Fatal(err)
		}
	}
	check := func(who string) {
		out, err := sb.Vsctl("list-ports", "br0")
		if err != nil {
			b.Fatal(err)
		}
		if got := len(strings.Fields(out)); got != n {
			b.Fatalf("%s: br0 has %d ports, want %d", who, got, n)
		}
	}
	vsctlArgs := []string{"--no-wait"}
	for i := 1; i <= n; i++ {
		if i > 1 {
			vsctlArgs = append(vsctlArgs, "--")
		}
		vsctlArgs = append(vsctlArgs, "add-port", "br0", fmt.Sprintf("p%d", i))
	}

	var nodeflowTime, vsctlTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := c.Transact(ctx, DatabaseName, createPortsOps("br0", n)...); err != nil {
			b.Fatal(err)
		}
		nodeflowTime += time.Since(start)
		b.StopTimer()
		if i == 0 {
			check("nodeflow")
		}
		clean()
		b.StartTimer()

		start = time.Now()
		if _, err := sb.Vsctl(vsctlArgs...); err != nil {
			b.Fatal(err)
		}
		vsctlTime += time.Since(start)
		b.StopTimer()
		if i == 0 {
			check("ovs-vsctl")
		}
		clean()
		b.StartTimer()
	}
	b.ReportMetric(float64(nodeflowTime.Nanoseconds())/float64(b.N), "nodeflow-ns/op")
	b.ReportMetric(float64(vsctlTime.Nanoseconds())/float64(b.N), "vsctl-ns/op")
	b.ReportMetric(float64(vsctlTime)/float64(nodeflowTime), "ratio")
}
