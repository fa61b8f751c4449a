package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"nodeflow/host/cni"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/topology"
)

// bridgeDevice is the name of the Linux bridge inside a bridge member's namespace.
const bridgeDevice = "bridge"

// NetnsPrefix is the prefix of every network namespace of the testbed named name.
func NetnsPrefix(name string) string { return "nf-" + name + "-" }

// memberNetns is the network namespace of a topology member.
func memberNetns(name, member string) string { return NetnsPrefix(name) + member }

// podNetnsPrefix prefixes the pod namespaces of the testbed.
func podNetnsPrefix(name string) string { return NetnsPrefix(name) + "pod-" }

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func sysctl(ctx context.Context, netns string, kv ...string) error {
	args := append([]string{"netns", "exec", netns, "sysctl", "-q", "-w"}, kv...)
	return ipCmd(ctx, args...)
}

// buildNetwork creates the namespaces, bridges, links, addresses and routes
// of the topology. Node IPs go on eth0; `nodeflow agent` moves them to
// breth0 later.
func buildNetwork(ctx context.Context, top *topology.Topology) error {
	for _, m := range top.Members() {
		ns := memberNetns(top.Name, m.Name)
		if err := ipCmd(ctx, "netns", "add", ns); err != nil {
			return err
		}
		if err := ipCmd(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
		switch m.Kind {
		case topology.KindBridge:
			if err := ipCmd(ctx, "-n", ns, "link", "add", "name", bridgeDevice, "type", "bridge"); err != nil {
				return err
			}
			if err := ipCmd(ctx, "-n", ns, "link", "set", "dev", bridgeDevice, "up"); err != nil {
				return err
			}
			if err := addAddresses(ctx, ns, bridgeDevice, m.Addresses()); err != nil {
				return err
			}
			if err := sysctl(ctx, ns, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
				return err
			}
		case topology.KindK8sNode:
			if err := sysctl(ctx, ns, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
				return err
			}
		}
	}
	for i, l := range top.Topology.Links {
		eps, _ := l.Parse()
		a, b := eps[0], eps[1]
		nsA, nsB := memberNetns(top.Name, a.Node), memberNetns(top.Name, b.Node)
		if err := ipCmd(ctx, "link", "add", "name", a.Interface, "netns", nsA, "type", "veth", "peer", "name", b.Interface, "netns", nsB); err != nil {
			return fmt.Errorf("link %d: %w", i, err)
		}
		for _, ep := range eps {
			ns := memberNetns(top.Name, ep.Node)
			if top.Topology.Nodes[ep.Node].Kind == topology.KindBridge {
				if err := ipCmd(ctx, "-n", ns, "link", "set", "dev", ep.Interface, "master", bridgeDevice); err != nil {
					return err
				}
			}
			if err := ipCmd(ctx, "-n", ns, "link", "set", "dev", ep.Interface, "up"); err != nil {
				return err
			}
			// The OVS userspace datapath validates checksums in conntrack.
			if err := cni.SetTxChecksum(nsutil.Path(ns), ep.Interface, false); err != nil {
				return err
			}
		}
	}
	for _, m := range top.Members() {
		if m.Kind == topology.KindBridge || len(m.Addresses()) == 0 {
			continue
		}
		ns := memberNetns(top.Name, m.Name)
		if err := addAddresses(ctx, ns, "eth0", m.Addresses()); err != nil {
			return err
		}
		br := top.LinkedBridge(m, "eth0")
		if br == nil {
			continue
		}
		for _, gw := range br.Addresses() {
			own := false
			for _, a := range m.Addresses() {
				if a.Addr().Is4() == gw.Addr().Is4() && a.Masked() == gw.Masked() {
					own = true
				}
			}
			if !own {
				continue
			}
			fam := "-4"
			if gw.Addr().Is6() {
				fam = "-6"
			}
			if err := ipCmd(ctx, "-n", ns, fam, "route", "replace", "default", "via", gw.Addr().String(), "dev", "eth0"); err != nil {
				return err
			}
		}
	}
	return nil
}

// addAddresses adds addresses to dev; IPv6 ones without duplicate address
// detection, so they are usable at once.
func addAddresses(ctx context.Context, ns, dev string, addrs []netip.Prefix) error {
	for _, a := range addrs {
		args := []string{"-n", ns, "addr", "add", a.String(), "dev", dev}
		if a.Addr().Is6() {
			args = append(args, "nodad")
		}
		if err := ipCmd(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// netnsWithPrefix lists the network namespaces whose name starts with prefix.
func netnsWithPrefix(prefix string) []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// deleteNetnsWithPrefix deletes every network namespace whose name starts
// with prefix.
func deleteNetnsWithPrefix(prefix string) error {
	var errs []string
	for _, ns := range netnsWithPrefix(prefix) {
		if err := ipCmd(context.Background(), "netns", "delete", ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("testbed: %s", strings.Join(errs, "; "))
	}
	return nil
}
