package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestAgentStopReleasesNamespaceIDLease: the agent that leads the
// namespace-id allocator gives its Lease up when it stops, so that its
// replacement allocates at once: a namespace created right after a
// restart gets its id, and its pods their flows, in well under the
// Lease's 15 s.
func TestAgentStopReleasesNamespaceIDLease(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	lease := func(ctx context.Context) (string, error) {
		l, err := e.client.CoordinationV1().Leases("kube-system").Get(ctx, "nodeflow-nsid-allocator", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return ptr.Deref(l.Spec.HolderIdentity, ""), nil
	}
	var holder string
	eventually(t, 30*time.Second, "a namespace-id allocator leading", func(ctx context.Context) error {
		var err error
		if holder, err = lease(ctx); err == nil && holder == "" {
			err = fmt.Errorf("no holder")
		}
		return err
	})
	node, _, _ := strings.Cut(holder, "_") // the identity is node_random
	m := member(t, e, node)
	stopped := time.Now()
	replaceAgent(t, e, m)
	eventually(t, 5*time.Second, "the stopped leader's Lease given up", func(ctx context.Context) error {
		h, err := lease(ctx)
		if err == nil && h == holder {
			err = fmt.Errorf("still held by %s", h)
		}
		return err
	})
	t.Logf("the Lease was given up %s after the leader was told to stop", time.Since(stopped).Round(time.Millisecond))
	ns := createNamespace(t, e, "e2e-lease-handover")
	p := deployPods(t, e, ns, "web", 2)
	for _, c := range p {
		for _, s := range p {
			eventually(t, 10*time.Second, fmt.Sprintf("%s -> %s right after the restart", c.name, s.name), func(ctx context.Context) error {
				_, _, err := httpGet(ctx, c.netns, s.ip(false), 8080)
				return err
			})
		}
	}
	if took := time.Since(stopped); took > 15*time.Second {
		t.Errorf("the new namespace's pods talked %s after the restart, more than a Lease's 15 s", took.Round(time.Millisecond))
	}
}
