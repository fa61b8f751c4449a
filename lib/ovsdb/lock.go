package ovsdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// ErrLockRequested is returned by Client.Lock for a lock the client has
// asked for already.
var ErrLockRequested = errors.New("lock already requested by this client")

// Lock is one of the server's named locks (RFC 7047, 4.1.8-4.1.10) that a
// client asked for. The server grants a lock to one connection at a time
// and queues the others. Held closes once the server grants it to this
// client; Lost closes if the client loses it afterwards: another client
// stole it, or the connection was lost and the server did not grant it
// again at once on the next one (another client took it meanwhile).
type Lock struct {
	name       string
	params     []byte // the requests' params: [name]
	held, lost chan struct{}

	mu      sync.Mutex // guards the flags and closing the channels
	isHeld  bool
	isLost  bool
	lostWhy error
}

func newLock(name string) *Lock {
	params, _ := json.Marshal([]string{name}) // a string always encodes
	return &Lock{name: name, params: params, held: make(chan struct{}), lost: make(chan struct{})}
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Held returns a channel that is closed once the server grants the lock.
func (l *Lock) Held() <-chan struct{} { return l.held }

// Lost returns a channel that is closed when a held lock is lost.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err says why the lock was lost (nil while it is not).
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostWhy
}

// grant records that the server granted the lock.
func (l *Lock) grant() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.isHeld && !l.isLost {
		l.isHeld = true
		close(l.held)
	}
}

// lose records that the lock is lost, for why.
func (l *Lock) lose(why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.isLost {
		l.isLost, l.lostWhy = true, why
		close(l.lost)
	}
}

// state returns whether the lock is held and whether it is lost.
func (l *Lock) state() (held, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.isHeld, l.isLost
}

// Lock asks the server for the lock named name on the client's connection
// and returns without waiting for it to be granted: see Lock.Held. The
// lock goes with the connection: after a reconnection the client asks for
// it again, and a lock that was held and is not granted again at once is
// lost (Lock.Lost). Closing the client gives it back.
func (c *Client) Lock(ctx context.Context, name string) (*Lock, error) {
	l := newLock(name)
	for {
		conn, err := c.getConn(ctx)
		if err != nil {
			return nil, wrap(err, fmt.Sprintf("lock %q", name))
		}
		// As for monitors: registered and asked for on the current
		// connection, or on the next one by reconnect, never both.
		c.monMu.Lock()
		dup := false
		current := c.onCurrent(conn, func() {
			if dup = c.locks[name] != nil; !dup {
				c.locks[name] = l
			}
		})
		if dup {
			c.monMu.Unlock()
			return nil, fmt.Errorf("ovsdb: lock %q: %w", name, ErrLockRequested)
		}
		if !current {
			c.monMu.Unlock()
			continue
		}
		granted, err := requestLock(ctx, conn, l.params)
		if err != nil {
			c.mu.Lock()
			delete(c.locks, name)
			c.mu.Unlock()
		}
		c.monMu.Unlock()
		switch {
		case err == nil:
			if granted {
				l.grant()
			}
			return l, nil
		case isDisconnect(err) && ctx.Err() == nil:
			continue // ask on the next connection
		default:
			return nil, wrap(err, fmt.Sprintf("lock %q", name))
		}
	}
}

// requestLock sends a "lock" request on conn and returns whether the
// server granted the lock at once.
func requestLock(ctx context.Context, conn *rpcConn, params []byte) (bool, error) {
	res, err := conn.call(ctx, "lock", params, nil)
	if err != nil {
		return false, err
	}
	return parseLockReply(res)
}

// parseLockReply reads the result of a "lock" request: {"locked": bool}.
func parseLockReply(res []byte) (bool, error) {
	var r struct {
		Locked *bool `json:"locked"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.Locked == nil {
		return false, fmt.Errorf("%w: lock reply %s has no \"locked\"", ErrMalformed, truncate(res))
	}
	return *r.Locked, nil
}

// relock asks again for every lock on a new connection (reconnect, with
// monMu held). A lock that was held and is not granted at once is lost,
// and leaves the server's queue.
func (c *Client) relock(ctx context.Context, conn *rpcConn) error {
	c.mu.Lock()
	locks := slices.Collect(maps.Values(c.locks))
	c.mu.Unlock()
	for _, l := range locks {
		granted, err := requestLock(ctx, conn, l.params)
		if err != nil {
			return fmt.Errorf("lock %q: %w", l.name, err)
		}
		held, _ := l.state()
		switch {
		case granted:
			l.grant()
		case held:
			l.lose(fmt.Errorf("ovsdb: lock %q: another client holds it after a reconnection", l.name))
			if _, err := conn.call(ctx, "unlock", l.params, nil); err != nil {
				return fmt.Errorf("unlock %q: %w", l.name, err)
			}
			c.mu.Lock()
			delete(c.locks, l.name)
			c.mu.Unlock()
		}
	}
	return nil
}

// onLockNotify handles the "locked" and "stolen" notifications.
func (c *Client) onLockNotify(method string, params json.RawMessage) error {
	var p []string
	if err := json.Unmarshal(params, &p); err != nil || len(p) != 1 {
		return fmt.Errorf("%w: %s params: want [lock-id]", ErrMalformed, method)
	}
	c.mu.Lock()
	l := c.locks[p[0]]
	if l != nil && method == "stolen" {
		delete(c.locks, p[0])
	}
	c.mu.Unlock()
	if l == nil {
		return nil
	}
	if method == "locked" {
		l.grant()
	} else {
		l.lose(fmt.Errorf("ovsdb: lock %q: stolen by another client", p[0]))
	}
	return nil
}
