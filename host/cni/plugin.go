package cni

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Keys of the external_ids the plugin sets on a pod's OVS Interface row (and
// reads back in CHECK and GC).
const (
	ExternalIDOwner        = "owner"         // always OwnerCNI
	ExternalIDPodNamespace = "pod-namespace" // K8S_POD_NAMESPACE
	ExternalIDPodName      = "pod-name"      // K8S_POD_NAME
	ExternalIDPodUID       = "pod-uid"       // K8S_POD_UID
	ExternalIDIP           = "ip"            // the pod's addresses, comma-separated, IPv4 first
	ExternalIDMAC          = "mac"           // the pod interface's MAC
	ExternalIDSandbox      = "sandbox"       // CNI_CONTAINERID
	ExternalIDIfName       = "ifname"        // CNI_IFNAME
	ExternalIDNetns        = "netns"         // CNI_NETNS
	// OwnerCNI marks ports the plugin created.
	OwnerCNI = "nodeflow-cni"
)

// CodeRangeExhausted is the plugin-specific CNI error code (100 and above are
// the plugin's to define) for "no free address in a pod subnet".
const CodeRangeExhausted uint = 100

// Plugin implements the CNI commands. The zero value is ready to use.
type Plugin struct {
	// Timeout bounds each command's OVSDB work. Zero means 30 seconds.
	Timeout time.Duration
	// Log receives progress messages; nil means logrus's standard logger.
	Log logrus.FieldLogger
}

// Funcs returns the plugin's commands for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, GC: p.GC, Status: p.Status}
}

func (p *Plugin) log() logrus.FieldLogger {
	if p.Log == nil {
		return logrus.StandardLogger()
	}
	return p.Log
}

func (p *Plugin) ctx() (context.Context, context.CancelFunc) {
	t := p.Timeout
	if t == 0 {
		t = 30 * time.Second
	}
	return context.WithTimeout(context.Background(), t)
}

func storeDir(conf *NetConf) string { return filepath.Join(conf.IPAM.DataDir, conf.Name) }

// cniError wraps err as a CNI error with code, unless it already is one.
func cniError(code uint, msg string, err error) error {
	var e *types.Error
	if errors.As(err, &e) {
		return e
	}
	return types.NewError(code, msg, err.Error())
}

// Add attaches the container: addresses, veth, OVS port. It prints nothing;
// skel's caller prints the result returned by AddResult.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	res, conf, err := p.AddResult(args)
	if err != nil {
		return err
	}
	return types.PrintResult(res, conf.CNIVersion)
}

// AddResult is Add without printing: it returns the CNI result.
func (p *Plugin) AddResult(args *skel.CmdArgs) (*current.Result, *NetConf, error) {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil, nil, err
	}
	k8s, err := ParseK8sArgs(args.Args)
	if err != nil {
		return nil, nil, err
	}
	if args.Netns == "" {
		return nil, nil, types.NewError(types.ErrInvalidNetNS, "cni: add: CNI_NETNS is empty", "")
	}
	if _, err := os.Stat(args.Netns); err != nil {
		return nil, nil, types.NewError(types.ErrInvalidNetNS, "cni: add: CNI_NETNS "+args.Netns, err.Error())
	}
	att := Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	hostName := HostVethName(args.ContainerID, args.IfName)
	log := p.log().WithFields(logrus.Fields{"container": args.ContainerID, "ifname": args.IfName, "pod": k8s.PodNamespace + "/" + k8s.PodName, "port": hostName})

	addrs, err := p.allocate(conf, att)
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			p.undo(conf, att, hostName)
		}
	}()
	log = log.WithField("ips", addrs)

	pl := podLink{netns: args.Netns, ifName: args.IfName, mtu: conf.MTU, mac: MACFromIP(addrs[0].Addr())}
	for i, a := range addrs {
		pl.addrs = append(pl.addrs, a)
		pl.gateway = append(pl.gateway, conf.Ranges[i].Gateway)
	}
	host, pod, err := setupVeth(hostName, pl)
	if err != nil {
		return nil, nil, cniError(types.ErrInternal, "cni: add: veth", err)
	}

	ids := map[string]string{
		ExternalIDOwner:        OwnerCNI,
		ExternalIDPodNamespace: k8s.PodNamespace,
		ExternalIDPodName:      k8s.PodName,
		ExternalIDPodUID:       k8s.PodUID,
		ExternalIDIP:           joinAddrs(addrs),
		ExternalIDMAC:          pl.mac.String(),
		ExternalIDSandbox:      args.ContainerID,
		ExternalIDIfName:       args.IfName,
		ExternalIDNetns:        args.Netns,
	}
	// The record first: from here on, a port deleted by someone else
	// (with its bridge, say) can be recreated by the node agent.
	rec := PortRecord{Bridge: conf.Bridge, Port: hostName, ContainerID: args.ContainerID, IfName: args.IfName, ExternalIDs: ids}
	if err := p.putRecord(conf, rec); err != nil {
		return nil, nil, err
	}
	ctx, cancel := p.ctx()
	defer cancel()
	sw, err := dialSwitch(ctx, conf.OVSDB)
	if err != nil {
		return nil, nil, types.NewError(types.ErrTryAgainLater, "cni: add: connect to ovsdb "+conf.OVSDB, err.Error())
	}
	defer sw.Close()
	if err := sw.EnsureBridge(ctx, conf.Bridge, conf.DatapathType); err != nil {
		return nil, nil, types.NewError(types.ErrInternal, "cni: add: bridge "+conf.Bridge, err.Error())
	}
	ofport, err := sw.AddPort(ctx, conf.Bridge, hostName, ids)
	if err != nil {
		return nil, nil, types.NewError(types.ErrInternal, "cni: add: port "+hostName+" on "+conf.Bridge, err.Error())
	}
	log.WithField("ofport", ofport).Info("pod attached")

	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: hostName, Mac: host.Attrs().HardwareAddr.String()},
			{Name: args.IfName, Mac: pod.Attrs().HardwareAddr.String(), Sandbox: args.Netns, Mtu: conf.MTU},
		},
	}
	for i, a := range addrs {
		res.IPs = append(res.IPs, &current.IPConfig{
			Interface: current.Int(1),
			Address:   *prefixToIPNet(a),
			Gateway:   conf.Ranges[i].Gateway.AsSlice(),
		})
		dst := "0.0.0.0/0"
		if a.Addr().Is6() {
			dst = "::/0"
		}
		_, dstNet, _ := net.ParseCIDR(dst)
		res.Routes = append(res.Routes, &types.Route{Dst: *dstNet, GW: conf.Ranges[i].Gateway.AsSlice()})
	}
	ok = true
	return res, conf, nil
}

// allocate takes one address per range for att, or none.
func (p *Plugin) allocate(conf *NetConf, att Attachment) ([]netip.Prefix, error) {
	st, err := OpenStore(storeDir(conf))
	if err != nil {
		return nil, types.NewError(types.ErrIOFailure, "cni: ipam", err.Error())
	}
	defer st.Close()
	var out []netip.Prefix
	for _, r := range conf.Ranges {
		a, err := st.Allocate(att, r)
		if err != nil {
			_ = st.Release(att)
			if errors.Is(err, ErrRangeExhausted) {
				return nil, types.NewError(CodeRangeExhausted, fmt.Sprintf("cni: ipam: subnet %s is exhausted", r.Subnet), err.Error())
			}
			return nil, types.NewError(types.ErrIOFailure, "cni: ipam", err.Error())
		}
		out = append(out, netip.PrefixFrom(a, r.Subnet.Bits()))
	}
	return out, nil
}

// putRecord writes the port record of an attachment, under the store's
// lock.
func (p *Plugin) putRecord(conf *NetConf, rec PortRecord) error {
	st, err := OpenStore(storeDir(conf))
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cni: port record", err.Error())
	}
	defer st.Close()
	if err := st.PutPort(rec); err != nil {
		return types.NewError(types.ErrIOFailure, "cni: port record", err.Error())
	}
	return nil
}

// deleteRecord removes the port record of hostName, under the store's
// lock. Once it returns, the node agent no longer recreates the port, so
// the port and the veth can go.
func (p *Plugin) deleteRecord(conf *NetConf, hostName string) error {
	st, err := OpenStore(storeDir(conf))
	if err != nil {
		return err
	}
	defer st.Close()
	return st.DeletePort(hostName)
}

// undo removes what a failed ADD created, best effort.
func (p *Plugin) undo(conf *NetConf, att Attachment, hostName string) {
	_ = p.deleteRecord(conf, hostName)
	ctx, cancel := p.ctx()
	defer cancel()
	if sw, err := dialSwitch(ctx, conf.OVSDB); err == nil {
		_ = sw.DelPort(ctx, conf.Bridge, hostName)
		sw.Close()
	}
	_ = deleteVeth(hostName)
	if st, err := OpenStore(storeDir(conf)); err == nil {
		_ = st.Release(att)
		st.Close()
	}
}

// Del detaches the container. Resources that are already gone are not an
// error, so DEL of an unknown container succeeds.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	att := Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	hostName := HostVethName(args.ContainerID, args.IfName)
	ctx, cancel := p.ctx()
	defer cancel()
	sw, err := dialSwitch(ctx, conf.OVSDB)
	if err != nil {
		// Without the database the port cannot be removed; the runtime retries.
		return types.NewError(types.ErrTryAgainLater, "cni: del: connect to ovsdb "+conf.OVSDB, err.Error())
	}
	defer sw.Close()
	if err := p.deleteRecord(conf, hostName); err != nil {
		return types.NewError(types.ErrIOFailure, "cni: del: port record", err.Error())
	}
	if err := sw.DelPort(ctx, conf.Bridge, hostName); err != nil {
		return types.NewError(types.ErrInternal, "cni: del: port "+hostName, err.Error())
	}
	if err := deleteVeth(hostName); err != nil {
		return types.NewError(types.ErrInternal, "cni: del: veth", err.Error())
	}
	st, err := OpenStore(storeDir(conf))
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cni: del: ipam", err.Error())
	}
	defer st.Close()
	if err := st.Release(att); err != nil {
		return types.NewError(types.ErrIOFailure, "cni: del: ipam", err.Error())
	}
	p.log().WithFields(logrus.Fields{"container": args.ContainerID, "ifname": args.IfName, "port": hostName}).Info("pod detached")
	return nil
}

// Check verifies that the attachment described by prevResult is intact:
// addresses still allocated, the port record present, host veth up with TX
// checksum offload off, OVS port on the bridge with the attachment's and
// the record's external_ids, and inside the pod the interface with its MAC,
// addresses and default routes.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "cni: check: prevResult is missing", "")
	}
	fail := func(format string, a ...any) error {
		return types.NewError(types.ErrInternal, "cni: check: "+fmt.Sprintf(format, a...), "")
	}
	att := Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	hostName := HostVethName(args.ContainerID, args.IfName)
	prev := conf.PrevResult

	var want []netip.Addr
	for _, ipc := range prev.IPs {
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			return fail("prevResult: bad address %v", ipc.Address)
		}
		want = append(want, a.Unmap())
	}
	slices.SortFunc(want, func(a, b netip.Addr) int { return a.Compare(b) })
	st, err := OpenStore(storeDir(conf))
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cni: check: ipam", err.Error())
	}
	have, err := st.Lookup(att)
	if err != nil {
		st.Close()
		return types.NewError(types.ErrIOFailure, "cni: check: ipam", err.Error())
	}
	rec, haveRec, err := st.Port(hostName)
	st.Close()
	if err != nil {
		return fail("port record %s: %v", hostName, err)
	}
	if !slices.Equal(have, want) {
		return fail("ipam: attachment holds %v, prevResult says %v", have, want)
	}
	if !haveRec {
		return fail("port record %s: missing (the port could not be recreated if it were deleted)", hostName)
	}
	if rec.Bridge != conf.Bridge || rec.Attachment() != att {
		return fail("port record %s: bridge %q, attachment %s/%s; want %q, %s/%s", hostName,
			rec.Bridge, rec.ContainerID, rec.IfName, conf.Bridge, att.ContainerID, att.IfName)
	}

	host, err := netlink.LinkByName(hostName)
	if err != nil {
		return fail("host veth %s: %v", hostName, err)
	}
	if host.Attrs().Flags&net.FlagUp == 0 {
		return fail("host veth %s is down", hostName)
	}
	if on, err := TxChecksum("", hostName); err != nil || on {
		return fail("host veth %s: tx checksum offload on=%v err=%v", hostName, on, err)
	}

	var podIf *current.Interface
	for _, i := range prev.Interfaces {
		if i.Name == args.IfName && i.Sandbox != "" {
			podIf = i
		}
	}
	if podIf == nil {
		return fail("prevResult has no interface %s in a sandbox", args.IfName)
	}
	if err := checkPod(args.Netns, args.IfName, podIf.Mac, prev); err != nil {
		return fail("pod: %v", err)
	}

	ctx, cancel := p.ctx()
	defer cancel()
	sw, err := dialSwitch(ctx, conf.OVSDB)
	if err != nil {
		return types.NewError(types.ErrTryAgainLater, "cni: check: connect to ovsdb "+conf.OVSDB, err.Error())
	}
	defer sw.Close()
	ids, found, err := sw.Port(ctx, conf.Bridge, hostName)
	if err != nil {
		return types.NewError(types.ErrInternal, "cni: check: port "+hostName, err.Error())
	}
	if !found {
		return fail("port %s is not on bridge %s", hostName, conf.Bridge)
	}
	wantIDs := map[string]string{
		ExternalIDSandbox: args.ContainerID,
		ExternalIDIfName:  args.IfName,
		ExternalIDIP:      joinPlainAddrs(want),
		ExternalIDMAC:     podIf.Mac,
	}
	for k, v := range wantIDs {
		if ids[k] != v {
			return fail("port %s: external_ids:%s is %q, want %q", hostName, k, ids[k], v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rec.ExternalIDs)) {
		if ids[k] != rec.ExternalIDs[k] {
			return fail("port %s: external_ids:%s is %q, its record says %q", hostName, k, ids[k], rec.ExternalIDs[k])
		}
	}
	return nil
}

// checkPod verifies the pod end of the attachment inside its namespace.
func checkPod(netnsPath, ifName, mac string, prev *current.Result) error {
	target, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifName, err)
	}
	if got := l.Attrs().HardwareAddr.String(); !strings.EqualFold(got, mac) {
		return fmt.Errorf("interface %s: mac %s, want %s", ifName, got, mac)
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		return fmt.Errorf("interface %s is down", ifName)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("interface %s: addresses: %w", ifName, err)
	}
	for _, ipc := range prev.IPs {
		found := false
		for _, a := range addrs {
			if a.IPNet.String() == ipc.Address.String() {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("interface %s: address %s missing", ifName, ipc.Address.String())
		}
	}
	routes, err := retryDump(func() ([]netlink.Route, error) { return h.RouteList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("interface %s: routes: %w", ifName, err)
	}
	for _, want := range prev.Routes {
		found := false
		for _, r := range routes {
			isDefault := r.Dst == nil || (r.Dst.IP.IsUnspecified() && maskBits(r.Dst.Mask) == 0)
			if isDefault && want.Dst.IP.IsUnspecified() && maskBits(want.Dst.Mask) == 0 && r.Gw.Equal(want.GW) {
				found = true
			} else if r.Dst != nil && r.Dst.String() == want.Dst.String() && (want.GW == nil || r.Gw.Equal(want.GW)) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("interface %s: route %s missing", ifName, want.String())
		}
	}
	if on, err := TxChecksum(netnsPath, ifName); err != nil || on {
		return fmt.Errorf("interface %s: tx checksum offload on=%v err=%v", ifName, on, err)
	}
	return nil
}

func maskBits(m net.IPMask) int {
	ones, _ := m.Size()
	return ones
}

// GC releases the addresses, port records, ports and veths of attachments
// that are not in cni.dev/valid-attachments.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	valid := map[Attachment]bool{}
	var list []Attachment
	for _, v := range conf.ValidAttachments {
		a := Attachment{ContainerID: v.ContainerID, IfName: v.IfName}
		valid[a] = true
		list = append(list, a)
	}
	ctx, cancel := p.ctx()
	defer cancel()
	sw, err := dialSwitch(ctx, conf.OVSDB)
	if err != nil {
		return types.NewError(types.ErrTryAgainLater, "cni: gc: connect to ovsdb "+conf.OVSDB, err.Error())
	}
	defer sw.Close()
	// The records first, so the node agent does not recreate what goes;
	// a stale record's veth goes even when its port is already gone.
	st, err := OpenStore(storeDir(conf))
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cni: gc: port records", err.Error())
	}
	gone, err := st.gcPorts(valid)
	st.Close()
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cni: gc: port records", err.Error())
	}
	for _, name := range gone {
		_ = deleteVeth(name)
		p.log().WithField("port", name).Info("gc: removed stale port record")
	}
	ports, err := sw.OwnedPorts(ctx, conf.Bridge)
	if err != nil {
		return types.NewError(types.ErrInternal, "cni: gc: list ports", err.Error())
	}
	for name, ids := range ports {
		a := Attachment{ContainerID: ids[ExternalIDSandbox], IfName: ids[ExternalIDIfName]}
		if valid[a] {
			continue
		}
		if err := sw.DelPort(ctx, conf.Bridge, name); err != nil {
			return types.NewError(types.ErrInternal, "cni: gc: port "+name, err.Error())
		}
		_ = deleteVeth(name)
		p.log().WithFields(logrus.Fields{"port": name, "container": a.ContainerID}).Info("gc: removed stale port")
	}
	st, err = OpenStore(storeDir(conf))
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cni: gc: ipam", err.Error())
	}
	defer st.Close()
	n, err := st.GC(list)
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cni: gc: ipam", err.Error())
	}
	if n > 0 {
		p.log().WithField("released", n).Info("gc: released stale addresses")
	}
	return nil
}

// Status reports whether ADD can work: the address store is usable and the
// OVSDB server answers.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	st, err := OpenStore(storeDir(conf))
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "cni: status: ipam store unusable", err.Error())
	}
	st.Close()
	ctx, cancel := p.ctx()
	defer cancel()
	sw, err := dialSwitch(ctx, conf.OVSDB)
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "cni: status: ovsdb "+conf.OVSDB+" unreachable", err.Error())
	}
	sw.Close()
	return nil
}

func joinAddrs(ps []netip.Prefix) string {
	var as []netip.Addr
	for _, p := range ps {
		as = append(as, p.Addr())
	}
	return joinPlainAddrs(as)
}

func joinPlainAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
