package egressfirewall

import (
	"fmt"
	"net/netip"
	"strings"
)

// MaxDNSNameLength is the longest name, without the trailing dot, that
// DNS can carry (RFC 1035: 255 bytes on the wire).
const MaxDNSNameLength = 253

// ParseDNSName checks a dnsName and returns its canonical form: lower
// case, without a trailing dot. A name is one or more labels of 1-63
// letters, digits and hyphens that neither start nor end with a hyphen
// (RFC 1123), at most 253 characters. "*." followed by a name is a
// wildcard for the names exactly one label below it, as ovn-kubernetes
// defines it: "*.example.com" matches "www.example.com" but neither
// "example.com" nor "a.b.example.com". An IP address is not a name (use a
// cidrSelector).
func ParseDNSName(s string) (string, error) {
	name := strings.ToLower(s)
	name = strings.TrimSuffix(name, ".")
	base, wildcard := strings.CutPrefix(name, "*.")
	if base == "" {
		return "", fmt.Errorf("%q: empty name", s)
	}
	if len(name) > MaxDNSNameLength {
		return "", fmt.Errorf("%q: %d characters, more than %d", s, len(name), MaxDNSNameLength)
	}
	if _, err := netip.ParseAddr(base); err == nil {
		return "", fmt.Errorf("%q: an IP address, not a name (use cidrSelector)", s)
	}
	for i, label := range strings.Split(base, ".") {
		if err := checkLabel(label); err != nil {
			if strings.Contains(label, "*") {
				return "", fmt.Errorf("%q: label %d %q: a wildcard is only \"*.\" at the start, for one label", s, i+1, label)
			}
			return "", fmt.Errorf("%q: label %d %q: %v", s, i+1, label, err)
		}
	}
	if wildcard {
		return "*." + base, nil
	}
	return base, nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return fmt.Errorf("empty label")
	case len(l) > 63:
		return fmt.Errorf("%d characters, more than 63", len(l))
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("starts or ends with a hyphen")
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("character %q: want letters, digits and hyphens", c)
		}
	}
	return nil
}

// MatchDNSName reports whether the name qname (as a DNS answer carries
// it: any case, with or without the trailing dot) is matched by pattern,
// a canonical dnsName from ParseDNSName: equal to it, or, for "*.base",
// exactly one label below base.
func MatchDNSName(pattern, qname string) bool {
	q := strings.ToLower(strings.TrimSuffix(qname, "."))
	base, wildcard := strings.CutPrefix(pattern, "*.")
	if !wildcard {
		return q == pattern
	}
	label, ok := strings.CutSuffix(q, "."+base)
	return ok && label != "" && !strings.Contains(label, ".")
}
