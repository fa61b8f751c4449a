package vnetfeature

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"nodeflow/agent/feature"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/vnetflows"
	"nodeflow/model/vnet"
)

// made is what the agent made for one local attachment.
type made struct {
	want desired
	port uint32
}

// asAttachment returns obj as an attachment, or nil with the reason it
// is not one.
func asAttachment(obj any) (*vnet.NetworkAttachment, error) {
	switch o := obj.(type) {
	case *vnet.NetworkAttachment:
		return o, nil
	case *unstructured.Unstructured:
		return vnet.FromUnstructured[*vnet.NetworkAttachment](o)
	}
	return nil, fmt.Errorf("vnetagent: %T is not a NetworkAttachment", obj)
}

// nodeIP is this node's tunnel endpoint: its first IPv4 address.
func nodeIP(n feature.Node) (netip.Addr, bool) {
	for _, a := range n.Addrs() {
		if a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// syncLocal makes, adopts or removes one local attachment's interface,
// port and flows, and writes its status.
func (f *Agent) syncLocal(ctx context.Context, key string, obj any) (failed bool) {
	node := f.h.Node()
	if obj == nil {
		delete(f.reported, key)
		delete(f.states, key)
		return f.teardown(ctx, key)
	}
	a, err := asAttachment(obj)
	if err != nil {
		f.states[key] = stateError
		failed = f.teardown(ctx, key)
		if ro, ok := obj.(runtime.Object); ok {
			f.report(key, ro, []problem{{ReasonMalformed, "spec", err.Error()}})
		}
		return failed
	}
	if a.Spec.Node != node.Name {
		// Not this node's (the field selector says it is): never an
		// interface here.
		delete(f.states, key)
		return f.teardown(ctx, key)
	}
	j := judge(a, f.subnet, node.MTU)
	if j.wait {
		f.states[key] = stateWaiting
		failed = f.teardown(ctx, key)
		delete(f.reported, key)
		if a.Status.IP == "" && !hostStatusOf(a).empty() {
			failed = !f.writeStatus(ctx, a, hostStatus{}) || failed
		}
		return failed
	}
	self, ok := nodeIP(node)
	if len(j.problems) == 0 && !ok {
		j.problems = []problem{{ReasonNoNodeAddress, "status.hostIP", fmt.Sprintf("node %s has no IPv4 address to be the VXLAN endpoint", node.Name)}}
	}
	if len(j.problems) > 0 {
		return f.fail(ctx, key, a, j.problems)
	}
	return f.make(ctx, key, a, j.want, self)
}

// placeholderPort stands for an attachment's port in the flows that
// check, before anything is made, whether another owner wants them: a
// valid ofport no switch gives (Open vSwitch numbers ports below 65280).
const placeholderPort uint32 = 0xfffffe00

// make makes or adopts a ready attachment's interface and port, sets its
// flows and writes its status. An address another local attachment of
// the VNI already has is refused before anything is made, and retried.
func (f *Agent) make(ctx context.Context, key string, a *vnet.NetworkAttachment, want desired, self netip.Addr) (failed bool) {
	with, err := f.contenders(want)
	if err != nil {
		// judge checked the model: a broken invariant.
		return f.fail(ctx, key, a, []problem{{ReasonAddressInvalid, "status", err.Error()}})
	}
	if len(with) > 0 {
		f.fail(ctx, key, a, []problem{{ReasonAddressConflict, "status.ip",
			fmt.Sprintf("%s on VNI %d is also wanted by %s", want.ip, want.vni, strings.Join(with, ", "))}})
		return true // until the other one goes
	}
	if m := f.locals[key]; m != nil && (m.want.link.Name != want.link.Name || m.want.link.Netns != want.link.Netns) {
		if f.teardown(ctx, key) {
			return true
		}
	}
	var port uint32
	var adopted bool
	if pm, ok := f.premade[key]; ok && sameSpec(pm.want.link, want.link) {
		port, adopted, err = pm.port, pm.adopted, pm.err
	} else {
		port, adopted, err = f.host.attach(ctx, want)
	}
	if err != nil {
		f.m.hostErrors.Inc()
		f.fail(ctx, key, a, []problem{{ReasonInterfaceFailed, "status.ifcName", fmt.Sprintf("cannot make interface %s: %v", want.link.Name, err)}})
		return true
	}
	fs, err := vnetflows.LocalFlows(localModel(want, port))
	if err == nil {
		err = f.setFlows(vnetflows.LocalOwner(want.namespace, want.name), fs)
	}
	if err != nil {
		return true
	}
	prev := f.locals[key]
	f.locals[key] = &made{want: want, port: port}
	if prev == nil || prev.port != port {
		f.log.WithFields(logrus.Fields{"attachment": key, "interface": want.link.Name, "netns": want.link.Netns,
			"ip": want.ip, "vni": want.vni, "ofport": port, "adopted": adopted}).Info("attachment ready")
	}
	f.states[key] = stateReady
	delete(f.reported, key)
	f.queueStatus(key, a, hostStatus{hostIP: self.String(), ifcName: want.link.Name, errors: []string{}})
	return false
}

// localModel is the model of want's flows with its port.
func localModel(want desired, port uint32) vnetflows.Local {
	return vnetflows.Local{Namespace: want.namespace, Name: want.name, VNI: want.vni, Port: port, MAC: want.mac, IP: want.ip}
}

// contenders returns, sorted, the other owners that want flows of want's
// address on its VNI (probed with placeholderPort, before anything is
// made).
func (f *Agent) contenders(want desired) ([]string, error) {
	probe, err := vnetflows.LocalFlows(localModel(want, placeholderPort))
	if err != nil {
		return nil, err
	}
	var with []string
	for _, c := range f.owners.Contested(vnetflows.LocalOwner(want.namespace, want.name), reconcile.State{Flows: probe}) {
		with = append(with, c.Owner)
	}
	slices.Sort(with)
	return slices.Compact(with), nil
}

// fail removes what was made for an attachment, reports its problems and
// writes them into its status. It reports whether writing failed.
func (f *Agent) fail(ctx context.Context, key string, a *vnet.NetworkAttachment, probs []problem) bool {
	f.states[key] = stateError
	failed := f.teardown(ctx, key)
	f.report(key, a, probs)
	errs := make([]string, len(probs))
	for i, p := range probs {
		errs[i] = p.String()
	}
	return !f.writeStatus(ctx, a, hostStatus{errors: errs}) || failed
}

// report logs an attachment's problems and records a Warning event on it,
// once each time they change.
func (f *Agent) report(key string, obj runtime.Object, probs []problem) {
	msg := joinProblems(probs)
	if f.reported[key] == msg {
		return
	}
	f.reported[key] = msg
	f.log.WithField("attachment", key).Warn(msg)
	f.h.Recorder().Event(obj, corev1.EventTypeWarning, probs[0].reason, "NetworkAttachment "+key+": "+msg)
}

// teardown removes what was made for an attachment. It reports whether
// that failed (the attachment is tried again).
func (f *Agent) teardown(ctx context.Context, key string) (failed bool) {
	m := f.locals[key]
	ns, name, _ := strings.Cut(key, "/")
	owner := vnetflows.LocalOwner(ns, name)
	if slices.Contains(f.owners.List(owner), owner) && f.setFlows(owner, nil) != nil {
		failed = true
	}
	if m == nil {
		return failed
	}
	return f.teardownMade(ctx, key, m.want) || failed
}

// teardownMade removes want's interface and port.
func (f *Agent) teardownMade(ctx context.Context, key string, want desired) bool {
	if err := f.host.detach(ctx, want.link.Name, want.link.Netns); err != nil {
		f.m.hostErrors.Inc()
		f.log.WithError(err).WithField("attachment", key).Warn("cannot remove the attachment's interface; retrying")
		return true
	}
	if f.locals[key] != nil {
		f.log.WithFields(logrus.Fields{"attachment": key, "interface": want.link.Name, "netns": want.link.Netns}).Info("attachment's interface removed")
	}
	delete(f.locals, key)
	return false
}
