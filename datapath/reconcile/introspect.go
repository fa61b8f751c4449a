package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultSocket is where the agent serves introspection and where
// `nodeflow flows` looks for it.
const DefaultSocket = "/run/nodeflow/nodeflow.sock"

// DifferencesHeader is the response header of /flows/diff that carries the
// number of differences.
const DifferencesHeader = "X-Nodeflow-Differences"

// Introspection serves the desired state of the agent's bridges, and how
// the switches differ from it, in ovs-ofctl syntax:
//
//	GET /flows?bridge=br0&owner=PREFIX       desired flows, groups, meters
//	GET /flows/diff?bridge=br0&owner=PREFIX  differences, read from the switch now
//	GET /flows/namespaces                    what each namespace costs (WriteNamespaces)
//
// Without bridge, every bridge is shown, each after a "## bridge NAME"
// line. It is an http.Handler.
type Introspection struct {
	bridges map[string]*Reconciler
}

// NewIntrospection serves rs, each under its Options.Bridge name.
func NewIntrospection(rs ...*Reconciler) *Introspection {
	h := &Introspection{bridges: map[string]*Reconciler{}}
	for _, r := range rs {
		h.bridges[r.opts.Bridge] = r
	}
	return h
}

func (h *Introspection) names() []string {
	var out []string
	for n := range h.bridges {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ServeHTTP implements http.Handler.
func (h *Introspection) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		http.Error(w, "reconcile: introspection: only GET", http.StatusMethodNotAllowed)
		return
	}
	q := req.URL.Query()
	owner := q.Get("owner")
	bridges := h.names()
	if b := q.Get("bridge"); b != "" {
		if _, ok := h.bridges[b]; !ok {
			http.Error(w, fmt.Sprintf("reconcile: introspection: no bridge %q (have %s)", b, strings.Join(bridges, ", ")), http.StatusNotFound)
			return
		}
		bridges = []string{b}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch req.URL.Path {
	case "/flows":
		var sb strings.Builder
		for _, b := range bridges {
			r := h.bridges[b]
			if len(bridges) > 1 {
				fmt.Fprintf(&sb, "## bridge %s\n", b)
			}
			if err := r.store.Render(&sb, owner, r.Generation()); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte(sb.String()))
	case "/flows/diff":
		ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
		defer cancel()
		var sb strings.Builder
		total := 0
		for _, b := range bridges {
			ds, err := h.bridges[b].Compare(ctx, owner)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			total += len(ds)
			if len(bridges) > 1 {
				fmt.Fprintf(&sb, "## bridge %s\n", b)
			}
			if err := WriteDifferences(&sb, ds); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set(DifferencesHeader, strconv.Itoa(total))
		_, _ = w.Write([]byte(sb.String()))
	case "/flows/namespaces":
		var sb strings.Builder
		var stores []NamedStore
		for _, b := range bridges {
			stores = append(stores, NamedStore{Bridge: b, Store: h.bridges[b].store})
		}
		if err := WriteNamespaces(&sb, stores); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(sb.String()))
	default:
		http.NotFound(w, req)
	}
}

// ServeIntrospection serves h on a unix socket at path until ctx ends. It
// creates the socket's directory, replaces a stale socket, and makes the
// socket accessible to root only.
func ServeIntrospection(ctx context.Context, path string, h http.Handler) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("reconcile: introspection socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reconcile: introspection socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("reconcile: introspection socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("reconcile: introspection socket %s: %w", path, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("reconcile: introspection socket %s: %w", path, err)
	}
	return nil
}
