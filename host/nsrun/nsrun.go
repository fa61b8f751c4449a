// Package nsrun runs Go code inside another network namespace.
//
// Do is the one place in nodeflow that switches a thread's namespace: the
// CNI plugin uses it to configure a pod's side of a veth, and the testbed to
// open sockets in nodes, pods and hosts.
package nsrun

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn on a thread that has joined the network namespace at path (for
// example /run/netns/NAME or /proc/PID/ns/net). It uses a fresh goroutine
// locked to its thread. If the thread cannot return to its original
// namespace it stays locked, so the runtime discards it instead of reusing a
// thread in the wrong namespace. fn must not start processes: a child started
// on that thread would be killed with it when it is discarded (Pdeathsig).
func Do(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// The thread stays locked and dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", path, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
