// Package nsutil runs small pieces of Go code inside a network namespace:
// opening a listening or connected socket there, so that the rest of the
// process can use it from any thread.
package nsutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"nodeflow/host/nsrun"

	"github.com/vishvananda/netns"
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

// InNew runs fn on the calling goroutine's thread, moved into a fresh
// network namespace, and moves the thread back after it. It skips t without
// root (fails it when NODEFLOW_REQUIRE_OVS is set, as CI sets it). The
// namespace goes when nothing holds it any more.
func InNew(t testing.TB, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
			t.Fatal("needs root for a network namespace, and NODEFLOW_REQUIRE_OVS is set")
		}
		t.Skip("needs root for a network namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err)
		}
		ns.Close()
	}()
	fn()
}
