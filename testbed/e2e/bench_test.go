package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
)

// upGoal is the goal for `testbed up` to the first pod Ready.
const upGoal = 30 * time.Second

// BenchmarkUpToFirstPodReady measures, with the control-plane binaries
// cached, the time from `testbed up` (default topology) to the first pod of
// a one-replica Deployment being Ready. The testbed is taken down after each
// iteration, outside the timing. It reports seconds per bring-up and the
// ratio to the 30 s goal (below 1 is better).
func BenchmarkUpToFirstPodReady(b *testing.B) {
	requirePrereqs(b)
	bins := binaries(b)
	name := fmt.Sprintf("bench%d", os.Getpid()%10000)
	top := writeTopology(b, name)
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		st, err := testbed.Up(testbed.UpOptions{
			TopologyFile: top,
			Nodeflow:     filepath.Join(bins, "nodeflow"),
			Self:         filepath.Join(bins, "testbed"),
		})
		if err != nil {
			if st != nil {
				_, _ = testbed.Down(st.Dir, false)
			}
			b.Fatal(err)
		}
		upTook := time.Since(start)
		err = firstPodReady(st)
		took := time.Since(start)
		b.StopTimer()
		if _, derr := testbed.Down(st.Dir, false); derr != nil {
			b.Error(derr)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("iteration %d: up %s, first pod Ready %s (up phases: %v)", i, upTook.Round(time.Millisecond), took.Round(time.Millisecond), st.Timings)
		total += took
		b.StartTimer()
	}
	per := total.Seconds() / float64(b.N)
	b.ReportMetric(per, "s/up-to-pod-ready")
	b.ReportMetric(per/upGoal.Seconds(), "ratio-to-30s-goal")
}

func firstPodReady(st *testbed.State) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	labels := map[string]string{"app": "first"}
	_, err = c.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "first"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "web", Image: "testbed/web"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	for {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=first"})
		if err == nil {
			for _, p := range pods.Items {
				if ready(p.Status.Conditions) {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("first pod not Ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// scenario is a benchmark that can run only once on a testbed (it leaves
// its objects behind, or takes minutes): it runs on the first call, and
// every call, whatever b.N, reports its figures.
type scenario struct {
	once sync.Once
	res  map[string]float64
}

// report runs the scenario once with the testbed's agents and reports its
// figures.
func (s *scenario) report(b *testing.B, run func(*testing.B, *env) map[string]float64) {
	e := up(b)
	if !e.state.Agent {
		b.Skipf("nodeflow agent does not run: %s", e.state.AgentReason)
	}
	s.once.Do(func() { s.res = run(b, e) })
	if s.res == nil {
		b.Fatal("the benchmark failed in an earlier call")
	}
	for _, k := range slices.Sorted(maps.Keys(s.res)) {
		b.ReportMetric(s.res[k], k)
	}
}
