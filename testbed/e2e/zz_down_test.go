package e2e

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"nodeflow/testbed"
)

var zombie = regexp.MustCompile(`\) Z `)

// TestZZDownLeavesNothing runs last (files and tests run in name order): it
// takes the shared testbed down and checks that no process, network namespace
// or mount of it is left.
func TestZZDownLeavesNothing(t *testing.T) {
	e := up(t)
	// What tests started in place of the testbed's own processes goes
	// first: the testbed does not know it.
	stopLasting()
	st := e.state
	var pids []int
	for _, p := range st.Processes {
		pids = append(pids, p.PID)
	}
	pids = append(pids, st.SupervisorPID)
	if out, err := testbedCmd(t, e, "down"); err != nil {
		t.Fatalf("testbed down: %v\n%s", err, out)
	} else if out != "testbed "+e.name+" is down\n" {
		t.Errorf("testbed down printed %q (something was removed by force?)", out)
	}
	if left := testbed.FindLeftovers(st.Dir, st.NetnsPrefix); !left.Empty() {
		t.Errorf("left behind: %s", left)
	}
	for _, pid := range pids {
		// A zombie waiting for init to reap it is gone for our purposes;
		// so is a pid reused by a process of this test binary (a test
		// replaced the testbed's process that had it).
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err == nil && !zombie.Match(b) && !childOfTest(b) {
			t.Errorf("process %d still exists: %s", pid, b)
		}
	}
	if _, err := os.Stat(st.Dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left (%v)", st.Dir, err)
	}
}

// childOfTest reports whether a /proc/PID/stat line is of a child of this
// test binary: field 4, after the parenthesised command, is the parent.
func childOfTest(stat []byte) bool {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:])
	return len(f) > 1 && f[1] == strconv.Itoa(os.Getpid())
}
