package vnetfeature

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// DefaultNetnsDir is where `ip netns add` keeps named network namespaces:
// a file per namespace, on which the namespace is bind-mounted, so that
// `ip netns exec NAME ...` works on the agent's namespaces too.
const DefaultNetnsDir = "/run/netns"

// ensureNetnsDir makes dir a shared mount point, as `ip netns add` does,
// so that the namespaces mounted in it are seen from every mount
// namespace (the host's, when the agent runs in a container that mounts
// the host's dir with bidirectional propagation).
func ensureNetnsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("netns dir %s: %w", dir, err)
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: make it one (a bind mount on itself).
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("netns dir %s: bind mount: %w", dir, err)
		}
		err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("netns dir %s: make shared: %w", dir, err)
	}
	return nil
}

// createNetns creates the named network namespace dir/name, as `ip netns
// add` does: a new namespace, bind-mounted on an empty file. It runs on a
// thread of its own that returns to its namespace afterwards (or is
// discarded when it cannot).
func createNetns(dir, name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("netns %q: not a namespace name", name)
	}
	if err := ensureNetnsDir(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: current namespace: %w", path, err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: unshare: %w", path, err)
			return
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		merr := unix.Mount(self, path, "none", unix.MS_BIND, "")
		if err := netns.Set(orig); err != nil {
			// The thread stays locked in the new namespace and dies with
			// this goroutine.
			errc <- errors.Join(merr, fmt.Errorf("netns %s: return to the original namespace: %w", path, err))
			return
		}
		runtime.UnlockOSThread()
		if merr != nil {
			merr = fmt.Errorf("netns %s: bind mount: %w", path, merr)
		}
		errc <- merr
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// deleteNetns removes the named network namespace dir/name, as `ip netns
// delete` does. A missing one is not an error.
func deleteNetns(dir, name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("netns %q: not a namespace name", name)
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns %s: unmount: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}
