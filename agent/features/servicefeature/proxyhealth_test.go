package servicefeature

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestProxyHealthz(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	h := newProxyHealth()
	h.now = func() time.Time { return now }
	check := func(what string, want int) healthzBody {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		var b healthzBody
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
			t.Fatalf("%s: body %q: %v", what, rec.Body.String(), err)
		}
		if rec.Code != want || !b.NodeEligible || b.CurrentTime != now.Format(time.RFC3339Nano) {
			t.Errorf("%s: %d %+v, want %d", what, rec.Code, b, want)
		}
		return b
	}
	check("before the first sync", http.StatusServiceUnavailable)

	h.synced(now, nil)
	if b := check("after a sync", http.StatusOK); b.LastUpdated != now.Format(time.RFC3339Nano) {
		t.Errorf("lastUpdated %q", b.LastUpdated)
	}
	// A change waits: healthy for a minute, then not.
	now = now.Add(time.Second)
	h.queued()
	queued := now
	now = now.Add(proxyHealthTimeout)
	check("a change waiting a minute", http.StatusOK)
	now = now.Add(time.Second)
	check("a change waiting longer", http.StatusServiceUnavailable)
	// A sync that started before the change does not clear it; one after does.
	h.synced(queued.Add(-time.Millisecond), nil)
	check("a sync older than the change", http.StatusServiceUnavailable)
	h.synced(queued, nil)
	check("the change synced", http.StatusOK)
	h.synced(now, errors.New("boom"))
	check("a failed sync", http.StatusServiceUnavailable)
}
