package nodefeature

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/datapath/plan"
)

// ReturnsByTunnelSince is the first pipeline version whose agents commit
// connections from other nodes' hosts that arrive through the tunnel and
// send their replies back through it (plan.ReturnByTunnel).
const ReturnsByTunnelSince = 4

// pipelineOf returns the pipeline version a Node's agent publishes in
// plan.PipelineAnnotation; 0 when it publishes none or a malformed one
// (an agent older than the annotation).
func pipelineOf(n *corev1.Node) int {
	v, err := strconv.Atoi(n.Annotations[plan.PipelineAnnotation])
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// publishPipeline writes this agent's plan.PipelineVersion into its Node's
// plan.PipelineAnnotation once br0 holds the flows that version promises
// the other nodes, retrying until it succeeds or ctx is done.
func (n *NodeNet) publishPipeline(ctx context.Context) {
	if err := n.h.Flush(ctx, plan.Pod); err != nil {
		return
	}
	want := strconv.Itoa(plan.PipelineVersion)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{plan.PipelineAnnotation: want}}})
	if err != nil {
		n.log.WithError(err).Error("nodenet: pipeline annotation")
		return
	}
	wait := 200 * time.Millisecond
	for {
		err := n.patchPipeline(ctx, want, patch)
		if err == nil {
			return
		}
		n.log.WithError(err).Warn("nodenet: pipeline version not published yet; the other nodes SNAT this node's host connections to the router address meanwhile")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

func (n *NodeNet) patchPipeline(ctx context.Context, want string, patch []byte) error {
	name := n.h.Node().Name
	if obj, ok, _ := n.nodes.GetStore().GetByKey(name); ok {
		if k, ok := obj.(*corev1.Node); ok && k.Annotations[plan.PipelineAnnotation] == want {
			return nil
		}
	}
	if _, err := n.h.Kube().CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeflow-agent"}); err != nil {
		return fmt.Errorf("node %s: annotate %s=%s: %w", name, plan.PipelineAnnotation, want, err)
	}
	return nil
}
