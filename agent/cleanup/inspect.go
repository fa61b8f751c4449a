package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/lib/ovsdb"
)

// nftFamilies are the families hostnat makes its table in.
var nftFamilies = map[nftables.TableFamily]string{nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6"}

// Inspect reads what is on the node. When an OVSDB server answers it
// returns a client connected to it, for Apply; the caller closes it.
func Inspect(ctx context.Context, o Options, log logrus.FieldLogger) (Facts, *ovsdb.Client, error) {
	var f Facts
	db, err := inspectOVSDB(ctx, o, log, &f)
	if err != nil {
		return f, nil, err
	}
	fail := func(err error) (Facts, *ovsdb.Client, error) {
		if db != nil {
			db.Close()
		}
		return f, nil, err
	}
	if f.Gateway, err = readL3(o.GatewayBridge); err != nil {
		return fail(err)
	}
	if f.Uplink, err = readL3(o.Uplink); err != nil {
		return fail(err)
	}
	if f.Uplink != nil {
		if f.UplinkPromisc, err = promisc(o.Uplink); err != nil {
			return fail(err)
		}
	}
	if err := inspectSysctls(o, &f); err != nil {
		return fail(err)
	}
	if path := netstack.NodeL3Path(o.CNIDataDir); path != "" {
		if _, err := os.Stat(path); err == nil {
			f.NodeL3File = path
		}
	}
	if f.NFTables, err = inspectNFTables(o.NFTables); err != nil {
		return fail(err)
	}
	if o.CNIConfDir != "" {
		for _, name := range []string{CNIConfFile, CNIConfFile + ".tmp"} {
			c, ok, err := inspectConf(filepath.Join(o.CNIConfDir, name))
			if err != nil {
				return fail(err)
			}
			if ok {
				f.CNIConf = append(f.CNIConf, c)
			}
		}
	}
	if o.Socket != "" {
		if fi, err := os.Lstat(o.Socket); err == nil {
			f.Socket, f.NotSocket = o.Socket, fi.Mode()&fs.ModeSocket == 0
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("cleanup: introspection socket %s: %w", o.Socket, err))
		}
	}
	if o.CNIDataDir != "" {
		if f.IPAM, err = inspectIPAM(filepath.Join(o.CNIDataDir, netstack.CNINetworkName)); err != nil {
			return fail(err)
		}
	}
	if o.CNIBin != "" {
		if fi, err := os.Lstat(o.CNIBin); err == nil {
			f.CNIBin = fi.Mode().IsRegular()
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("cleanup: CNI plugin %s: %w", o.CNIBin, err))
		}
	}
	if err := inspectVNet(o, &f); err != nil {
		return fail(err)
	}
	return f, db, nil
}

// inspectVNet finds the virtual-network attachments' interfaces and
// namespaces, when o has them looked at.
func inspectVNet(o Options, f *Facts) error {
	l := o.VNet
	if l == nil {
		return nil
	}
	var err error
	if f.VNetInterfaces, err = l.HostEnds(); err != nil {
		return fmt.Errorf("cleanup: virtual-network interfaces: %w", err)
	}
	if f.VNetNamespaces, err = l.Namespaces(f.VNetInterfaces); err != nil {
		return fmt.Errorf("cleanup: virtual-network namespaces: %w", err)
	}
	return nil
}

// inspectOVSDB reads the bridges, when an OVSDB server is there.
func inspectOVSDB(ctx context.Context, o Options, log logrus.FieldLogger, f *Facts) (*ovsdb.Client, error) {
	sock := o.DBSocket()
	if _, err := os.Stat(sock); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	db, err := ovsdb.Dial(dctx, "unix:"+sock, ovsdb.Options{Logger: log, EchoInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("cleanup: ovsdb %s: %w", sock, err)
	}
	f.OVSDB = true
	if err := holdAgentLock(ctx, o, log, db, sock); err != nil {
		db.Close()
		return nil, err
	}
	res, err := db.Transact(ctx, ovsdb.DatabaseName,
		ovsdb.Select(ovsdb.TableBridge, nil, "_uuid", "name", "ports", "external_ids"))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cleanup: ovsdb %s: list bridges: %w", sock, err)
	}
	for _, row := range res[0].Rows {
		br, err := ovsdb.BridgeFromRow("", row)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("cleanup: ovsdb %s: %w", sock, err)
		}
		b := Bridge{Name: br.Name, UUID: br.UUID, ExternalIDs: br.ExternalIDs}
		ports, err := db.ListPorts(ctx, br.Name)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("cleanup: ports of bridge %s: %w", br.Name, err)
		}
		for _, p := range ports {
			for _, i := range p.Interfaces {
				if i.Type == "internal" {
					b.Interfaces = append(b.Interfaces, i.Name)
				}
			}
			if p.InterfaceExternalIDs[cni.ExternalIDOwner] == cni.OwnerCNI {
				b.PodPorts++
			}
		}
		f.Bridges = append(f.Bridges, b)
	}
	slices.SortFunc(f.Bridges, func(a, b Bridge) int { return strings.Compare(a.Name, b.Name) })
	return db, nil
}

// holdAgentLock asks for o.AgentLock, held until the caller closes db, so
// that an agent that starts meanwhile waits for the clean-up to end. A lock
// another client holds is an agent at work: an error wrapping
// ErrAgentRunning, unless o.Force.
func holdAgentLock(ctx context.Context, o Options, log logrus.FieldLogger, db *ovsdb.Client, sock string) error {
	if o.AgentLock == "" {
		return nil
	}
	l, err := db.Lock(ctx, o.AgentLock)
	if err != nil {
		return fmt.Errorf("cleanup: ovsdb %s: %w", sock, err)
	}
	select {
	case <-l.Held():
	default:
		if !o.Force {
			return fmt.Errorf("cleanup: %w: it holds OVSDB lock %s on %s; stop it first (delete the DaemonSet), or pass --force", ErrAgentRunning, o.AgentLock, sock)
		}
		log.WithField("lock", o.AgentLock).Warn("an agent holds this node's Open vSwitch; going on (--force)")
	}
	return nil
}

// readL3 reads dev's addresses and routes; nil when dev does not exist.
func readL3(dev string) (*netstack.L3Config, error) {
	if dev == "" {
		return nil, nil
	}
	if _, err := netlink.LinkByName(dev); err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, nil
		}
		return nil, fmt.Errorf("cleanup: interface %s: %w", dev, err)
	}
	c, err := netstack.ReadL3Config(dev)
	if err != nil {
		return nil, fmt.Errorf("cleanup: %w", err)
	}
	return &c, nil
}

// promisc reports whether dev's promiscuous mode is on (as set with its
// flags, not as the kernel's users of it count).
func promisc(dev string) (bool, error) {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return false, fmt.Errorf("cleanup: interface %s: %w", dev, err)
	}
	return l.Attrs().RawFlags&unix.IFF_PROMISC != 0, nil
}

// inspectSysctls reads the agent's record of the uplink's sysctls and TX
// checksum offload, and their current values.
func inspectSysctls(o Options, f *Facts) error {
	f.SysctlLink = o.Uplink
	if path := netstack.UplinkStatePath(o.CNIDataDir); path != "" {
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("cleanup: uplink record %s: %w", path, err)
		default:
			var st netstack.UplinkState
			if err := json.Unmarshal(b, &st); err != nil {
				return fmt.Errorf("cleanup: uplink record %s: %w (remove it to restore the kernel's defaults)", path, err)
			}
			f.StateFile, f.State = path, &st
			if st.Uplink != "" {
				f.SysctlLink = st.Uplink
			}
		}
	}
	if f.SysctlLink == "" {
		return nil
	}
	f.Sysctls = map[string]string{}
	for name := range netstack.QuietSysctls {
		b, err := os.ReadFile(netstack.UplinkSysctlPath(f.SysctlLink, name))
		if err != nil {
			continue
		}
		f.Sysctls[name] = strings.TrimSpace(string(b))
	}
	if on, err := cni.TxChecksum("", f.SysctlLink); err == nil {
		f.TxChecksum = &on
	}
	return nil
}

// inspectNFTables lists the tables of names present.
func inspectNFTables(names []string) ([]NFTable, error) {
	if len(names) == 0 {
		return nil, nil
	}
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("cleanup: nftables: %w", err)
	}
	ts, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("cleanup: nftables: list tables: %w", err)
	}
	var out []NFTable
	for _, t := range ts {
		if fam, ok := nftFamilies[t.Family]; ok && slices.Contains(names, t.Name) {
			out = append(out, NFTable{Family: fam, Name: t.Name})
		}
	}
	slices.SortFunc(out, func(x, y NFTable) int { return strings.Compare(x.Family+" "+x.Name, y.Family+" "+y.Name) })
	return out, nil
}

// inspectConf looks at a CNI configuration file; it reports false when the
// file does not exist.
func inspectConf(path string) (ConfFile, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ConfFile{}, false, nil
	}
	if err != nil {
		return ConfFile{}, false, fmt.Errorf("cleanup: CNI configuration %s: %w", path, err)
	}
	c := ConfFile{Path: path}
	c.Ours, c.Reason = nodeflowConf(b)
	return c, true, nil
}

// nodeflowConf reports whether b is a CNI configuration the agent wrote:
// nodeflow's network and plugin; otherwise it says why not.
func nodeflowConf(b []byte) (bool, string) {
	var conf struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return false, "not JSON: " + err.Error()
	}
	if conf.Name != netstack.CNINetworkName || conf.Type != cni.PluginType {
		return false, fmt.Sprintf("network %q, type %q", conf.Name, conf.Type)
	}
	return true, ""
}

// inspectIPAM counts the addresses pods hold in the IPAM store dir; nil
// when it does not exist.
func inspectIPAM(dir string) (*IPAMStore, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("cleanup: IPAM store %s: %w", dir, err)
	}
	s, err := cni.OpenStore(dir)
	if err != nil {
		return nil, fmt.Errorf("cleanup: %w", err)
	}
	defer s.Close()
	allocs, err := s.Allocations()
	if err != nil {
		return nil, fmt.Errorf("cleanup: %w", err)
	}
	st := &IPAMStore{Dir: dir}
	for _, a := range allocs {
		if a.ContainerID != agentReservation {
			st.PodAddrs++
		}
	}
	return st, nil
}
