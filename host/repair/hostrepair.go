// Package repair keeps the account of the agent's repairs of the
// node's own configuration: the node's addresses and routes on the gateway
// bridge, the masquerade addresses, routes and neighbours of the host side,
// the management port. Whoever repairs something reports each check to a
// Tracker; the Tracker counts what was put back and what could not be,
// logs a failure once per episode (and once when it ends), and says which
// repairs keep failing, for the agent's /readyz and a gauge.
//
// A check that fails is an episode's start. It counts as failing once it
// has still failed Grace after its first failure: a repair that waits a
// few milliseconds for another one (a route whose source address is being
// put back by somebody else) is not worth a warning.
package repair

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// DefaultGrace is how long a repair may fail before it counts as failing.
const DefaultGrace = 2 * time.Second

// Clock is the Tracker's time source.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Options configure a Tracker.
type Options struct {
	// Log receives one warning per failure episode and one line when it
	// ends. nil: logrus's standard logger.
	Log logrus.FieldLogger
	// Clock defaults to the wall clock.
	Clock Clock
	// Grace defaults to DefaultGrace.
	Grace time.Duration
	// What lists the repairs known from the start, so that their series
	// exist at zero.
	What []string
}

// Tracker is the account of repairs. It is safe for concurrent use.
type Tracker struct {
	log   logrus.FieldLogger
	clock Clock
	grace time.Duration

	total      *prometheus.CounterVec
	failingDsc *prometheus.Desc

	mu       sync.Mutex
	known    map[string]bool
	episodes map[string]*episode
}

// episode is one run of failed checks of one repair.
type episode struct {
	since    time.Time
	attempts int
	err      error
	reported bool
}

// Failure is a repair that keeps failing.
type Failure struct {
	// What names the repair ("node-address").
	What string
	// Since is its first failure in this episode; For how long ago that
	// was when Failing was called.
	Since time.Time
	For   time.Duration
	// Attempts counts the failed checks of the episode.
	Attempts int
	// Err is the last check's error.
	Err error
}

// String reads "node-address: failing for 12s (5 attempts): <error>", on
// one line (joined errors are separated by "; ").
func (f Failure) String() string {
	msg := "<nil>"
	if f.Err != nil {
		msg = strings.ReplaceAll(f.Err.Error(), "\n", "; ")
	}
	return fmt.Sprintf("%s: failing for %s (%d attempts): %s", f.What, f.For.Round(time.Second), f.Attempts, msg)
}

// New returns a Tracker.
func New(o Options) *Tracker {
	if o.Log == nil {
		o.Log = logrus.StandardLogger()
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	t := &Tracker{
		log: o.Log, clock: o.Clock, grace: o.Grace,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_host_repairs_total",
			Help: "The node's own configuration put back after somebody removed it (result=repaired: things put back), and checks that could not put it back (result=failed), by what.",
		}, []string{"what", "result"}),
		failingDsc: prometheus.NewDesc("nodeflow_host_repairs_failing",
			"1 while a repair of the node's own configuration keeps failing (for longer than its grace), by what.", []string{"what"}, nil),
		known:    map[string]bool{},
		episodes: map[string]*episode{},
	}
	for _, w := range o.What {
		t.declare(w)
	}
	return t
}

// declare makes what's series exist; t.mu is held or t is not shared yet.
func (t *Tracker) declare(what string) {
	if t.known[what] {
		return
	}
	t.known[what] = true
	t.total.WithLabelValues(what, "repaired")
	t.total.WithLabelValues(what, "failed")
}

// Describe implements prometheus.Collector.
func (t *Tracker) Describe(ch chan<- *prometheus.Desc) {
	t.total.Describe(ch)
	ch <- t.failingDsc
}

// Collect implements prometheus.Collector: the gauge is computed at the
// scrape, so it agrees with Failing.
func (t *Tracker) Collect(ch chan<- prometheus.Metric) {
	t.total.Collect(ch)
	failing := map[string]bool{}
	for _, f := range t.Failing() {
		failing[f.What] = true
	}
	t.mu.Lock()
	whats := make([]string, 0, len(t.known))
	for w := range t.known {
		whats = append(whats, w)
	}
	t.mu.Unlock()
	slices.Sort(whats)
	for _, w := range whats {
		v := 0.0
		if failing[w] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(t.failingDsc, prometheus.GaugeValue, v, w)
	}
}

// Observe records one check of what: repaired is how many things it put
// back, err why it could not put back the rest (nil: everything is in
// place now).
func (t *Tracker) Observe(what string, repaired int, err error) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.declare(what)
	if repaired > 0 {
		t.total.WithLabelValues(what, "repaired").Add(float64(repaired))
	}
	ep := t.episodes[what]
	if err == nil {
		if ep == nil {
			return
		}
		delete(t.episodes, what)
		fields := logrus.Fields{"repair": what, "failed_for": now.Sub(ep.since).Round(time.Millisecond).String(), "attempts": ep.attempts}
		if ep.reported {
			t.log.WithFields(fields).Info("host repair works again")
		} else {
			t.log.WithFields(fields).Debug("host repair works again after a short failure")
		}
		return
	}
	t.total.WithLabelValues(what, "failed").Inc()
	if ep == nil {
		ep = &episode{since: now}
		t.episodes[what] = ep
	}
	ep.attempts++
	ep.err = err
	if !ep.reported && now.Sub(ep.since) >= t.grace {
		ep.reported = true
		t.log.WithError(err).WithFields(logrus.Fields{"repair": what, "since": ep.since.Format(time.RFC3339Nano), "attempts": ep.attempts}).
			Warn("cannot repair the node's own configuration; retrying (logged once until it works again)")
	}
}

// Failing returns the repairs that have been failing for at least the
// grace, by what.
func (t *Tracker) Failing() []Failure {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Failure
	for w, ep := range t.episodes {
		if now.Sub(ep.since) >= t.grace {
			out = append(out, Failure{What: w, Since: ep.since, For: now.Sub(ep.since), Attempts: ep.attempts, Err: ep.err})
		}
	}
	slices.SortFunc(out, func(a, b Failure) int { return strings.Compare(a.What, b.What) })
	return out
}

// Summary is Failing as one line for /readyz: "" when nothing fails.
func (t *Tracker) Summary() string {
	fs := t.Failing()
	if len(fs) == 0 {
		return ""
	}
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.String()
	}
	return "cannot keep the node's own configuration: " + strings.Join(parts, "; ")
}

// The pause before the next check of a repair that failed: RetryFirst,
// doubling up to RetryMost. Netlink events usually come first (the
// repair waited for something that now exists); the pause is for what
// sends none, such as a sysctl turned back.
const (
	RetryFirst = 100 * time.Millisecond
	RetryMost  = 5 * time.Second
)

// Backoff spaces the retries of one failing repair. The zero value is
// ready.
type Backoff struct{ next time.Duration }

// Failed returns the pause before the next retry and doubles the one
// after it.
func (b *Backoff) Failed() time.Duration {
	if b.next == 0 {
		b.next = RetryFirst
	}
	d := b.next
	b.next = min(2*b.next, RetryMost)
	return d
}

// Reset starts the next failure's retries at RetryFirst again.
func (b *Backoff) Reset() { b.next = 0 }
