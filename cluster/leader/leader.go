// Package leader runs a cluster controller's work while its replica holds
// a Lease (client-go's leader election), for nodeflow's controllers that
// run as Deployments of several replicas: the unidler and the virtual
// networks' IPAM controller.
package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrLost is returned by Run when the Lease is lost before ctx ends: the
// process should exit and start again as a candidate, so that nothing of
// the old term lives on into one that another replica's work interleaves
// with.
var ErrLost = errors.New("lost the leader lease")

// Election configures Run.
type Election struct {
	// Namespace and Name of the Lease (coordination.k8s.io/v1). Both
	// required.
	Namespace, Name string
	// Identity of this replica, unique among the candidates. Required.
	Identity string
	// Work names what the leader does, for its log ("leading: <Work>").
	Work string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings (defaults 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Run runs run while this replica holds the Lease. It returns nil when
// ctx ends (and releases the Lease, so that another replica takes over at
// once, after run has returned), or ErrLost when the Lease was lost.
func Run(ctx context.Context, client kubernetes.Interface, e Election, log logrus.FieldLogger, run func(ctx context.Context)) error {
	if e.Namespace == "" || e.Name == "" || e.Identity == "" {
		return errors.New("leader election needs a lease namespace, a lease name and an identity")
	}
	if e.LeaseDuration == 0 {
		e.LeaseDuration = 15 * time.Second
	}
	if e.RenewDeadline == 0 {
		e.RenewDeadline = 10 * time.Second
	}
	if e.RetryPeriod == 0 {
		e.RetryPeriod = 2 * time.Second
	}
	log = log.WithField("lease", e.Namespace+"/"+e.Name).WithField("identity", e.Identity)
	leading := "leading"
	if e.Work != "" {
		leading += ": " + e.Work
	}
	lost := false
	var running sync.WaitGroup
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
		},
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				running.Add(1)
				defer running.Done()
				log.Info(leading)
				run(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
				log.Info("not leading")
			},
			OnNewLeader: func(id string) {
				if id != e.Identity {
					log.WithField("leader", id).Info("another replica leads")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election %s/%s: %w", e.Namespace, e.Name, err)
	}
	le.Run(ctx)
	running.Wait() // run's context is done: let it finish
	if lost {
		return ErrLost
	}
	return nil
}
