// Package kubelet is the testbed's stand-in for kubelet and a container
// runtime, one per node.
//
// It registers its Node (Ready, capacity, addresses, the kubelet port) and
// renews the node's Lease. For each Pod bound to the node it creates a
// network namespace, attaches it by executing the CNI plugin (ADD, then
// CHECK; DEL on deletion) with the CNI_* environment and the network
// configuration on stdin, as a container runtime does, and starts the pod's
// sandbox: one process holding the pod's UTS and mount namespaces, with
// the pod's hostname, /etc/hosts and /etc/resolv.conf (sandbox.go).
// hostNetwork pods use the node's network namespace without CNI.
//
// Containers are processes in the sandbox's namespaces. There is no image
// store: the images the stand-in knows map to programs on the node
// (images.go: the upstream agnhost, pause, Debian's busybox, and the
// testbed's own test server for testbed/* images), and any other image
// leaves its container Waiting with the reason. It honours command, args,
// env (values, fieldRef, resourceFieldRef, ConfigMap and Secret keys,
// envFrom, the Service variables), workingDir, init containers and
// sidecars, the restart policy with a back-off, and startup, readiness and
// liveness probes (exec, HTTP, TCP); it reports pod and container status as
// a kubelet does and keeps each container's log in the CRI format.
//
// The kubelet API (server.go) serves logs, exec, attach and port-forward on
// the node's kubelet port with the kubelet's authentication and
// authorization, so that kubectl reaches them through the API server.
//
// HTTP and TCP probes run inside the pod's network namespace (against the
// pod IP there), so a pod's readiness does not depend on node-to-pod
// networking, which is the node agent's business.
package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
)

// Version is the kubelet version the stand-in reports.
const Version = "v1.36.3-testbed"

// Config configures a Kubelet.
type Config struct {
	// NodeName is the Node's name.
	NodeName string
	// Client talks to the API server with the node's credentials.
	Client kubernetes.Interface
	// NodeIPs are the node's addresses (InternalIP), primary family first.
	NodeIPs []netip.Addr
	// Labels are added to the Node.
	Labels map[string]string
	// NodeNetns is the node's network namespace (a name under /run/netns).
	// The CNI plugin and hostNetwork pods run in it.
	NodeNetns string
	// PodNetnsPrefix prefixes the names of pod network namespaces.
	PodNetnsPrefix string
	// CNIPlugin is the plugin's argv, e.g. ["/usr/bin/nodeflow", "cni"].
	CNIPlugin []string
	// CNIConfDir is searched for a network configuration (*.conf or
	// *.conflist, first by name). Without one the kubelet generates the
	// configuration from the Node's podCIDRs, OVSDB and CNIDataDir.
	CNIConfDir string
	// WaitForCNIConf makes pods wait for a configuration in CNIConfDir
	// (written by the node agent) instead of generating one, as a real
	// kubelet keeps pods pending until the network plugin is ready: a pod
	// started on a generated configuration could take an address the
	// agent reserves.
	WaitForCNIConf bool
	// OVSDB is the node's OVSDB endpoint for the generated configuration.
	OVSDB string
	// DatapathType goes into the generated configuration ("netdev").
	DatapathType string
	// CNIDataDir is the IPAM data directory for the generated configuration.
	CNIDataDir string
	// Images are the programs the stand-in maps images to.
	Images Images
	// ResolvConf is the node's resolver configuration, which pods without
	// cluster DNS get ("" for /etc/resolv.conf).
	ResolvConf string
	// Server configures the kubelet API (logs, exec, attach,
	// port-forward); nil serves none.
	Server *ServerConfig
	// StateDir holds pod index files (pods/NAMESPACE_NAME.json) and pod logs.
	StateDir string
	// Log receives the kubelet's log.
	Log logrus.FieldLogger
	// LeaseDuration is the node Lease's duration; it is renewed every quarter
	// of it. Zero means 40 s.
	LeaseDuration time.Duration
}

// Kubelet is one node's stand-in.
type Kubelet struct {
	cfg      Config
	log      logrus.FieldLogger
	recorder record.EventRecorder

	serverState
	services corelisters.ServiceLister

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	node    *v1.Node
	nodeCh  chan struct{} // closed and replaced when node changes
	wg      sync.WaitGroup
}

// New returns a Kubelet; Run starts it.
func New(cfg Config) *Kubelet {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = logrus.StandardLogger()
	}
	return &Kubelet{
		cfg: cfg, log: cfg.Log.WithField("node", cfg.NodeName), workers: map[types.UID]*podWorker{}, nodeCh: make(chan struct{}),
		serverState: serverState{authCache: map[string]authEntry{}},
	}
}

// Run registers the node and serves its pods until ctx ends. Then it stops
// every workload and removes every pod namespace, without touching the API
// (the cluster is going away). It returns after that cleanup.
func (k *Kubelet) Run(ctx context.Context) error {
	for _, d := range []string{k.podsDir(), k.logsDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("kubelet %s: %w", k.cfg.NodeName, err)
		}
	}
	bc := record.NewBroadcaster(record.WithContext(ctx))
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: k.cfg.Client.CoreV1().Events("")})
	defer bc.Shutdown()
	k.recorder = bc.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: k.cfg.NodeName})

	if err := k.register(ctx); err != nil {
		return err
	}
	k.wg.Add(1)
	go func() { defer k.wg.Done(); k.heartbeat(ctx) }()

	nodeInf := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.cfg.NodeName).String()
		}))
	_, _ = nodeInf.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.setNode(o) },
		UpdateFunc: func(_, o any) { k.setNode(o) },
	})
	podInf := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String()
		}))
	_, _ = podInf.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.podChanged(ctx, o, false) },
		UpdateFunc: func(_, o any) { k.podChanged(ctx, o, false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			k.podChanged(ctx, o, true)
		},
	})
	// Services, for the containers' environment and the cluster DNS address.
	svcInf := informers.NewSharedInformerFactory(k.cfg.Client, 0)
	k.services = svcInf.Core().V1().Services().Lister()
	svcInf.Start(ctx.Done())
	svcInf.WaitForCacheSync(ctx.Done())
	if k.cfg.Server != nil {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			if err := k.serve(ctx); err != nil {
				k.log.WithError(err).Error("kubelet API stopped")
			}
		}()
	}
	nodeInf.Start(ctx.Done())
	podInf.Start(ctx.Done())
	k.log.Info("kubelet running")
	<-ctx.Done()
	nodeInf.Shutdown()
	podInf.Shutdown()
	svcInf.Shutdown()
	k.wg.Wait()
	k.log.Info("kubelet stopped")
	return nil
}

func (k *Kubelet) podsDir() string { return filepath.Join(k.cfg.StateDir, "pods") }
func (k *Kubelet) logsDir() string { return filepath.Join(k.cfg.StateDir, "podlogs") }

func (k *Kubelet) setNode(o any) {
	n, ok := o.(*v1.Node)
	if !ok {
		return
	}
	k.mu.Lock()
	k.node = n
	close(k.nodeCh)
	k.nodeCh = make(chan struct{})
	k.mu.Unlock()
}

// waitPodCIDRs returns the node once it has podCIDRs.
func (k *Kubelet) waitPodCIDRs(ctx context.Context) (*v1.Node, error) {
	for {
		k.mu.Lock()
		n, ch := k.node, k.nodeCh
		k.mu.Unlock()
		if n != nil && len(n.Spec.PodCIDRs) > 0 {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

func (k *Kubelet) podChanged(ctx context.Context, o any, gone bool) {
	pod, ok := o.(*v1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.workers[pod.UID]
	if w == nil {
		if gone {
			return
		}
		w = newPodWorker(k, pod)
		k.workers[pod.UID] = w
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			w.run(ctx)
			k.mu.Lock()
			delete(k.workers, pod.UID)
			k.mu.Unlock()
		}()
	}
	w.update(pod, gone)
}

// register creates or updates the Node and sets its status.
func (k *Kubelet) register(ctx context.Context) error {
	labels := map[string]string{
		"kubernetes.io/hostname": k.cfg.NodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
	}
	for key, v := range k.cfg.Labels {
		labels[key] = v
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Labels: labels}}
	var err error
	for attempt := 0; ; attempt++ {
		_, err = k.cfg.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		if attempt > 50 || ctx.Err() != nil {
			return fmt.Errorf("kubelet %s: register node: %w", k.cfg.NodeName, err)
		}
		k.log.WithError(err).Warn("register node: retrying")
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := k.updateNodeStatus(ctx); err != nil {
		return err
	}
	k.log.Info("node registered")
	return nil
}

func (k *Kubelet) nodeStatus() v1.NodeStatus {
	now := metav1.Now()
	res := v1.ResourceList{
		v1.ResourceCPU:              resource.MustParse("4"),
		v1.ResourceMemory:           resource.MustParse("8Gi"),
		v1.ResourcePods:             resource.MustParse("110"),
		v1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
	}
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	st := v1.NodeStatus{
		Capacity:    res,
		Allocatable: res,
		Phase:       v1.NodeRunning,
		Conditions: []v1.NodeCondition{
			cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "testbed kubelet stand-in is posting ready status"),
		},
		NodeInfo: v1.NodeSystemInfo{
			MachineID:               k.cfg.NodeName,
			KernelVersion:           kernelVersion(),
			OSImage:                 "nodeflow testbed",
			ContainerRuntimeVersion: "testbed://" + Version,
			KubeletVersion:          Version,
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
		},
	}
	for _, ip := range k.cfg.NodeIPs {
		st.Addresses = append(st.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
	}
	st.Addresses = append(st.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: k.cfg.NodeName})
	if k.cfg.Server != nil {
		st.DaemonEndpoints.KubeletEndpoint.Port = int32(k.port())
	}
	return st
}

func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return string(trimNL(b))
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

func (k *Kubelet) updateNodeStatus(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		n, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err == nil {
			n.Status = k.nodeStatus()
			_, err = k.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		}
		if err == nil {
			return nil
		}
		if attempt > 20 || ctx.Err() != nil {
			return fmt.Errorf("kubelet %s: update node status: %w", k.cfg.NodeName, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// heartbeat renews the node Lease, and the node status once a minute.
func (k *Kubelet) heartbeat(ctx context.Context) {
	leases := k.cfg.Client.CoordinationV1().Leases("kube-node-lease")
	renew := k.cfg.LeaseDuration / 4
	lastStatus := time.Now()
	for {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			owner := []metav1.OwnerReference{}
			if n, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{}); err == nil {
				owner = append(owner, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID})
			}
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Namespace: "kube-node-lease", OwnerReferences: owner},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(k.cfg.NodeName),
					LeaseDurationSeconds: ptr.To(int32(k.cfg.LeaseDuration / time.Second)),
					RenewTime:            &now,
				},
			}, metav1.CreateOptions{})
		case err == nil:
			l.Spec.RenewTime = &now
			l.Spec.HolderIdentity = ptr.To(k.cfg.NodeName)
			l.Spec.LeaseDurationSeconds = ptr.To(int32(k.cfg.LeaseDuration / time.Second))
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			k.log.WithError(err).Warn("renew lease")
		}
		if time.Since(lastStatus) > time.Minute {
			if err := k.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
				k.log.WithError(err).Warn("update node status")
			}
			lastStatus = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(renew):
		}
	}
}
