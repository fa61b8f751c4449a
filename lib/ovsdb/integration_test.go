package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// sandbox starts a private OVS and a client connected to it.
func sandbox(t *testing.T) (*ovs.Sandbox, *Client) {
	t.Helper()
	sb := ovstest.New(t, ovs.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, "unix:"+sb.DBSock(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return sb, c
}

// testCtx is a context bounded by a deadline well inside the test timeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// vsctl runs ovs-vsctl (the oracle) and fails the test on error.
func vsctl(t *testing.T, sb *ovs.Sandbox, args ...string) string {
	t.Helper()
	out, err := sb.Vsctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// run runs a command on the host and fails the test on error.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

var (
	br0Spec    = BridgeSpec{Name: "br0", DatapathType: "netdev", ExternalIDs: map[string]string{"owner": "nodeflow"}}
	breth0Spec = BridgeSpec{Name: "breth0", DatapathType: "netdev", OtherConfig: map[string]string{"hwaddr": "02:00:00:00:00:01"}}
	topoPorts  = []struct {
		bridge string
		spec   PortSpec
	}{
		{"br0", PortSpec{Name: "br0-to-breth0", Type: "patch", Options: map[string]string{"peer": "breth0-to-br0"}}},
		{"breth0", PortSpec{Name: "breth0-to-br0", Type: "patch", Options: map[string]string{"peer": "br0-to-breth0"}}},
		{"br0", PortSpec{Name: "vxlan0", Type: "vxlan", Options: map[string]string{"remote_ip": "flow", "key": "flow"},
			ExternalIDs: map[string]string{"role": "tunnel"}, OfportRequest: 10}},
	}
)

// buildTopology creates br0 and breth0 joined by a patch pair, and vxlan0 on br0.
func buildTopology(t *testing.T, c *Client) {
	t.Helper()
	ctx := testCtx(t)
	for _, spec := range []BridgeSpec{br0Spec, breth0Spec} {
		if err := c.EnsureBridge(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range topoPorts {
		if err := c.EnsurePort(ctx, p.bridge, p.spec); err != nil {
			t.Fatal(err)
		}
	}
}

func TestIntegrationRPC(t *testing.T) {
	_, c := sandbox(t)
	ctx := testCtx(t)
	dbs, err := c.ListDBs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dbs, []string{"Open_vSwitch"}) && !contains(dbs, "Open_vSwitch") {
		t.Fatalf("list_dbs = %v", dbs)
	}
	s, err := c.GetSchema(ctx, "Open_vSwitch")
	if err != nil {
		t.Fatal(err)
	}
	fm, ok := s.Column("Bridge", "fail_mode")
	if !ok || len(fm.Type.Key.Enum) != 2 {
		t.Fatalf("Bridge.fail_mode = %+v", fm)
	}
	if err := c.Echo(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSchema(ctx, "nosuchdb")
	var re *RPCError
	if !errors.As(err, &re) || re.Err != "unknown database" {
		t.Fatalf("get_schema nosuchdb: %v", err)
	}
	res, err := c.Transact(ctx, "Open_vSwitch", Comment("nodeflow test"), Select("Open_vSwitch", nil, "_uuid"))
	if err != nil || len(res) != 2 || len(res[1].Rows) != 1 {
		t.Fatalf("transact: %+v, %v", res, err)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestIntegrationTopology(t *testing.T) {
	sb, c := sandbox(t)
	ctx := testCtx(t)
	buildTopology(t, c)

	// The oracle: ovs-vsctl reads back what the helpers wrote.
	checks := []struct {
		args []string
		want string
	}{
		{[]string{"get", "Bridge", "br0", "datapath_type"}, "netdev"},
		{[]string{"get", "Bridge", "breth0", "datapath_type"}, "netdev"},
		{[]string{"get", "Bridge", "br0", "fail_mode"}, "secure"},
		{[]string{"get", "Bridge", "br0", "protocols"}, `[OpenFlow13, OpenFlow15]`},
		{[]string{"get", "Bridge", "br0", "external_ids:owner"}, `nodeflow`},
		{[]string{"get", "Bridge", "breth0", "other_config:hwaddr"}, `"02:00:00:00:00:01"`},
		{[]string{"list-br"}, "br0\nbreth0"},
		{[]string{"list-ports", "br0"}, "br0-to-breth0\nvxlan0"},
		{[]string{"list-ports", "breth0"}, "breth0-to-br0"},
		{[]string{"get", "Interface", "br0", "type"}, "internal"},
		{[]string{"get", "Interface", "br0-to-breth0", "type"}, "patch"},
		{[]string{"get", "Interface", "br0-to-breth0", "options"}, `{peer=breth0-to-br0}`},
		{[]string{"get", "Interface", "breth0-to-br0", "options"}, `{peer=br0-to-breth0}`},
		{[]string{"get", "Interface", "vxlan0", "type"}, "vxlan"},
		{[]string{"get", "Interface", "vxlan0", "options"}, `{key=flow, remote_ip=flow}`},
		{[]string{"get", "Interface", "vxlan0", "ofport_request"}, `10`},
		{[]string{"get", "Interface", "vxlan0", "external_ids"}, `{role=tunnel}`},
		{[]string{"get", "Port", "vxlan0", "external_ids"}, `{role=tunnel}`},
		{[]string{"port-to-br", "vxlan0"}, "br0"},
	}
	for _, ck := range checks {
		if got := vsctl(t, sb, ck.args...); got != ck.want {
			t.Errorf("ovs-vsctl %s = %q, want %q", strings.Join(ck.args, " "), got, ck.want)
		}
	}

	// Every port gets an OpenFlow port number, which ovs-vsctl agrees with.
	for _, name := range []string{"br0", "breth0", "br0-to-breth0", "breth0-to-br0", "vxlan0"} {
		n, err := c.WaitOfport(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if want := vsctl(t, sb, "get", "Interface", name, "ofport"); strconv.FormatInt(n, 10) != want {
			t.Errorf("WaitOfport(%s) = %d, ovs-vsctl says %s", name, n, want)
		}
	}
	if n, _ := c.WaitOfport(ctx, "vxlan0"); n != 10 {
		t.Errorf("vxlan0 ofport %d, requested 10", n)
	}

	ports, err := c.ListPorts(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ports {
		names = append(names, p.Name)
		if want := vsctl(t, sb, "get", "Interface", p.Name, "ofport"); strconv.FormatInt(p.Ofport, 10) != want {
			t.Errorf("ListPorts: %s ofport %d, ovs-vsctl says %s", p.Name, p.Ofport, want)
		}
		if want := strings.Trim(vsctl(t, sb, "get", "Interface", p.Name, "type"), `"`); p.Type != want {
			t.Errorf("ListPorts: %s type %q, ovs-vsctl says %q", p.Name, p.Type, want)
		}
	}
	if !reflect.DeepEqual(names, []string{"br0", "br0-to-breth0", "vxlan0"}) {
		t.Errorf("ListPorts(br0) names %v", names)
	}
	if p := ports[2]; p.ExternalIDs["role"] != "tunnel" || p.InterfaceExternalIDs["role"] != "tunnel" {
		t.Errorf("ListPorts: vxlan0 external ids %v / %v", p.ExternalIDs, p.InterfaceExternalIDs)
	}

	// External ids of a bridge: merge, read back.
	if err := c.SetBridgeExternalIDs(ctx, "br0", map[string]string{"version": "7", "node": "n1"}); err != nil {
		t.Fatal(err)
	}
	ids, err := c.BridgeExternalIDs(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"owner": "nodeflow", "version": "7", "node": "n1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("BridgeExternalIDs = %v, want %v", ids, want)
	}
	if got := vsctl(t, sb, "get", "Bridge", "br0", "external_ids"); got != `{node=n1, owner=nodeflow, version="7"}` {
		t.Errorf("ovs-vsctl external_ids = %s", got)
	}
	if _, err := c.BridgeExternalIDs(ctx, "nosuchbr"); !errors.Is(err, ErrNotFound) {
		t.Errorf("BridgeExternalIDs(nosuchbr): %v", err)
	}
	if err := c.SetBridgeExternalIDs(ctx, "nosuchbr", map[string]string{"a": "b"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetBridgeExternalIDs(nosuchbr): %v", err)
	}

	// The switch's row says what ovs-vsctl set (ovs-ctl sets the version
	// at start; a sandbox has none).
	vsctl(t, sb, "set", "Open_vSwitch", ".", "ovs_version=3.1.0")
	sw, err := c.Switch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sw.OVSVersion != "3.1.0" {
		t.Errorf("Switch().OVSVersion = %q, want 3.1.0", sw.OVSVersion)
	}
	if !slices.Contains(sw.DatapathTypes, "netdev") {
		t.Errorf("Switch().DatapathTypes = %v, want netdev among them", sw.DatapathTypes)
	}

	// Fixing a column: the helper changes only what differs.
	if err := c.EnsurePort(ctx, "br0", PortSpec{Name: "vxlan0", Type: "vxlan",
		Options: map[string]string{"remote_ip": "flow", "key": "flow", "dst_port": "4790"}, OfportRequest: 10}); err != nil {
		t.Fatal(err)
	}
	if got := vsctl(t, sb, "get", "Interface", "vxlan0", "options"); got != `{dst_port="4790", key=flow, remote_ip=flow}` {
		t.Errorf("vxlan0 options after fix: %s", got)
	}
	if got := vsctl(t, sb, "get", "Interface", "vxlan0", "external_ids"); got != `{role=tunnel}` {
		t.Errorf("vxlan0 external_ids after fix (merge keeps keys): %s", got)
	}
	if err := c.EnsureBridge(ctx, BridgeSpec{Name: "br0", DatapathType: "netdev", FailMode: "standalone", Protocols: []string{"OpenFlow10"}}); err != nil {
		t.Fatal(err)
	}
	if got := vsctl(t, sb, "get", "Bridge", "br0", "fail_mode", "protocols"); got != "standalone\n[OpenFlow10, OpenFlow13, OpenFlow15]" {
		t.Errorf("br0 after fix: %q", got)
	}

	// A port on another bridge is refused, and so is a bad spec.
	if err := c.EnsurePort(ctx, "breth0", PortSpec{Name: "vxlan0", Type: "vxlan", Options: map[string]string{"remote_ip": "flow"}}); err == nil ||
		!strings.Contains(err.Error(), "ovsdb: ensure port vxlan0 on breth0: port vxlan0 exists on another bridge") {
		t.Errorf("EnsurePort on another bridge: %v", err)
	}
	if err := c.EnsurePort(ctx, "br0", PortSpec{Name: "p", Type: "patch"}); err == nil || !strings.Contains(err.Error(), "options: patch port needs options:peer") {
		t.Errorf("patch without peer: %v", err)
	}
	if err := c.EnsurePort(ctx, "nosuchbr", PortSpec{Name: "p"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "bridge nosuchbr: not found") {
		t.Errorf("EnsurePort on a missing bridge: %v", err)
	}

	// Deleting: twice is fine, and the port is gone for ovs-vsctl.
	for i := 0; i < 2; i++ {
		if err := c.DeletePort(ctx, "br0", "vxlan0"); err != nil {
			t.Fatalf("DeletePort #%d: %v", i+1, err)
		}
	}
	if got := vsctl(t, sb, "list-ports", "br0"); got != "br0-to-breth0" {
		t.Errorf("list-ports br0 after delete: %q", got)
	}
	if got := vsctl(t, sb, "--if-exists", "get", "Interface", "vxlan0", "name"); got != "" {
		t.Errorf("Interface vxlan0 still exists: %q", got)
	}
	if err := c.DeletePort(ctx, "breth0", "br0-to-breth0"); err == nil || !strings.Contains(err.Error(), "not on bridge breth0") {
		t.Errorf("DeletePort from the wrong bridge: %v", err)
	}
}

// configColumns are the columns the helpers write; the idempotency check
// watches exactly these.
var configColumns = map[string]MonitorRequest{
	"Open_vSwitch": {Columns: []string{"external_ids"}},
	"Bridge":       {Columns: []string{"name", "ports", "datapath_type", "fail_mode", "protocols", "other_config", "external_ids"}},
	"Port":         {Columns: []string{"name", "interfaces", "external_ids"}},
	"Interface":    {Columns: []string{"name", "type", "options", "external_ids", "ofport_request", "mtu_request"}},
}

func TestIntegrationIdempotent(t *testing.T) {
	sb, c := sandbox(t)
	ctx := testCtx(t)
	buildTopology(t, c)
	if err := c.SetBridgeExternalIDs(ctx, "br0", map[string]string{"version": "1"}); err != nil {
		t.Fatal(err)
	}
	listCmd := func() string {
		var b strings.Builder
		for _, tbl := range []string{"Bridge", "Port", "Interface"} {
			cols := "_uuid," + strings.Join(configColumns[tbl].Columns, ",")
			b.WriteString(vsctl(t, sb, "--columns="+cols, "list", tbl))
		}
		return b.String()
	}
	before := listCmd()

	// Watch the configuration columns: any write would show as an update.
	updates := make(chan MonitorUpdate, 100)
	mon, err := c.Monitor(ctx, DatabaseName, configColumns, func(u MonitorUpdate) { updates <- u })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mon.Cancel(context.Background()) }()
	if u := <-updates; !u.Snapshot {
		t.Fatalf("first update is not a snapshot")
	}

	buildTopology(t, c)
	if err := c.SetBridgeExternalIDs(ctx, "br0", map[string]string{"version": "1"}); err != nil {
		t.Fatal(err)
	}
	// A sentinel change in a table the helpers do not touch: the next
	// update must be exactly it, so nothing before it changed anything.
	if _, err := c.Transact(ctx, DatabaseName, Mutate("Open_vSwitch", nil,
		InsertMutation("external_ids", Map{"sentinel": "1"}))); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-updates:
		if len(u.Tables) != 1 || len(u.Tables["Open_vSwitch"]) != 1 {
			t.Fatalf("re-running the helpers changed something: %v", u.Tables)
		}
	case <-ctx.Done():
		t.Fatal("no update for the sentinel change")
	}

	after := listCmd()
	if before != after {
		t.Fatalf("ovs-vsctl list differs after re-running the helpers:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestIntegrationSystemPortFromNetns(t *testing.T) {
	sb, c := sandbox(t)
	ctx := testCtx(t)
	if err := c.EnsureBridge(ctx, br0Spec); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("nfovsdb-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	run(t, "ip", "-n", ns, "link", "add", "pod0", "type", "veth", "peer", "name", "veth-pod0")
	run(t, "ip", "-n", ns, "link", "set", "veth-pod0", "netns", sb.Netns)
	run(t, "ip", "-n", ns, "link", "set", "pod0", "up")
	run(t, "ip", "-n", sb.Netns, "link", "set", "veth-pod0", "up")

	spec := PortSpec{Name: "veth-pod0", ExternalIDs: map[string]string{"pod": "default/web-0"}}
	if err := c.EnsurePort(ctx, "br0", spec); err != nil {
		t.Fatal(err)
	}
	n, err := c.WaitOfport(ctx, "veth-pod0")
	if err != nil {
		t.Fatal(err)
	}
	if n <= 0 {
		t.Fatalf("ofport %d", n)
	}
	if got := vsctl(t, sb, "get", "Interface", "veth-pod0", "ofport"); got != strconv.FormatInt(n, 10) {
		t.Errorf("ovs-vsctl ofport %s, WaitOfport %d", got, n)
	}
	if got := vsctl(t, sb, "get", "Interface", "veth-pod0", "error"); got != "[]" {
		t.Errorf("interface error %s", got)
	}
	ic, err := c.Interfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := ic.Get("veth-pod0"); !ok || i.MACInUse == "" || i.ExternalIDs["pod"] != "default/web-0" {
		t.Errorf("cache row %+v", i)
	}

	// A system port whose device does not exist gets ofport -1, and the
	// error says why.
	if err := c.EnsurePort(ctx, "br0", PortSpec{Name: "nosuchdev0"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.WaitOfport(ctx, "nosuchdev0")
	if err == nil || !strings.Contains(err.Error(), "ofport -1") || !strings.Contains(err.Error(), "could not open network device nosuchdev0") {
		t.Fatalf("WaitOfport(nosuchdev0): %v", err)
	}

	if err := c.DeletePort(ctx, "br0", "veth-pod0"); err != nil {
		t.Fatal(err)
	}
	if got := vsctl(t, sb, "list-ports", "br0"); got != "nosuchdev0" {
		t.Errorf("list-ports after delete: %q", got)
	}
}

// nextEvent waits for the next event about name.
func nextEvent(t *testing.T, ctx context.Context, sub *Subscription, name string, ok func(InterfaceEvent) bool) InterfaceEvent {
	t.Helper()
	for {
		select {
		case ev := <-sub.Events():
			if ev.Name() == name && ok(ev) {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no matching event for %s: %v", name, ctx.Err())
		}
	}
}

func TestIntegrationInterfaceEvents(t *testing.T) {
	_, c := sandbox(t)
	ctx := testCtx(t)
	if err := c.EnsureBridge(ctx, br0Spec); err != nil {
		t.Fatal(err)
	}
	ic, err := c.Interfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub := ic.Subscribe()
	defer sub.Close()

	if err := c.EnsurePort(ctx, "br0", PortSpec{Name: "mp0", Type: "internal"}); err != nil {
		t.Fatal(err)
	}
	added := nextEvent(t, ctx, sub, "mp0", func(ev InterfaceEvent) bool { return ev.Kind == InterfaceAdded })
	if added.Old != nil || added.New == nil || added.New.Type != "internal" {
		t.Errorf("added event %+v", added)
	}
	got := nextEvent(t, ctx, sub, "mp0", func(ev InterfaceEvent) bool { return ev.OfportChanged() })
	if got.Kind != InterfaceUpdated || got.OldOfport != 0 || got.NewOfport <= 0 {
		t.Errorf("ofport event %+v", got)
	}
	if i, ok := ic.Get("mp0"); !ok || i.Ofport != got.NewOfport {
		t.Errorf("cache has %+v", i)
	}

	if err := c.DeletePort(ctx, "br0", "mp0"); err != nil {
		t.Fatal(err)
	}
	del := nextEvent(t, ctx, sub, "mp0", func(ev InterfaceEvent) bool { return ev.Kind == InterfaceDeleted })
	if del.OldOfport != got.NewOfport || del.NewOfport != 0 || !del.OfportChanged() {
		t.Errorf("deleted event %+v", del)
	}
	if _, ok := ic.Get("mp0"); ok {
		t.Error("mp0 still in the cache")
	}
}

func TestIntegrationServerErrors(t *testing.T) {
	_, c := sandbox(t)
	ctx := testCtx(t)

	t.Run("bad enum value", func(t *testing.T) {
		err := c.EnsureBridge(ctx, BridgeSpec{Name: "br9", FailMode: "bogus"})
		var oe *OpError
		if !errors.As(err, &oe) || oe.Err != ErrStrConstraintViolation || oe.Index != 3 || oe.Op != "insert" || oe.Table != "Bridge" {
			t.Fatalf("error %#v", err)
		}
		if want := "ovsdb: transact ensure bridge br9: op 3 (insert Bridge): constraint violation: "; !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "bogus") {
			t.Fatalf("message %q, want prefix %q and the bad value", err, want)
		}
		if err := c.EnsureBridge(ctx, BridgeSpec{Name: "br9"}); err != nil {
			t.Fatalf("next transaction: %v", err)
		}
	})

	t.Run("two ports with the same name", func(t *testing.T) {
		var ops []Operation
		for i := 0; i < 2; i++ {
			iface, port := fmt.Sprintf("i%d", i), fmt.Sprintf("p%d", i)
			ops = append(ops,
				Insert("Interface", Row{"name": fmt.Sprintf("dup%d", i)}, iface),
				Insert("Port", Row{"name": "dup", "interfaces": MakeUUIDSet(NamedUUID(iface))}, port),
				Mutate("Bridge", []Condition{Equal("name", "br9")}, InsertMutation("ports", MakeUUIDSet(NamedUUID(port)))))
		}
		_, err := c.Transact(ctx, DatabaseName, ops...)
		var oe *OpError
		if !errors.As(err, &oe) || oe.Err != ErrStrConstraintViolation || oe.Op != "commit" || !strings.Contains(err.Error(), "(dup)") {
			t.Fatalf("error %v", err)
		}
		t.Logf("server error: %v", err)
		if _, err := c.ListPorts(ctx, "br9"); err != nil {
			t.Fatalf("next transaction: %v", err)
		}
	})

	t.Run("referential integrity", func(t *testing.T) {
		_, err := c.Transact(ctx, DatabaseName,
			Mutate("Bridge", []Condition{Equal("name", "br9")}, InsertMutation("ports", MakeUUIDSet(UUID(exampleUUID)))))
		var oe *OpError
		if !errors.As(err, &oe) || oe.Err != ErrStrReferentialIntegrity || oe.Op != "commit" || oe.Index != 1 {
			t.Fatalf("error %#v", err)
		}
		t.Logf("server error: %v", err)
	})

	t.Run("cancel a blocked transaction", func(t *testing.T) {
		// A wait without timeout blocks until br9's name changes, which
		// never happens; the context ends it and the client sends cancel.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Transact(short, DatabaseName, Operation{Op: "wait", Table: "Bridge",
			Where: []Condition{Equal("name", "br9")}, Columns: []string{"name"}, Until: "!=", Rows: []Row{{"name": "br9"}}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %s", d)
		}
		if err := c.Echo(ctx); err != nil {
			t.Fatalf("after cancel: %v", err)
		}
	})

	t.Run("unknown table", func(t *testing.T) {
		_, err := c.Transact(ctx, DatabaseName, Select("NoSuchTable", nil))
		var oe *OpError
		if !errors.As(err, &oe) || oe.Index != 0 {
			t.Fatalf("error %v", err)
		}
	})
}

// TestIntegrationWaitApplied: WaitApplied increments next_cfg and returns
// once ovs-vswitchd's cur_cfg has caught up with it.
func TestIntegrationWaitApplied(t *testing.T) {
	_, c := sandbox(t)
	ctx := testCtx(t)
	if err := c.EnsureBridge(ctx, br0Spec); err != nil {
		t.Fatal(err)
	}
	before, err := c.Switch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitApplied(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := c.Switch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.NextCfg <= before.NextCfg || after.CurCfg < after.NextCfg {
		t.Errorf("next_cfg %d -> %d, cur_cfg %d: want next_cfg incremented and cur_cfg caught up", before.NextCfg, after.NextCfg, after.CurCfg)
	}
}
