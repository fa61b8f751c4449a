package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"nodeflow/model/idling"
)

// TestIdle idles a Deployment-backed and a StatefulSet-backed Service
// with the built `nodeflow idle` (after a --dry-run that must change
// nothing), then runs two `nodeflow unidler` replicas and plays the agent:
// a NeedPods event on a Service (core API for one, events.k8s.io for the
// other, the second after the leader stopped) must bring its replicas back
// and remove the annotations.
func TestIdle(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-idle")
	deployPods(t, e, ns, "web", 2)
	idleStatefulSet(t, e, ns, "db", 2)
	for _, name := range []string{"web", "db"} {
		createService(t, e, ns, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"idle-test": "yes"}},
			Spec: v1.ServiceSpec{Selector: map[string]string{"app": name},
				Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}}})
		waitReadyEndpoints(t, e, ns, name, 2)
	}

	// --dry-run reports and changes nothing.
	out := runNodeflow(t, e, "", "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "--dry-run", "web", "db")
	for _, want := range []string{
		"service " + ns + "/web idled at ", "(dry run); wakes up Deployment.apps/web to 2",
		"service " + ns + "/db idled at ", "(dry run); wakes up StatefulSet.apps/db to 2",
		"Deployment " + ns + "/web scaled from 2 to 0 (dry run)", "StatefulSet " + ns + "/db scaled from 2 to 0 (dry run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	for _, name := range []string{"web", "db"} {
		if a := serviceAnnotations(t, e, ns, name); a[idling.IdledAtAnnotation] != "" || a[idling.UnidleTargetsAnnotation] != "" {
			t.Errorf("dry run annotated service %s: %v", name, a)
		}
	}
	if n, a := scalableState(t, e, ns, "Deployment", "web"); n != 2 || a[idling.PreviousScaleAnnotation] != "" {
		t.Errorf("dry run changed the Deployment: %d replicas, %v", n, a)
	}
	if n, a := scalableState(t, e, ns, "StatefulSet", "db"); n != 2 || a[idling.PreviousScaleAnnotation] != "" {
		t.Errorf("dry run changed the StatefulSet: %d replicas, %v", n, a)
	}

	// Idle both, named in a file read from stdin.
	before := time.Now().UTC().Truncate(time.Second)
	runNodeflow(t, e, "# to idle\nweb\ndb  # the database\n", "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "--resource-names-file", "-")
	after := time.Now().UTC()
	for name, want := range map[string]string{
		"web": `[{"kind":"Deployment","name":"web","group":"apps","replicas":2}]`,
		"db":  `[{"kind":"StatefulSet","name":"db","group":"apps","replicas":2}]`,
	} {
		a := serviceAnnotations(t, e, ns, name)
		if a[idling.UnidleTargetsAnnotation] != want {
			t.Errorf("service %s: targets %s, want %s", name, a[idling.UnidleTargetsAnnotation], want)
		}
		at, err := time.Parse(time.RFC3339, a[idling.IdledAtAnnotation])
		if err != nil || at.Before(before) || at.After(after) || !strings.HasSuffix(a[idling.IdledAtAnnotation], "Z") {
			t.Errorf("service %s: idled-at %q (%v), want UTC between %s and %s", name, a[idling.IdledAtAnnotation], err, before, after)
		}
	}
	for _, s := range [][2]string{{"Deployment", "web"}, {"StatefulSet", "db"}} {
		if n, a := scalableState(t, e, ns, s[0], s[1]); n != 0 || a[idling.PreviousScaleAnnotation] != "2" {
			t.Errorf("%s %s: %d replicas, annotations %v; want 0 and previous-scale 2", s[0], s[1], n, a)
		}
		waitReadyEndpoints(t, e, ns, s[1], 0)
	}

	// Two unidler replicas: one leads.
	// The unidlers run with the unidler's roles, not as admin.
	ucfg, err := clientcmd.BuildConfigFromFlags("", e.state.UnidlerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := kubernetes.NewForConfig(ucfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uc.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the unidler's identity lists Secrets: %v; want it forbidden", err)
	}
	if _, err := uc.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the unidler's identity cannot get a Service: %v", err)
	}
	a := startUnidler(t, e, "idle-a")
	b := startUnidler(t, e, "idle-b")
	leader := waitLeaseHolder(t, e, "")
	t.Logf("%s leads", leader)
	replicas := map[string]*controllerProc{"idle-a": a, "idle-b": b}

	// A malformed list and a target that no longer exists: a Warning
	// event names the problem.
	idledAt := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	for name, targets := range map[string]string{
		"broken": `[{"kind":"Deployment","name":`,
		"ghost":  `[{"kind":"Deployment","name":"ghost","group":"apps","replicas":1}]`,
	} {
		createService(t, e, ns, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{idling.IdledAtAnnotation: idledAt, idling.UnidleTargetsAnnotation: targets}},
			Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}}})
		needPodsCore(t, e, ns, name)
	}
	waitWarning(t, e, ns, "broken", "MalformedUnidleTargets",
		"service "+ns+"/broken: annotation "+idling.UnidleTargetsAnnotation+": not a JSON list")
	waitWarning(t, e, ns, "ghost", "UnidleTargetNotFound", "Deployment.apps/ghost does not exist")
	if a := serviceAnnotations(t, e, ns, "broken"); a[idling.UnidleTargetsAnnotation] != `[{"kind":"Deployment","name":` {
		t.Errorf("the malformed annotation changed: %v", a)
	}

	// The agent's event, core API: web wakes up, db stays idled.
	start := time.Now()
	needPodsCore(t, e, ns, "web")
	waitAwake(t, e, ns, "web", "Deployment")
	t.Logf("web woken up %s after its NeedPods event", time.Since(start).Round(time.Millisecond))
	if n, _ := scalableState(t, e, ns, "StatefulSet", "db"); n != 0 {
		t.Errorf("db woken up (%d replicas) without an event", n)
	}
	if v := unidlerMetric(t, replicas[leader].metrics, "nodeflow_unidler_unidled_total"); v != 1 {
		t.Errorf("leader's unidled_total %v, want 1", v)
	}

	// The leader stops; the other takes over and answers an event written
	// through events.k8s.io.
	replicas[leader].stop(t)
	other := waitLeaseHolder(t, e, leader)
	start = time.Now()
	needPodsEventsAPI(t, e, ns, "db")
	waitAwake(t, e, ns, "db", "StatefulSet")
	t.Logf("%s took over; db woken up %s after its NeedPods event", other, time.Since(start).Round(time.Millisecond))
	if v := unidlerMetric(t, replicas[other].metrics, "nodeflow_unidler_unidled_total"); v != 1 {
		t.Errorf("%s's unidled_total %v, want 1", other, v)
	}
	if v := unidlerMetric(t, replicas[other].metrics, "nodeflow_unidler_leader"); v != 1 {
		t.Errorf("%s's leader gauge %v", other, v)
	}
	replicas[other].stop(t)
}

// idleStatefulSet creates a StatefulSet of the web image and waits for
// its pods to run.
func idleStatefulSet(t *testing.T, e *env, ns, name string, n int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(n), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(2)),
					Containers: []v1.Container{{Name: "web", Image: "testbed/web", Ports: []v1.ContainerPort{{ContainerPort: 8080}}}}},
			},
		},
	}
	if _, err := e.client.AppsV1().StatefulSets(ns).Create(context.Background(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, fmt.Sprintf("%d %s pods ready", n, name), func(ctx context.Context) error {
		list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return err
		}
		readyPods := 0
		for _, p := range list.Items {
			if ready(p.Status.Conditions) && p.DeletionTimestamp == nil {
				readyPods++
			}
		}
		if readyPods != int(n) {
			return fmt.Errorf("%d of %d ready", readyPods, n)
		}
		return nil
	})
}

// waitReadyEndpoints waits until the Service's EndpointSlices hold n ready
// endpoints.
func waitReadyEndpoints(t testing.TB, e *env, ns, svc string, n int) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("%d ready endpoints of %s", n, svc), func(ctx context.Context) error {
		list, err := e.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return err
		}
		got := 0
		for _, es := range list.Items {
			for _, ep := range es.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					got++
				}
			}
		}
		if got != n {
			return fmt.Errorf("%d ready", got)
		}
		return nil
	})
}

func serviceAnnotations(t *testing.T, e *env, ns, name string) map[string]string {
	t.Helper()
	s, err := e.client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Annotations
}

// scalableState reads a Deployment's or StatefulSet's replicas and
// annotations.
func scalableState(t *testing.T, e *env, ns, kind, name string) (int32, map[string]string) {
	t.Helper()
	n, a, err := scalableStateErr(e, ns, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	return n, a
}

func scalableStateErr(e *env, ns, kind, name string) (int32, map[string]string, error) {
	ctx := context.Background()
	if kind == "Deployment" {
		d, err := e.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, nil, err
		}
		return *d.Spec.Replicas, d.Annotations, nil
	}
	s, err := e.client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, nil, err
	}
	return *s.Spec.Replicas, s.Annotations, nil
}

// runNodeflow runs the built nodeflow with stdin and returns its output;
// it fails the test when the command fails.
func runNodeflow(t testing.TB, e *env, stdin string, args ...string) string {
	t.Helper()
	out, err := runNodeflowErr(e, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("nodeflow %s:\n%s", args[0], out)
	return out
}

// runNodeflowErr runs the built nodeflow with stdin and returns its output,
// or an error with the output when the command fails.
func runNodeflowErr(e *env, stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(e.binDir, "nodeflow"), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("nodeflow %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// controllerProc is a running cluster controller: `nodeflow unidler` or
// `nodeflow ipam`.
type controllerProc struct {
	cmd     *exec.Cmd
	metrics string // URL of its /metrics
	log     string
	exited  chan struct{}
}

// unidlerLeaseNamespace is where the testbed's unidlers elect their
// leader, as deploy/rbac/unidler.yaml lets them.
const unidlerLeaseNamespace = "nodeflow"

// startUnidler runs `nodeflow unidler` as replica id, with the unidler's
// roles (the testbed's unidler kubeconfig), until the test ends.
func startUnidler(t testing.TB, e *env, id string) *controllerProc {
	t.Helper()
	return startController(t, e, "unidler", e.state.UnidlerKubeconfig, id, "--lease-namespace", unidlerLeaseNamespace)
}

// startController runs `nodeflow <command>` as replica id with the
// kubeconfig given (a ServiceAccount's of deploy/rbac) and args, until the
// test ends, and waits until it serves /metrics.
func startController(t testing.TB, e *env, command, kubeconfig, id string, args ...string) *controllerProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logPath := filepath.Join(t.TempDir(), id+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if kubeconfig == "" {
		t.Fatalf("the testbed has no kubeconfig for nodeflow %s", command)
	}
	argv := append([]string{"--log-level", "debug", command, "--kubeconfig", kubeconfig, "--metrics-addr", addr, "--identity", id}, args...)
	cmd := exec.Command(filepath.Join(e.binDir, "nodeflow"), argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &controllerProc{cmd: cmd, metrics: "http://" + addr + "/metrics", log: logPath, exited: make(chan struct{})}
	keepRunning(cmd, func() { logf.Close(); close(p.exited) })
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s's log:\n%s", id, b)
		}
	})
	eventually(t, 10*time.Second, id+" serves /metrics", func(ctx context.Context) error {
		_, err := fetchMetrics(ctx, p.metrics)
		return err
	})
	return p
}

// stop ends the controller with SIGTERM and waits for it to exit.
func (p *controllerProc) stop(t testing.TB) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("%s %d did not stop on SIGTERM", p.cmd.Args[3], p.cmd.Process.Pid)
	}
}

// kill ends the controller with SIGKILL, as a crash would, and waits for
// it to exit.
func (p *controllerProc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d did not exit on SIGKILL", p.cmd.Process.Pid)
	}
}

// waitLeaseHolder waits until the unidler's Lease is held by a replica
// other than not, and returns it.
func waitLeaseHolder(t *testing.T, e *env, not string) string {
	t.Helper()
	var holder string
	eventually(t, 30*time.Second, "a leader other than "+not, func(ctx context.Context) error {
		l, err := e.client.CoordinationV1().Leases(unidlerLeaseNamespace).Get(ctx, "nodeflow-unidler", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == not {
			return fmt.Errorf("held by %v", ptr.Deref(l.Spec.HolderIdentity, ""))
		}
		holder = *l.Spec.HolderIdentity
		return nil
	})
	return holder
}

// needPodsCore writes a NeedPods event as the agent does (core API).
func needPodsCore(t *testing.T, e *env, ns, svc string) {
	t.Helper()
	ctx := context.Background()
	s, err := e.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	ev := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x", svc, time.Now().UnixNano())},
		InvolvedObject: v1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: svc, UID: s.UID, ResourceVersion: s.ResourceVersion},
		Reason:         idling.NeedPodsReason,
		Message:        fmt.Sprintf("The service-port %s/%s:http needs pods.", ns, svc),
		Type:           v1.EventTypeNormal, Source: v1.EventSource{Component: "nodeflow", Host: "node1"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := e.client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// needPodsEventsAPI writes a NeedPods event through events.k8s.io/v1.
func needPodsEventsAPI(t *testing.T, e *env, ns, svc string) {
	t.Helper()
	ctx := context.Background()
	s, err := e.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x", svc, time.Now().UnixNano())},
		EventTime:  metav1.NowMicro(), ReportingController: "nodeflow.io/agent", ReportingInstance: "node1", Action: "Unidle",
		Regarding: v1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: svc, UID: s.UID},
		Reason:    idling.NeedPodsReason, Note: fmt.Sprintf("The service-port %s/%s:http needs pods.", ns, svc), Type: v1.EventTypeNormal,
	}
	if _, err := e.client.EventsV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAwake waits until the Service's scalable is back at 2 replicas
// without its idling annotations, and the Service without its own.
func waitAwake(t *testing.T, e *env, ns, svc, kind string) {
	t.Helper()
	eventually(t, 90*time.Second, svc+" woken up", func(ctx context.Context) error {
		n, a, err := scalableStateErr(e, ns, kind, svc)
		if err != nil {
			return err
		}
		if n != 2 || a[idling.PreviousScaleAnnotation] != "" || a[idling.IdledAtAnnotation] != "" {
			return fmt.Errorf("%s at %d replicas, annotations %v", kind, n, a)
		}
		s, err := e.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := s.Annotations[idling.IdledAtAnnotation]; ok {
			return fmt.Errorf("service still annotated: %v", s.Annotations)
		}
		if _, ok := s.Annotations[idling.UnidleTargetsAnnotation]; ok {
			return fmt.Errorf("service still annotated: %v", s.Annotations)
		}
		return nil
	})
	// The annotations went once an endpoint was ready.
	waitReadyEndpoints(t, e, ns, svc, 2)
}

// waitWarning waits for the unidler's Warning event on a Service.
func waitWarning(t *testing.T, e *env, ns, svc, reason, text string) {
	t.Helper()
	eventually(t, 30*time.Second, reason+" on "+svc, func(ctx context.Context) error {
		evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.name=" + svc})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Type == v1.EventTypeWarning && ev.Source.Component == "nodeflow-unidler" && ev.InvolvedObject.Kind == "Service" && strings.Contains(ev.Message, text) {
				return nil
			}
		}
		return fmt.Errorf("%d %s events, none from nodeflow-unidler with %q", len(evs.Items), reason, text)
	})
}

func fetchMetrics(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), err
}

// unidlerMetric reads one series of a /metrics URL (-1 when missing).
func unidlerMetric(t *testing.T, url, series string) float64 {
	t.Helper()
	text, err := fetchMetrics(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return seriesValue(text, series)
}
