package repair

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestEpisodes follows one repair along a timeline: it puts things back,
// fails briefly (no warning), fails for good (one warning, however many
// retries, and it shows in Failing, the gauge and the counter), and works
// again (one line).
func TestEpisodes(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := New(Options{Log: log, Clock: clock, Grace: 2 * time.Second, What: []string{"node-address", "node-route"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr)
	warnings := func() int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel {
				n++
			}
		}
		return n
	}
	gauge := func(what string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "nodeflow_host_repairs_failing" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == what {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no gauge for %s", what)
		return 0
	}
	counter := func(what, result string) float64 {
		return testutil.ToFloat64(tr.total.WithLabelValues(what, result))
	}

	// t=0: every series exists at zero.
	if gauge("node-route") != 0 || counter("node-route", "failed") != 0 {
		t.Fatal("declared series not at zero")
	}
	// t=0: somebody deleted two addresses; both put back.
	tr.Observe("node-address", 2, nil)
	if counter("node-address", "repaired") != 2 || len(tr.Failing()) != 0 {
		t.Fatalf("after a repair: repaired %v, failing %v", counter("node-address", "repaired"), tr.Failing())
	}
	// t=0..300ms: a route fails while its source address comes back, then
	// works: counted, not warned about, never failing.
	boom := errors.New("invalid source address")
	tr.Observe("node-route", 0, boom)
	clock.Step(300 * time.Millisecond)
	tr.Observe("node-route", 1, nil)
	if warnings() != 0 || counter("node-route", "failed") != 1 || gauge("node-route") != 0 {
		t.Fatalf("short failure: %d warnings, %v failed", warnings(), counter("node-route", "failed"))
	}
	// t=1s: an address cannot be put back (IPv6 disabled on the bridge).
	clock.Step(700 * time.Millisecond)
	denied := errors.Join(errors.New("permission denied"), errors.New("no route to host"))
	tr.Observe("node-address", 0, denied)
	if len(tr.Failing()) != 0 || warnings() != 0 {
		t.Fatal("failing before the grace")
	}
	// t=1s..31s: retried every 5 s; failing from t=3s, warned about once.
	for range 6 {
		clock.Step(5 * time.Second)
		tr.Observe("node-address", 0, denied)
	}
	fs := tr.Failing()
	if len(fs) != 1 || fs[0].What != "node-address" || fs[0].Attempts != 7 || fs[0].For != 30*time.Second || !errors.Is(fs[0].Err, denied) {
		t.Fatalf("failing = %+v", fs)
	}
	if s := tr.Summary(); !strings.Contains(s, "node-address: failing for 30s (7 attempts): permission denied; no route to host") {
		t.Errorf("summary = %q", s)
	}
	if warnings() != 1 || gauge("node-address") != 1 || counter("node-address", "failed") != 7 {
		t.Fatalf("%d warnings, gauge %v, failed %v; want 1, 1, 7", warnings(), gauge("node-address"), counter("node-address", "failed"))
	}
	// t=32s: IPv6 is back: one line, nothing failing.
	clock.Step(time.Second)
	hook.Reset()
	tr.Observe("node-address", 1, nil)
	if len(hook.AllEntries()) != 1 || hook.LastEntry().Level != logrus.InfoLevel || hook.LastEntry().Data["attempts"] != 7 {
		t.Fatalf("recovery logged as %v", hook.AllEntries())
	}
	if len(tr.Failing()) != 0 || tr.Summary() != "" || gauge("node-address") != 0 || counter("node-address", "repaired") != 3 {
		t.Fatal("still failing after the recovery")
	}
	// t=40s: a new episode is warned about again.
	hook.Reset()
	clock.Step(8 * time.Second)
	tr.Observe("node-address", 0, denied)
	clock.Step(2 * time.Second)
	tr.Observe("node-address", 0, denied)
	if warnings() != 1 {
		t.Fatalf("second episode: %d warnings, want 1", warnings())
	}
}

// TestFailingWithoutRetry: a failure that is not checked again still shows
// as failing once the grace has passed.
func TestFailingWithoutRetry(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(0, 0))
	log, _ := logtest.NewNullLogger()
	tr := New(Options{Log: log, Clock: clock})
	tr.Observe("masquerade-route", 0, errors.New("no such device"))
	clock.Step(DefaultGrace - time.Millisecond)
	if len(tr.Failing()) != 0 {
		t.Fatal("failing before the grace")
	}
	clock.Step(time.Millisecond)
	if fs := tr.Failing(); len(fs) != 1 || fs[0].What != "masquerade-route" {
		t.Fatalf("failing = %v", fs)
	}
}

func TestBackoff(t *testing.T) {
	var b Backoff
	var got []time.Duration
	for range 8 {
		got = append(got, b.Failed())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pauses = %v, want %v", got, want)
		}
	}
	b.Reset()
	if d := b.Failed(); d != RetryFirst {
		t.Errorf("after Reset: %v", d)
	}
}
