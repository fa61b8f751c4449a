package sample

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// Port and bridge names in the sandbox.
const (
	podBridge     = "br0"
	gatewayBridge = "breth0"
	tunnelName    = "vxlan0"
	mgmtName      = "mp0"
	uplinkName    = "eth0"
)

// iface is one interface of the sandbox that packets enter or leave by.
type iface struct {
	// pcap is the interface's current tx_pcap file; closed holds the
	// files already rotated away (netdev-dummy writes a file out only when
	// it is closed).
	pcap   string
	closed []string
}

// rig is the sample installed in a sandboxed ovs-vswitchd on the dummy
// (userspace) datapath: br0 and breth0 joined by patch ports, every port
// numbered as the sample's Config says, vxlan0 with native tunnelling over
// breth0, and both bridges' flows, groups and meters installed by real
// reconcilers from the sample's stores, as the agent installs them.
type rig struct {
	t      *testing.T
	sb     *ovs.Sandbox
	cfg    Config
	ifaces map[string]*iface
	// stats holds each bridge's n_packets per flow after the last packet.
	stats map[plan.Bridge]map[string]uint64
	// groups holds each bridge's groups whose buckets recirculate, read
	// with the first stats (recircGroups).
	groups map[plan.Bridge]map[string]bool
	// stops stops the reconcilers.
	stops []func()
	// stores are the sample's desired state, by bridge.
	stores map[plan.Bridge]*reconcile.Store
}

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// newRig builds the sample, starts a sandbox with its bridges and ports,
// and installs the sample with one reconciler per bridge.
func newRig(t *testing.T) *rig {
	t.Helper()
	cfg := Default()
	d, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	r := &rig{t: t, sb: sb, cfg: cfg, ifaces: map[string]*iface{}, stores: map[plan.Bridge]*reconcile.Store{}}
	dir := t.TempDir()
	pcap := func(name string) string { return filepath.Join(dir, name+"-0.pcap") }
	bridge := func(name string, extra ...string) []string {
		args := []string{"--", "add-br", name, "--", "set", "bridge", name, "datapath_type=dummy",
			"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"}
		return append(args, extra...)
	}
	port := func(br, name, typ string, ofport uint32, opts ...string) []string {
		args := []string{"--", "add-port", br, name, "--", "set", "interface", name, "type=" + typ,
			"ofport_request=" + strconv.Itoa(int(ofport))}
		return append(args, opts...)
	}
	observe := func(name string) string {
		r.ifaces[name] = &iface{pcap: pcap(name)}
		return "options:tx_pcap=" + pcap(name)
	}
	p := cfg.Ports
	var args []string
	args = append(args, bridge(podBridge)...)
	args = append(args, port(podBridge, tunnelName, "vxlan", p.Tunnel, "options:remote_ip=flow", "options:key=flow")...)
	args = append(args, port(podBridge, "patch-"+podBridge, "patch", p.PodPatch, "options:peer=patch-"+gatewayBridge)...)
	args = append(args, port(podBridge, mgmtName, "internal", p.Mgmt, observe(mgmtName))...)
	for _, pod := range cfg.Pods {
		args = append(args, port(podBridge, pod.Name, "dummy", pod.Port, observe(pod.Name))...)
	}
	args = append(args, bridge(gatewayBridge, "other_config:hwaddr="+cfg.Local.MAC.String())...)
	args = append(args, port(gatewayBridge, uplinkName, "dummy", p.Uplink, observe(uplinkName))...)
	args = append(args, port(gatewayBridge, "patch-"+gatewayBridge, "patch", p.GatewayPatch, "options:peer=patch-"+podBridge)...)
	if _, err := sb.Vsctl(args[1:]...); err != nil {
		t.Fatal(err)
	}
	// breth0's LOCAL port is the host: the node IP and MAC.
	if _, err := sb.Vsctl("set", "interface", gatewayBridge, observe(gatewayBridge)); err != nil {
		t.Fatal(err)
	}

	// Native tunnelling: the node IP on breth0, the route to the uplink's
	// subnet through it, and the other node's MAC.
	node1, node2 := cfg.Local.IPs[0], cfg.Remote.IPs[0]
	for _, cmd := range [][]string{
		{"netdev-dummy/ip4addr", gatewayBridge, node1.String() + "/24"},
		{"ovs/route/add", node1.String() + "/24", gatewayBridge},
		{"tnl/neigh/set", gatewayBridge, node2.String(), cfg.Remote.MAC.String()},
	} {
		if _, err := sb.Appctl(cmd...); err != nil {
			t.Fatalf("%s: %v", strings.Join(cmd, " "), err)
		}
	}

	for _, b := range plan.Bridges {
		name := podBridge
		if b == plan.Gateway {
			name = gatewayBridge
		}
		r.stores[b] = d.Store(b)
		r.reconcile(name, d.Store(b))
	}
	return r
}

// reconcile runs a reconciler for store on bridge until the test ends, and
// waits for its first full sync.
func (r *rig) reconcile(bridge string, store *reconcile.Store) {
	t := r.t
	rec := reconcile.New(store, reconcile.Options{Bridge: bridge, AuditInterval: -1, Logger: quietLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := ofconn.Dial(ctx, "unix:"+r.sb.MgmtSock(bridge), rec.ConnOptions(ofconn.Options{Logger: quietLogger()}))
	if err != nil {
		cancel()
		t.Fatalf("dial %s: %v", bridge, err)
	}
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			conn.Close()
		}
	}
	r.stops = append(r.stops, stop)
	t.Cleanup(stop)
	select {
	case <-rec.Synced():
	case err := <-done:
		t.Fatalf("%s: reconciler stopped: %v", bridge, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no first sync within 30 s", bridge)
	}
	if errs := store.Errors(); len(errs) > 0 {
		t.Fatalf("%s: owners not installed: %v", bridge, errs)
	}
}

// stopReconcilers stops the reconcilers, leaving the flows in place (the
// bridges fail secure), so that a test may add flows they would remove.
func (r *rig) stopReconcilers() {
	for _, stop := range r.stops {
		stop()
	}
}

// bridgeName is the sandbox name of bridge b.
func bridgeName(b plan.Bridge) string {
	if b == plan.Gateway {
		return gatewayBridge
	}
	return podBridge
}

// inject makes frame arrive on interface name (breth0 for the host).
func (r *rig) inject(name string, frame []byte) {
	r.t.Helper()
	if _, err := r.sb.Appctl("netdev-dummy/receive", name, fmt.Sprintf("%x", frame)); err != nil {
		r.t.Fatal(err)
	}
}

// readPcap returns the frames of a closed pcap file; a file never written
// has none.
func readPcap(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := pcapgo.NewReader(f)
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out [][]byte
	for {
		data, _, err := rd.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("read %s: %w", path, err)
		}
		out = append(out, data)
	}
}

// dump returns the lines of an ovs-ofctl dump command (dump-flows,
// dump-groups) of bridge b, over OpenFlow 1.5.
func (r *rig) dump(cmd string, b plan.Bridge) []string {
	r.t.Helper()
	out, err := r.sb.Ofctl("-O", "OpenFlow15", cmd, bridgeName(b))
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.Split(out, "\n")
}

// ruleStats returns n_packets of every flow of bridge b, by the flow's
// text without its statistics.
func (r *rig) ruleStats(b plan.Bridge) map[string]uint64 {
	r.t.Helper()
	stats := map[string]uint64{}
	for _, l := range r.dump("dump-flows", b) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "OFPST_") || strings.HasPrefix(l, "NXST_") {
			continue
		}
		m := nPacketsRE.FindStringSubmatch(l)
		if m == nil {
			r.t.Fatalf("dump-flows line without n_packets: %s", l)
		}
		n, _ := strconv.ParseUint(m[1], 10, 64)
		stats[statsRE.ReplaceAllString(l, "")] += n
	}
	return stats
}

// recircGroups returns the ids of bridge b's groups with a bucket that
// recirculates (ct(..., table=N)).
func (r *rig) recircGroups(b plan.Bridge) map[string]bool {
	r.t.Helper()
	ids := map[string]bool{}
	for _, l := range r.dump("dump-groups", b) {
		if m := groupIDRE.FindStringSubmatch(l); m != nil && ctRecircRE.MatchString(l) {
			ids[m[1]] = true
		}
	}
	return ids
}

var (
	groupIDRE  = regexp.MustCompile(`group_id=(\d+)`)
	nPacketsRE = regexp.MustCompile(`n_packets=(\d+)`)
	statsRE    = regexp.MustCompile(`(cookie|duration|n_packets|n_bytes|idle_age|hard_age|idle_timeout|hard_timeout)=[^ ,]+,? ?`)
)
