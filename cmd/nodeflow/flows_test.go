package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// runCLI runs `nodeflow ARGS...` and returns its output and error.
func runCLI(args ...string) (string, error) {
	var out bytes.Buffer
	app := &cli.App{Name: "nodeflow", Commands: []*cli.Command{flowsCommand()}, Writer: &out, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"nodeflow"}, args...))
	return out.String(), err
}

// TestFlowsCommand runs an agent-like reconciler on a sandbox bridge with
// its introspection socket, and checks what `nodeflow flows` prints.
func TestFlowsCommand(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)

	store := reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod})
	flow := func(table uint8, prio uint16, dst string, port uint32) openflow.Flow {
		return openflow.Flow{Table: table, Priority: prio,
			Match:        openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(netip.MustParseAddr(dst))),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(port)}}}}
	}
	if err := store.Set("pod/default/a", reconcile.State{Flows: []openflow.Flow{flow(70, 100, "10.128.0.2", 3)}}); err != nil {
		t.Fatal(err)
	}
	if err := store.Set("node/routes", reconcile.State{Flows: []openflow.Flow{flow(60, 100, "10.128.0.0", 9)}}); err != nil {
		t.Fatal(err)
	}
	r := reconcile.New(store, reconcile.Options{Bridge: "br0", AuditInterval: -1, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock("br0"), r.ConnOptions(ofconn.Options{Logger: quiet}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { _ = r.Run(runCtx); close(runDone) }()
	select {
	case <-r.Synced():
	case <-time.After(20 * time.Second):
		t.Fatal("no sync")
	}
	sock := filepath.Join(t.TempDir(), "nodeflow.sock")
	go func() { _ = reconcile.ServeIntrospection(ctx, sock, reconcile.NewIntrospection(r)) }()

	var out string
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err = runCLI("flows", "--socket", sock)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if err := store.Render(&want, "", r.Generation()); err != nil {
		t.Fatal(err)
	}
	if out != want.String() {
		t.Fatalf("nodeflow flows printed\n%s\nwant\n%s", out, want.String())
	}
	for _, s := range []string{"# owner pod/default/a", "# owner node/routes", "table=70, priority=100,ip,nw_dst=10.128.0.2 actions=output:3"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q", s)
		}
	}

	out, err = runCLI("flows", "--socket", sock, "--bridge", "br0", "--owner", "pod/")
	if err != nil || !strings.Contains(out, "# owner pod/default/a") || strings.Contains(out, "node/routes") {
		t.Fatalf("--owner pod/: %v\n%s", err, out)
	}

	out, err = runCLI("flows", "--socket", sock, "--diff")
	if err != nil || !strings.Contains(out, "# no differences") {
		t.Fatalf("--diff on a synced bridge: %v\n%s", err, out)
	}

	// Per namespace: pod/default/a is namespace default's; node/routes
	// the node's own.
	out, err = runCLI("flows", "--socket", sock, "--by-namespace")
	if err != nil {
		t.Fatalf("--by-namespace: %v\n%s", err, out)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	if d := rows["default"]; len(d) != 5 || d[1] != "1" || d[2] != "0" || d[3] != "0" {
		t.Errorf("--by-namespace: namespace default's row %q\n%s", d, out)
	}
	if _, ok := rows["(node)"]; !ok || len(rows["NAMESPACE"]) != 6 {
		t.Errorf("--by-namespace: no header or node row\n%s", out)
	}
	if _, err := runCLI("flows", "--socket", sock, "--by-namespace", "--owner", "pod/"); err == nil {
		t.Error("--by-namespace with --owner: no error")
	}

	// Stop reconciling, then change the switch: --diff reports it.
	stopRun()
	<-runDone
	if _, err := sb.Ofctl("-O", "OpenFlow13", "add-flow", "br0", "table=0,priority=1000,ip,actions=drop"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Ofctl("-O", "OpenFlow13", "del-flows", "br0", "table=70"); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI("flows", "--socket", sock, "--diff")
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != 1 {
		t.Fatalf("--diff with differences: exit %v, want status 1\n%s", err, out)
	}
	for _, s := range []string{"- priority=1000,ip actions=drop", "# flow not wanted by any owner (foreign)",
		"+ cookie=", "table=70, priority=100,ip,nw_dst=10.128.0.2 actions=output:3", "# flow missing, wanted by pod/default/a"} {
		if !strings.Contains(out, s) {
			t.Errorf("--diff output lacks %q:\n%s", s, out)
		}
	}
	out, err = runCLI("flows", "--socket", sock, "--diff", "--owner", "node/")
	if err != nil || !strings.Contains(out, "# no differences") {
		t.Fatalf("--diff --owner node/: %v\n%s", err, out)
	}

	if _, err := runCLI("flows", "--socket", sock, "--bridge", "br9"); err == nil || !strings.Contains(err.Error(), `no bridge "br9"`) {
		t.Fatalf("unknown bridge: %v", err)
	}
	if _, err := runCLI("flows", "--socket", filepath.Join(t.TempDir(), "none.sock")); err == nil || !strings.Contains(err.Error(), "is `nodeflow agent` running?") {
		t.Fatalf("no agent: %v", err)
	}
}
