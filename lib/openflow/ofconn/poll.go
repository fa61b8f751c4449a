package ofconn

import (
	"context"
	"time"
)

// DefaultPollDialWait bounds a Poller's dial, retries included, by default.
const DefaultPollDialWait = 30 * time.Second

// Poller reads from a switch at a fixed interval, for instance the
// statistics a metric follows, over one connection that it keeps from one
// read to the next. A dial that fails is reported and tried again at the
// next tick; a read that fails closes the connection, so that the next
// tick dials afresh.
type Poller struct {
	// Addr returns the switch's address. It is asked at each dial.
	Addr func() string
	// Options configure the connection.
	Options Options
	// Interval is the time between reads. The first read comes one
	// Interval after Run starts.
	Interval time.Duration
	// DialWait bounds each dial, its retries included. Default
	// DefaultPollDialWait.
	DialWait time.Duration
	// Read reads over c; ctx is Run's. An error closes c.
	Read func(ctx context.Context, c *Conn) error
	// DialFailed, when set, hears why a dial failed.
	DialFailed func(error)
}

// Run reads every Interval until ctx ends, then closes the connection.
func (p Poller) Run(ctx context.Context) {
	wait := p.DialWait
	if wait <= 0 {
		wait = DefaultPollDialWait
	}
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	var c *Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c == nil {
			dctx, cancel := context.WithTimeout(ctx, wait)
			var err error
			c, err = Dial(dctx, p.Addr(), p.Options)
			cancel()
			if err != nil {
				if p.DialFailed != nil {
					p.DialFailed(err)
				}
				continue
			}
		}
		if err := p.Read(ctx, c); err != nil {
			c.Close()
			c = nil
		}
	}
}
