package e2e

import (
	"context"
	"testing"
	"time"

	"nodeflow/deploy"
	"nodeflow/testbed"
)

// TestManifestsServerDryRun applies every manifest of deploy/ (what
// `kubectl apply -k deploy/` applies) to the testbed's API server with a
// server-side dry run: the real API server checks each object's schema,
// defaults and admission, and stores nothing. (The namespace, the RBAC and
// the CRDs are also applied for real when the testbed starts.)
func TestManifestsServerDryRun(t *testing.T) {
	e := up(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testbed.DryRunManifests(ctx, e.state.Kubeconfig, deploy.All,
		"crds/*.yaml", "namespace.yaml", "rbac/*.yaml", "agent.yaml", "unidler.yaml"); err != nil {
		t.Fatal(err)
	}
}
