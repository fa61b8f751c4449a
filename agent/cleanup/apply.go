package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/google/nftables"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/lib/ovsdb"
)

// interfaceTimeout bounds the wait for ovs-vswitchd to remove a deleted
// bridge's interfaces.
const interfaceTimeout = 30 * time.Second

// Apply carries out p's steps in order, one log line each, and stops at
// the first that fails. db is needed for DeleteBridge steps.
func Apply(ctx context.Context, p Plan, db *ovsdb.Client, log logrus.FieldLogger) error {
	for _, s := range p.Steps {
		if err := apply(ctx, s, db, log); err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, s Step, db *ovsdb.Client, log logrus.FieldLogger) error {
	switch s.Kind {
	case RemoveCNIConf, RemoveSocket, RemoveCNIBin, RemoveStateFile, RemoveNodeL3:
		if err := os.Remove(s.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithField("path", s.Path).Info(removed[s.Kind])
	case RemoveIPAM:
		if err := os.RemoveAll(s.Path); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithField("path", s.Path).Info(removed[s.Kind])
	case SetSysctl:
		path := netstack.UplinkSysctlPath(s.Link, s.Sysctl)
		if err := os.WriteFile(path, []byte(s.To), 0o644); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithFields(logrus.Fields{"interface": s.Link, "sysctl": s.Sysctl, "from": s.From, "to": s.To}).Info("restored the uplink's sysctl")
	case SetTxChecksum:
		if err := cni.SetTxChecksum("", s.Link, s.To == "on"); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithFields(logrus.Fields{"interface": s.Link, "from": s.From, "to": s.To}).Info("restored the uplink's TX checksum offload")
	case AddAddress:
		link, err := netlink.LinkByName(s.Link)
		if err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		if err := netlink.AddrReplace(link, uplinkAddr(s.Addr)); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithFields(logrus.Fields{"address": s.Addr.IPNet.String(), "interface": s.Link}).Info("gave the node's address back to the uplink")
	case AddRoute:
		link, err := netlink.LinkByName(s.Link)
		if err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		r := s.Route
		r.LinkIndex, r.ILinkIndex = link.Attrs().Index, 0
		if err := netlink.RouteReplace(&r); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithFields(logrus.Fields{"route": routeString(s.Route), "interface": s.Link}).Info("gave the route back to the uplink")
	case DeleteBridge:
		if err := deleteBridge(ctx, db, s.Bridge); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithFields(logrus.Fields{"bridge": s.Bridge.Name, "created-by": s.Bridge.ExternalIDs[createdByKey], "pod-ports": s.Bridge.PodPorts}).Info("deleted the bridge")
	case PromiscOff:
		on, err := promisc(s.Link)
		if err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		if !on {
			log.WithField("interface", s.Link).Debug("promiscuous mode already off")
			break
		}
		link, err := netlink.LinkByName(s.Link)
		if err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		if err := netlink.SetPromiscOff(link); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithField("interface", s.Link).Info("turned the uplink's promiscuous mode off (Open vSwitch left it on)")
	case DeleteVNetLink:
		if err := s.Links.Remove(s.Link, ""); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithField("interface", s.Link).Info("deleted the virtual-network interface")
	case DeleteVNetNetns:
		if err := s.Links.Remove("", filepath.Base(s.Path)); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithField("netns", s.Path).Info("deleted the virtual-network namespace")
	case DeleteNFTable:
		if err := deleteNFTable(s.Family, s.Table); err != nil {
			return fmt.Errorf("cleanup: %s: %w", s, err)
		}
		log.WithFields(logrus.Fields{"family": s.Family, "table": s.Table}).Info("deleted the nftables table")
	default:
		return fmt.Errorf("cleanup: unknown step %q", s.Kind)
	}
	return nil
}

// removed are the log messages of the Remove kinds.
var removed = map[Kind]string{
	RemoveCNIConf:   "removed the CNI configuration",
	RemoveSocket:    "removed the introspection socket",
	RemoveCNIBin:    "removed the CNI plugin",
	RemoveStateFile: "removed the record of the uplink's sysctls",
	RemoveNodeL3:    "removed the record of the node's addresses",
	RemoveIPAM:      "removed the IPAM store",
}

// uplinkAddr is a, as the uplink takes it back: IPv6 without duplicate
// address detection (the address was in use a moment ago), IPv4 with the
// broadcast address it had (none when it had none).
func uplinkAddr(a netlink.Addr) *netlink.Addr {
	na := &netlink.Addr{IPNet: a.IPNet, Broadcast: a.Broadcast}
	if a.IP.To4() == nil {
		na.Flags = unix.IFA_F_NODAD
		na.Broadcast = nil
	} else if na.Broadcast == nil {
		na.Broadcast = net.IPv4zero // netlink would make one up
	}
	return na
}

// deleteBridge removes b from OVSDB (its ports and interfaces go with it)
// and waits until ovs-vswitchd has removed its interfaces.
func deleteBridge(ctx context.Context, db *ovsdb.Client, b Bridge) error {
	if db == nil {
		return errors.New("no OVSDB connection")
	}
	if _, err := db.Transact(ctx, ovsdb.DatabaseName,
		ovsdb.Mutate(ovsdb.TableOpenvSwitch, nil, ovsdb.DeleteMutation("bridges", ovsdb.MakeUUIDSet(b.UUID)))); err != nil {
		return err
	}
	deadline := time.Now().Add(interfaceTimeout)
	for _, name := range b.Interfaces {
		for {
			_, err := netlink.LinkByName(name)
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("deleted from OVSDB, but interface %s is still there after %s (is ovs-vswitchd running?)", name, interfaceTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// deleteNFTable deletes the table name of family ("ip", "ip6").
func deleteNFTable(family, name string) error {
	t := &nftables.Table{Name: name}
	for f, name := range nftFamilies {
		if name == family {
			t.Family = f
		}
	}
	if t.Family == nftables.TableFamilyUnspecified {
		return fmt.Errorf("family %q is not ip or ip6", family)
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.DelTable(t)
	return c.Flush()
}
