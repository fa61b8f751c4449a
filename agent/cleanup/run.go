package cleanup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
)

// ErrAgentRunning is wrapped by Run's error when an agent answers on the
// node and Options.Force is not set.
var ErrAgentRunning = errors.New("an agent is running on this node")

// AgentRunning says what of a running agent answers on the node: its
// introspection socket or its health address; "" when neither does.
func AgentRunning(ctx context.Context, socket, healthAddr string) string {
	if socket != "" {
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(ctx, "unix", socket); err == nil {
			c.Close()
			return "its introspection socket " + socket + " answers"
		}
	}
	if healthAddr != "" {
		host, port, err := net.SplitHostPort(healthAddr)
		if err != nil {
			return ""
		}
		switch host {
		case "", "0.0.0.0":
			host = "127.0.0.1"
		case "::":
			host = "::1"
		}
		u := "http://" + net.JoinHostPort(host, port) + "/healthz"
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return ""
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return fmt.Sprintf("its health address %s answers (%s)", u, resp.Status)
		}
	}
	return ""
}

// Run cleans the node up: it refuses while an agent answers (unless
// o.Force), inspects, plans, logs the notes, and applies the plan (or,
// with o.DryRun, only returns it).
func Run(ctx context.Context, o Options, log logrus.FieldLogger) (Plan, error) {
	if what := AgentRunning(ctx, o.Socket, o.HealthAddr); what != "" {
		if !o.Force {
			return Plan{}, fmt.Errorf("cleanup: %w: %s; stop it first (delete the DaemonSet), or pass --force", ErrAgentRunning, what)
		}
		log.WithField("agent", what).Warn("an agent is running on this node; going on (--force)")
	}
	facts, db, err := Inspect(ctx, o, log)
	if err != nil {
		return Plan{}, err
	}
	if db != nil {
		defer db.Close()
	}
	p := Make(o, facts)
	for _, n := range p.Notes {
		log.Warn(n)
	}
	if p.Empty() {
		log.Info("nothing to do: nodeflow left nothing on this node")
		return p, nil
	}
	if o.DryRun {
		return p, nil
	}
	if err := Apply(ctx, p, db, log); err != nil {
		return p, err
	}
	log.WithField("steps", len(p.Steps)).Info("done: nodeflow is off this node")
	return p, nil
}
