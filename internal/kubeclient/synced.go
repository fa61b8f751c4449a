package kubeclient

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// syncedPoll is how often WaitSynced checks.
const syncedPoll = 5 * time.Millisecond

// WaitSynced waits until every synced reports true, as
// cache.WaitForCacheSync does, but checks every few milliseconds rather
// than every 100: a start-up waits on it. Give it the registrations'
// HasSynced (cache.ResourceEventHandlerRegistration) where state is built
// by event handlers: an informer's own HasSynced says that its cache has
// listed everything, not that its handlers have seen it. It returns false
// when ctx ends first.
func WaitSynced(ctx context.Context, synced ...cache.InformerSynced) bool {
	err := wait.PollUntilContextCancel(ctx, syncedPoll, true, func(context.Context) (bool, error) {
		for _, s := range synced {
			if !s() {
				return false, nil
			}
		}
		return true, nil
	})
	return err == nil
}
