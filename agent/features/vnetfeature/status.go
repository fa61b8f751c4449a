package vnetfeature

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/workqueue"

	"nodeflow/model/vnet"
)

// FieldManager is the field manager of node's connection agent. It owns,
// by server-side apply on the status subresource, status.hostIP,
// status.ifcName and status.errors.host of the node's attachments, and
// nothing else: the IPAM controller's fields are never touched.
func FieldManager(node string) string { return "nodeflow-agent/" + node }

// hostStatus is the part of an attachment's status the agent writes.
type hostStatus struct {
	hostIP, ifcName string
	errors          []string
}

// of returns what a's status holds of the agent's fields.
func hostStatusOf(a *vnet.NetworkAttachment) hostStatus {
	return hostStatus{hostIP: a.Status.HostIP, ifcName: a.Status.IfcName, errors: a.Status.Errors.Host}
}

func (s hostStatus) equal(o hostStatus) bool {
	return s.hostIP == o.hostIP && s.ifcName == o.ifcName && slices.Equal(s.errors, o.errors)
}

// empty reports whether s holds nothing of the agent's.
func (s hostStatus) empty() bool { return s.hostIP == "" && s.ifcName == "" && len(s.errors) == 0 }

// statusApply is the apply configuration of s for the attachment
// namespace/name with uid: the agent's fields only. An unset hostIP or
// ifcName is left out, which removes it (the agent owns it alone), and
// errors.host is always given, [] when there is nothing to report. The UID
// makes the API server refuse the apply to another object of that name.
func statusApply(namespace, name string, uid types.UID, s hostStatus) *unstructured.Unstructured {
	st := map[string]any{}
	if s.hostIP != "" {
		st["hostIP"] = s.hostIP
	}
	if s.ifcName != "" {
		st["ifcName"] = s.ifcName
	}
	errs := make([]any, 0, len(s.errors))
	for _, e := range s.errors {
		errs = append(errs, e)
	}
	st["errors"] = map[string]any{"host": errs}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": vnet.APIVersion,
		"kind":       vnet.KindNetworkAttachment,
		"metadata":   map[string]any{"name": name, "namespace": namespace, "uid": string(uid)},
		"status":     st,
	}}
}

// applyStatus writes s into the attachment's status with server-side
// apply as node's field manager.
func applyStatus(ctx context.Context, dyn dynamic.Interface, node, namespace, name string, uid types.UID, s hostStatus) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := dyn.Resource(vnet.NetworkAttachmentGVR).Namespace(namespace).ApplyStatus(ctx, name, statusApply(namespace, name, uid, s),
		metav1.ApplyOptions{FieldManager: FieldManager(node), Force: true})
	if err != nil {
		return fmt.Errorf("NetworkAttachment %s/%s: apply status (hostIP, ifcName, errors.host): %w", namespace, name, err)
	}
	return nil
}

// pendingStatus is a status write queued by a pass.
type pendingStatus struct {
	key string
	a   *vnet.NetworkAttachment
	s   hostStatus
}

// queueStatus queues a status write for the end of the pass.
func (f *Agent) queueStatus(key string, a *vnet.NetworkAttachment, s hostStatus) {
	if hostStatusOf(a).equal(s) {
		return
	}
	f.statuses = append(f.statuses, pendingStatus{key: key, a: a, s: s})
}

// statusWorkers bounds the status writes in flight at once.
const statusWorkers = 8

// flushStatuses writes the queued statuses, statusWorkers at a time, and
// returns the keys of those that failed (to be retried).
func (f *Agent) flushStatuses(ctx context.Context) []string {
	queued := f.statuses
	f.statuses = nil
	ok := make([]bool, len(queued))
	workqueue.ParallelizeUntil(context.Background(), statusWorkers, len(queued), func(i int) {
		ok[i] = f.writeStatus(ctx, queued[i].a, queued[i].s)
	})
	var failed []string
	for i, p := range queued {
		if !ok[i] {
			failed = append(failed, p.key)
		}
	}
	return failed
}

// writeStatus applies s to a's status unless it holds it already. It
// reports whether the status is as wanted.
func (f *Agent) writeStatus(ctx context.Context, a *vnet.NetworkAttachment, s hostStatus) bool {
	if hostStatusOf(a).equal(s) {
		return true
	}
	if err := applyStatus(ctx, f.dyn, f.h.Node().Name, a.Namespace, a.Name, a.UID, s); err != nil {
		f.m.statusWrites.WithLabelValues("error").Inc()
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, or another object of that name: its own event
			// follows.
			f.log.WithError(err).Debug("status not written")
			return true
		}
		f.log.WithError(err).Warn("cannot write the attachment's status; retrying")
		return false
	}
	f.m.statusWrites.WithLabelValues("ok").Inc()
	return true
}
