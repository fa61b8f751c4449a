package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/lib/ovsdb"
)

// AgentLock is the OVSDB lock an agent holds while it programs its node's
// Open vSwitch. Two agents on one switch would each undo the other's flows
// on every pass (an agent run by hand beside the DaemonSet's, a pod that
// has not exited yet, an agent pointed at another node's sockets): the
// second waits for the lock instead, not ready, until the first stops, and
// an agent that loses the lock stops. ovsdb-server gives the lock back when
// the holder's connection closes, however the holder ends.
const AgentLock = "nodeflow_agent"

// lockWaitLogEvery is how often a waiting agent says so again.
const lockWaitLogEvery = 30 * time.Second

// takeLock asks for AgentLock and waits until the agent holds it.
func (a *Agent) takeLock(ctx context.Context) error {
	l, err := a.db.Lock(ctx, AgentLock)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	a.lock = l
	select {
	case <-l.Held():
		return nil
	default:
	}
	since := time.Now()
	a.waitingFor.Store("waiting for OVSDB lock " + AgentLock + ": another nodeflow agent programs this node's Open vSwitch")
	log := a.log.WithFields(logrus.Fields{"lock": AgentLock, "socket": a.cfg.DBSocket()})
	log.Warn("another nodeflow agent programs this node's Open vSwitch; waiting for it to stop")
	alive := time.NewTicker(time.Second)
	defer alive.Stop()
	logged := since
	for {
		select {
		case <-l.Held():
			a.waitingFor.Store("")
			log.WithField("waited", time.Since(since).Round(time.Millisecond).String()).Info("the other agent stopped; taking over")
			return nil
		case <-l.Lost():
			return fmt.Errorf("controller: waiting for OVSDB lock %s: %w", AgentLock, l.Err())
		case <-ctx.Done():
			return fmt.Errorf("controller: waiting for OVSDB lock %s (another agent holds it): %w", AgentLock, ctx.Err())
		case now := <-alive.C:
			// Waiting is alive: the liveness probe must not restart it.
			a.lastLoop.Store(now.UnixNano())
			if now.Sub(logged) >= lockWaitLogEvery {
				log.WithField("waiting", now.Sub(since).Round(time.Second).String()).Warn("still waiting for the other nodeflow agent on this node's Open vSwitch to stop")
				logged = now
			}
		}
	}
}

// lockLost returns a channel that closes when the agent loses AgentLock
// (nil, which never fires, before it asked for it).
func (a *Agent) lockLost() <-chan struct{} {
	if a.lock == nil {
		return nil
	}
	return a.lock.Lost()
}

// lockErr says why the lock was lost.
func lockErr(l *ovsdb.Lock) error {
	return fmt.Errorf("controller: lost OVSDB lock %s, another nodeflow agent programs this node's Open vSwitch now: stopping: %w", AgentLock, l.Err())
}
