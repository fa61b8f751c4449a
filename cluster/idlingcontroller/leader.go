package idlingcontroller

import (
	"context"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"

	"nodeflow/cluster/leader"
)

// DefaultLeaseName is the name of the unidler's leader Lease.
const DefaultLeaseName = "nodeflow-unidler"

// ErrLostLeadership is returned by RunLeader when the Lease is lost before
// ctx ends: the process should exit and start again as a candidate.
var ErrLostLeadership = leader.ErrLost

// Election configures RunLeader: the Lease (Name defaults to
// DefaultLeaseName), this replica's identity, and the timings.
type Election = leader.Election

// RunLeader runs run while this replica holds the Lease (leader.Run). It
// returns nil when ctx ends, or ErrLostLeadership when the Lease was lost.
func RunLeader(ctx context.Context, client kubernetes.Interface, e Election, log logrus.FieldLogger, run func(ctx context.Context)) error {
	if e.Name == "" {
		e.Name = DefaultLeaseName
	}
	return leader.Run(ctx, client, e, log, run)
}
