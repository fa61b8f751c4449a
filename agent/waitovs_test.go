package agent

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// An agent started before Open vSwitch waits for it: dialOVSDB keeps
// reporting what it waits for, and connects once ovsdb-server answers at
// the socket's path.
func TestDialOVSDBWaitsForOVS(t *testing.T) {
	ovstest.Require(t)
	sock := filepath.Join(t.TempDir(), "db.sock")
	var waits atomic.Int64
	var last atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		db, err := dialOVSDB(ctx, "unix:"+sock, logrus.New(), func(err error) {
			if err != nil {
				waits.Add(1)
			}
			last.Store(err == nil)
		})
		if db != nil {
			db.Close()
		}
		done <- result{err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for waits.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("dialOVSDB reported %d waits in 10 s", waits.Load())
		}
		select {
		case r := <-done:
			t.Fatalf("dialOVSDB returned %v before Open vSwitch ran", r.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	sb := ovstest.New(t, ovs.Options{})
	if err := os.Symlink(sb.DBSock(), sock); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("dialOVSDB: %v", r.err)
		}
		if ok, _ := last.Load().(bool); !ok {
			t.Error("the last report was a wait, not the connection")
		}
	case <-ctx.Done():
		t.Fatal("dialOVSDB did not connect once Open vSwitch ran")
	}

	// Cancelled while waiting: an error, not a connection.
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	n := 0
	if _, err := dialOVSDB(cctx, "unix:"+filepath.Join(t.TempDir(), "none.sock"), logrus.New(), func(err error) {
		if n++; n == 2 {
			ccancel()
		}
	}); err == nil {
		t.Fatal("dialOVSDB without Open vSwitch returned no error when cancelled")
	}
}
