// Package memlimit gives the Go runtime a soft memory limit from the
// process's cgroup: a container's memory limit becomes GOMEMLIMIT (less a
// margin for what the runtime does not count), so that the garbage
// collector works harder as the heap nears the limit instead of the kernel
// killing the process. GOMEMLIMIT set in the environment wins.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Share is the part of the cgroup's limit given to the Go heap; the rest
// is for stacks, the runtime's own structures and memory the kernel
// counts against the cgroup (page cache of written files).
const Share = 0.9

// noLimit is what cgroup v1 reports for "no limit" (a page-aligned
// maximum); anything above it is no limit either.
const noLimit = int64(1) << 62

// Limit returns the memory limit of the cgroup that /proc/self/cgroup
// (procSelfCgroup) names, read under cgroupRoot (/sys/fs/cgroup): cgroup
// v2's memory.max, or v1's memory.limit_in_bytes. It returns 0 when there
// is no limit, and the file it read.
func Limit(procSelfCgroup, cgroupRoot string) (int64, string, error) {
	b, err := os.ReadFile(procSelfCgroup)
	if err != nil {
		return 0, "", fmt.Errorf("memlimit: %w", err)
	}
	var candidates []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates, filepath.Join(cgroupRoot, parts[2], "memory.max"),
				filepath.Join(cgroupRoot, "memory.max"))
		case hasController(parts[1], "memory"):
			candidates = append(candidates, filepath.Join(cgroupRoot, "memory", parts[2], "memory.limit_in_bytes"),
				filepath.Join(cgroupRoot, "memory", "memory.limit_in_bytes"))
		}
	}
	for _, path := range candidates {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return 0, path, fmt.Errorf("memlimit: %w", err)
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, path, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, path, fmt.Errorf("memlimit: %s: %q is not a number of bytes", path, s)
		}
		if n <= 0 || n >= noLimit {
			return 0, path, nil
		}
		return n, path, nil
	}
	return 0, "", nil
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// Apply sets the runtime's soft memory limit to Share of the process's
// cgroup limit, unless GOMEMLIMIT is set or there is no limit. It returns
// the limit it set (0 for none) and a sentence saying what it did.
func Apply() (int64, string) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return 0, "GOMEMLIMIT=" + v + " from the environment"
	}
	limit, path, err := Limit("/proc/self/cgroup", "/sys/fs/cgroup")
	switch {
	case err != nil:
		return 0, "no memory limit for the Go runtime: " + err.Error()
	case limit == 0:
		return 0, "no cgroup memory limit"
	}
	soft := int64(float64(limit) * Share)
	debug.SetMemoryLimit(soft)
	return soft, fmt.Sprintf("Go memory limit %d MiB, %.0f%% of the cgroup's %d MiB (%s)", soft>>20, Share*100, limit>>20, path)
}

// DefaultGCPercent is the garbage collector's target the agent runs with
// when GOGC is not set: the heap may grow by half its live size between
// collections, not by all of it (Go's default, 100). A node agent's heap is
// mostly long-lived state (the cluster's Services, the switch's desired
// flows), so the headroom is what a lower target saves: at 10,000 Services
// it keeps about 45 MiB less resident, for about a fifth more CPU while
// Services are created in bulk (docs/benchmarks.md).
const DefaultGCPercent = 50

// SetGCPercent sets the collector's target to percent unless GOGC is set in
// the environment, which wins; a percent of 0 or less leaves Go's default.
// It returns what it did, for the log.
func SetGCPercent(percent int) string {
	if v := os.Getenv("GOGC"); v != "" {
		return "GOGC=" + v + " from the environment"
	}
	if percent <= 0 {
		return "Go's default garbage collector target (GOGC=100)"
	}
	debug.SetGCPercent(percent)
	return fmt.Sprintf("garbage collector target %d%% (GOGC)", percent)
}
