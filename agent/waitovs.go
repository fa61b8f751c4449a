package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/lib/ovsdb"
)

// Open vSwitch may start after the agent (a separate DaemonSet, a package
// still installing): the agent waits for ovsdb-server rather than exiting,
// so that the node is not left to a crash-loop back-off. It logs the wait
// at once and then every ovsWaitLogEvery, and while it waits /healthz
// answers (the agent is alive) and /readyz says what it waits for.
const (
	ovsRetryFirst   = 200 * time.Millisecond
	ovsRetryMost    = 5 * time.Second
	ovsWaitLogEvery = 30 * time.Second
)

// dialOVSDB connects to ovsdb-server at endpoint, retrying with a growing
// pause until it answers or ctx ends. waiting is called with the last
// error before each pause (nil once connected).
func dialOVSDB(ctx context.Context, endpoint string, log logrus.FieldLogger, waiting func(error)) (*ovsdb.Client, error) {
	pause := ovsRetryFirst
	var since, logged time.Time
	for attempt := 1; ; attempt++ {
		db, err := ovsdb.Dial(ctx, endpoint, ovsdb.Options{Logger: log})
		if err == nil {
			if attempt > 1 {
				log.WithFields(logrus.Fields{"socket": endpoint, "waited": time.Since(since).Round(time.Millisecond).String()}).Info("Open vSwitch is up")
			}
			waiting(nil)
			return db, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ovsdb %s: %w (waited for it since %s)", endpoint, ctx.Err(), since.Format(time.RFC3339))
		}
		if since.IsZero() {
			since = time.Now()
		}
		waiting(err)
		if time.Since(logged) >= ovsWaitLogEvery {
			log.WithError(err).WithFields(logrus.Fields{"socket": endpoint, "attempts": attempt,
				"waiting": time.Since(since).Round(time.Second).String()}).Warn("waiting for Open vSwitch (ovsdb-server)")
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, ovsRetryMost)
	}
}
