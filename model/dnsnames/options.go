package dnsnames

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/miekg/dns"
	"github.com/sirupsen/logrus"
)

// Defaults of Options. See the package documentation for how they
// compare with openshift-sdn and ovn-kubernetes.
const (
	DefaultResolvConf = "/etc/resolv.conf"
	DefaultTimeout    = 2 * time.Second
	DefaultMinTTL     = 5 * time.Second
	DefaultMaxTTL     = 30 * time.Minute
	DefaultMaxAddrTTL = 24 * time.Hour
	DefaultTTL        = 30 * time.Second
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 5 * time.Minute
	DefaultWorkers    = 4
	DefaultMaxAddrs   = 1000
)

// Options configures a Cache. Zero fields take the defaults above.
type Options struct {
	// Servers are the DNS servers to ask, "host:port", in order. When
	// empty, the nameservers of ResolvConf are used; its search domains
	// and ndots are not, since every name is fully qualified.
	Servers []string
	// ResolvConf is the resolver configuration file read when Servers is
	// empty.
	ResolvConf string
	// Timeout bounds one query to one server over one transport.
	Timeout time.Duration
	// MinTTL is the floor of every TTL: the shortest time between two
	// lookups of a name, and the shortest life of an address. A TTL of 0
	// becomes MinTTL.
	MinTTL time.Duration
	// MaxTTL is the longest time between two lookups of an exact name,
	// however long its TTL.
	MaxTTL time.Duration
	// MaxAddrTTL is the longest an address is kept after it was last
	// seen in an answer.
	MaxAddrTTL time.Duration
	// DefaultTTL is used when an answer has neither records nor an SOA
	// record to take a TTL from.
	DefaultTTL time.Duration
	// MinBackoff and MaxBackoff bound the wait before retrying a name
	// whose lookup failed: MinBackoff, doubling with each failure in a
	// row, at most MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Workers is the most lookups that run at once.
	Workers int
	// MaxAddrs is the most addresses one name keeps. When a new address
	// comes to a full name, the one that expires soonest makes room.
	MaxAddrs int
	// Exclude are prefixes whose addresses are never added (the cluster's
	// pod and service networks).
	Exclude []netip.Prefix
	// Clock defaults to RealClock.
	Clock Clock
	// Log defaults to the standard logrus logger.
	Log *logrus.Entry
}

// withDefaults fills the zero fields and reads the resolver
// configuration if needed.
func (o Options) withDefaults() (Options, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Timeout, DefaultTimeout)
	def(&o.MinTTL, DefaultMinTTL)
	def(&o.MaxTTL, DefaultMaxTTL)
	def(&o.MaxAddrTTL, DefaultMaxAddrTTL)
	def(&o.DefaultTTL, DefaultTTL)
	def(&o.MinBackoff, DefaultMinBackoff)
	def(&o.MaxBackoff, DefaultMaxBackoff)
	switch {
	case o.MaxTTL < o.MinTTL:
		return o, fmt.Errorf("dnsnames: options: MaxTTL %v is less than MinTTL %v", o.MaxTTL, o.MinTTL)
	case o.MaxAddrTTL < o.MinTTL:
		return o, fmt.Errorf("dnsnames: options: MaxAddrTTL %v is less than MinTTL %v", o.MaxAddrTTL, o.MinTTL)
	case o.MaxBackoff < o.MinBackoff:
		return o, fmt.Errorf("dnsnames: options: MaxBackoff %v is less than MinBackoff %v", o.MaxBackoff, o.MinBackoff)
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.MaxAddrs <= 0 {
		o.MaxAddrs = DefaultMaxAddrs
	}
	if o.Clock == nil {
		o.Clock = RealClock{}
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	o.Log = o.Log.WithField("component", "dnsnames")
	if len(o.Servers) == 0 {
		if o.ResolvConf == "" {
			o.ResolvConf = DefaultResolvConf
		}
		conf, err := dns.ClientConfigFromFile(o.ResolvConf)
		if err != nil {
			return o, fmt.Errorf("dnsnames: options: resolver configuration: %w", err)
		}
		if len(conf.Servers) == 0 {
			return o, fmt.Errorf("dnsnames: options: resolver configuration %s: no nameserver", o.ResolvConf)
		}
		for _, s := range conf.Servers {
			o.Servers = append(o.Servers, net.JoinHostPort(s, conf.Port))
		}
	}
	for i, s := range o.Servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return o, fmt.Errorf("dnsnames: options: server %d %q: %w", i+1, s, err)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return o, fmt.Errorf("dnsnames: options: server %d %q: bad port %q", i+1, s, port)
		}
		if host == "" {
			return o, fmt.Errorf("dnsnames: options: server %d %q: no host", i+1, s)
		}
	}
	o.Exclude = slices.Clone(o.Exclude)
	for i, p := range o.Exclude {
		if !p.IsValid() {
			return o, fmt.Errorf("dnsnames: options: exclude prefix %d: invalid", i+1)
		}
		o.Exclude[i] = p.Masked()
	}
	return o, nil
}
