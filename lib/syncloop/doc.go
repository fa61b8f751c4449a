// Package syncloop is the sync loop of the agent's features: one goroutine
// that turns bursts of change notifications into few, bounded passes of a
// sync function, retries what failed, and now and then does everything
// again.
//
// Two loops share one scheduler:
//
//   - Runner calls a SyncFunc(ctx, full) when asked. It is for a feature
//     that recomputes its state as a whole (the service proxy), where a
//     failed pass is followed by a full one.
//   - Keyed[K] keeps a set of dirty keys and calls a KeyedFunc with the keys
//     marked since the last pass. The function returns the keys it could
//     not sync; those alone are retried. It is for a feature whose state is
//     a set of independent parts (one per namespace, pod or object).
//
// What a feature gets from either loop:
//
//   - Merged wake-ups: Run, Mark and MarkAll never block; requests made
//     while a pass is waiting or running merge into the next one, so a burst
//     of changes costs one pass.
//   - A minimum interval (MinInterval) between the starts of two passes.
//   - A periodic full pass (MaxInterval), when set: full is true and the
//     function redoes everything it owns.
//   - Retries: Runner retries a failed pass after RetryInterval, as a full
//     pass. Keyed retries each failed key after its own back-off (client-go's
//     per-item exponential rate limiter, from RetryInterval doubling up to
//     MaxRetryInterval; fixed at RetryInterval by default). A key marked
//     again, or riding along another pass, is retried at once; a key that
//     succeeds forgets its back-off. Once no key has failed, no retry stays
//     armed.
//
// Time comes from a k8s.io/utils/clock Clock, so tests drive the loops
// with a fake clock along a timeline. The package knows nothing of
// Kubernetes objects or of the features that use it.
package syncloop
