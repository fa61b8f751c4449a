#!/bin/sh
# Checks, in seconds, what the testbed needs from this machine, so that
# `make demo` and `make e2e` stop at once with a plain message instead of
# after building the control plane for minutes. It runs after `make deps`;
# each message says what to do.
set -u
fail=0
problem() { printf 'testbed prerequisites: %s\n' "$*" >&2; fail=1; }

[ "$(id -u)" = 0 ] || problem "must run as root (network namespaces, OVS, veths): run it as root"

for c in ip ovsdb-server ovs-vswitchd ovsdb-tool ovs-vsctl ovs-ofctl ethtool curl nft; do
	command -v "$c" >/dev/null 2>&1 || problem "no '$c' command: run \`make deps\` (Debian packages openvswitch-switch, iproute2, ethtool, curl, nftables)"
done
# The node agents run in their nodes' network namespaces through nsenter.
command -v nsenter >/dev/null 2>&1 || problem "no 'nsenter' command: install the Debian package util-linux"
[ -f /usr/share/openvswitch/vswitch.ovsschema ] || problem "no Open vSwitch schema (/usr/share/openvswitch/vswitch.ovsschema): run \`make deps\`"
[ -c /dev/net/tun ] || problem "no /dev/net/tun: the userspace datapath needs TAP devices (load the tun module, or run a container with /dev/net/tun)"

GO=${GO:-go}
if ! command -v "$GO" >/dev/null 2>&1; then
	problem "no Go toolchain ('$GO'): install Go $(awk '$1=="go"{print $2}' "$(dirname "$0")/../go.mod") or newer"
fi

if [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1; then
	ns="nfprereq$$"
	if ip netns add "$ns" 2>/dev/null; then
		ip -n "$ns" link add nfpq0 type veth peer name nfpq1 2>/dev/null || problem "cannot create a veth pair in a network namespace (veth module?)"
		ip netns del "$ns"
	else
		problem "cannot create a network namespace (\`ip netns add\` failed: a container without CAP_SYS_ADMIN?)"
	fi
fi

[ "$fail" = 0 ] || exit 1
echo "testbed prerequisites: all present"
