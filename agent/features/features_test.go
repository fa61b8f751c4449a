package features

import (
	"flag"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"nodeflow/agent/config"
	"nodeflow/agent/features/vnetfeature"
	"nodeflow/host/nat"
)

// context returns the flags' values after args, as the agent's command
// parses them.
func context(t *testing.T, args ...string) *cli.Context {
	t.Helper()
	set := flag.NewFlagSet("agent", flag.ContinueOnError)
	for _, f := range CLIFlags() {
		if err := f.Apply(set); err != nil {
			t.Fatal(err)
		}
	}
	// The agent's own flag the hostPorts feature reads.
	set.String("health-addr", "127.0.0.1:9476", "")
	if err := set.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cli.NewContext(nil, set, nil)
}

func env(t *testing.T, args ...string) Env {
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	return Env{Flags: context(t, args...), ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}, DatapathType: "netdev", MgmtPortName: "mp0", Log: log}
}

func names(t *testing.T, e Env) []string {
	t.Helper()
	fs, _, err := Build(e)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.Name())
	}
	return out
}

// The list builds every feature by default, in the order the agent wires
// them; each flag turns its own off.
func TestBuild(t *testing.T) {
	all := names(t, env(t))
	if len(all) != 7 {
		t.Fatalf("default features %v, want 7", all)
	}
	for _, c := range []struct {
		flag string
		gone int // how many features the flag turns off
	}{
		{"--services=false", 2}, {"--unidle=false", 1}, {"--host-ports=false", 1}, {"--network-policy=false", 1},
		{"--egress-firewall=false", 1}, {"--virtual-networks=false", 1},
	} {
		got := names(t, env(t, c.flag))
		if len(got) != len(all)-c.gone {
			t.Errorf("%s: features %v", c.flag, got)
		}
		for _, n := range got {
			if !slices.Contains(all, n) {
				t.Errorf("%s: feature %s not in the default list %v", c.flag, n, all)
			}
		}
	}
}

// A bad feature flag is an error that names it, before anything is built.
func TestBuildBadFlags(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"--packet-in-meters=some", "--packet-in-meters"},
		{"--trusted-dns=10.244.0.10", "--trusted-dns"},
		{"--cluster-dns-service=kube-dns", "--cluster-dns-service"},
		{"--external-ip-allowed-cidr=10.0.0.0/33", "--external-ip-allowed-cidr"},
	} {
		_, _, err := Build(env(t, c.arg))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.arg, err, c.want)
		}
	}
}

// Every flag has one name across the list, and cleanup learns every
// nftables table a feature makes.
func TestListFlagsAndTables(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range CLIFlags() {
		for _, n := range f.Names() {
			if seen[n] {
				t.Errorf("flag --%s given twice", n)
			}
			seen[n] = true
		}
	}
	got := NFTables()
	slices.Sort(got)
	if want := []string{nat.DefaultTable, nat.HostPortsTable}; !slices.Equal(got, want) {
		t.Errorf("nftables tables %v, want %v", got, want)
	}
}

func TestReservedPorts(t *testing.T) {
	got := ReservedPorts("127.0.0.1:9476", "", "0.0.0.0:10256", "bad", "[::1]:9476")
	if want := []uint16{10250, 9476, 10256}; !slices.Equal(got, want) {
		t.Errorf("reserved ports %v, want %v", got, want)
	}
}

// Each entry's fields of the configuration file set flags of its own, and
// cleanup learns where the virtual networks keep their namespaces.
func TestListFileFieldsAndLinks(t *testing.T) {
	for _, s := range All {
		own := map[string]bool{}
		for _, f := range s.Flags {
			own[f.Names()[0]] = true
		}
		var walk func(fs []config.Field)
		walk = func(fs []config.Field) {
			for _, f := range fs {
				if f.Type == config.Object {
					walk(f.Fields)
				} else if !own[f.Flag] {
					t.Errorf("%s: field %s sets --%s, not one of its flags", s.Name, f.Name, f.Flag)
				}
			}
		}
		walk(s.File)
	}
	if l := Links(); l == nil || l.Dir() != vnetfeature.DefaultNetnsDir {
		t.Errorf("cleanup's links %v, want the virtual networks' in %s", l, vnetfeature.DefaultNetnsDir)
	}
}
