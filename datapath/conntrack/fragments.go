package conntrack

import (
	"strconv"
	"strings"
)

// fragmentFixes are the first releases of each Open vSwitch branch whose
// userspace datapath gives an IP datagram's later fragments the ports of
// the connection conntrack found for the whole datagram (ct_tp_src and
// ct_tp_dst; upstream commit "miniflow_extract: Push ct_tp_{src, dst} for
// later frags", FDP-124). Branches after the last one listed have it.
var fragmentFixes = [][3]int{{2, 17, 12}, {3, 0, 8}, {3, 1, 7}, {3, 2, 5}, {3, 3, 4}, {3, 4, 2}, {3, 5, 0}}

// FragmentPortsFixed reports whether ovs-vswitchd version ovsVersion (as
// the Open_vSwitch table's ovs_version column holds it, "3.1.0") matches
// later fragments on their connection's ports in the userspace datapath.
// The service flows match and hash a new connection's ct_nw_dst and
// ct_tp_dst so that every fragment of a large UDP datagram takes one
// endpoint; without the fix only the first fragment carries the port, the
// others miss the service, and the datagram is lost. The kernel datapath
// is not affected. A version it cannot parse counts as fixed.
func FragmentPortsFixed(ovsVersion string) bool {
	v, ok := ParseVersion(ovsVersion)
	if !ok {
		return true
	}
	return fixedIn(v, fragmentFixes)
}

// expiredFragmentFixes are the first releases of each Open vSwitch branch
// whose userspace datapath drops the fragments it held for reassembly and
// gave up on (upstream commit "ipf: Don't send expired frags", FDP-1052).
// Before it, they were sent on 15 s later with the actions of whatever
// packet conntrack handled next, out of any port. Branches after the last
// one listed have it; 3.1 never got it.
var expiredFragmentFixes = [][3]int{{3, 2, 6}, {3, 3, 5}, {3, 4, 3}, {3, 5, 1}}

// ExpiredFragmentsDropped reports whether ovs-vswitchd version ovsVersion
// drops, in the userspace datapath, the fragments of a datagram that never
// came whole. The fragments a policy denies wait at a ct action for a
// first fragment that does not come (datapath/networkpolicyflows, datapath/egressfirewallflows); so do
// the fragments of an incomplete datagram, which anyone can send. An
// older userspace datapath releases them after 15 s into an unrelated
// packet's actions, which may output them anywhere. A version it cannot
// parse counts as fixed.
func ExpiredFragmentsDropped(ovsVersion string) bool {
	v, ok := ParseVersion(ovsVersion)
	if !ok {
		return true
	}
	return fixedIn(v, expiredFragmentFixes)
}

// fixedIn reports whether v has a fix first released in fixes (one
// release per branch, oldest branch first; later branches have it).
func fixedIn(v [3]int, fixes [][3]int) bool {
	if CompareVersion(v, fixes[len(fixes)-1]) >= 0 {
		return true
	}
	for _, f := range fixes {
		if v[0] == f[0] && v[1] == f[1] {
			return v[2] >= f[2]
		}
	}
	return false
}

// ParseVersion parses "MAJOR.MINOR.PATCH", ignoring anything after each
// number ("3.1.0-2+deb12u1", "3.3.90"); false when s is not one.
func ParseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(strings.TrimSpace(s), ".", 3)
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// CompareVersion compares two parsed versions as cmp.Compare does.
func CompareVersion(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			return a[i] - b[i]
		}
	}
	return 0
}
