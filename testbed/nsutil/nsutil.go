// Package nsutil runs small pieces of Go code inside a network namespace:
// opening a listening or connected socket there, so that the rest of the
// process can use it from any thread.
package nsutil

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"nodeflow/nsrun"
)

// Path returns the path of the named network namespace (as `ip netns` names it).
func Path(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join("/run/netns", name)
}

// Do runs fn on a thread that has joined the network namespace (a name or a
// path). It uses a fresh goroutine locked to its thread; if the thread cannot
// return to its original namespace it stays locked and the runtime discards
// it. fn must not start processes: a child started on that thread would be
// killed with it (Pdeathsig).
func Do(ns string, fn func() error) error {
	if err := nsrun.Do(Path(ns), fn); err != nil {
		return fmt.Errorf("nsutil: %w", err)
	}
	return nil
}

// Listen opens a listener in the network namespace.
func Listen(ns, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(ns, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Dial connects from inside the network namespace. The connection attempt
// itself runs on the namespace's thread, bounded by timeout.
func Dial(ctx context.Context, ns, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := Do(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
