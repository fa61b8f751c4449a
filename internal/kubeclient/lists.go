package kubeclient

import (
	"os"

	clientfeatures "k8s.io/client-go/features"
)

// WatchListEnv is client-go's own switch for streaming lists: set to true,
// it gives them back to the process that ListsFirst turned them off in.
const WatchListEnv = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

// ListsFirst makes every informer of the process start with one list, read
// from the API server's cache, and then watch: client-go's behaviour before
// it streamed the initial state as watch events (WatchListClient, on by
// default since Kubernetes 1.35). Setting WatchListEnv in the environment
// still decides either way.
//
// A node agent starts by reading every Service and EndpointSlice of the
// cluster, and its start-up waits for them. At 10,000 Services, the
// agent's cold start with the stream of 20,000 single events took a third
// longer than with the two lists (3.29 s against 2.48 s in one run), for
// about the same CPU: the wait is the work per event, in the API server
// and in the client, on the same two cores. A list holds every object
// whole until the informer has trimmed them, which costs a few MiB more at
// the start-up's peak (docs/benchmarks.md, "Lists, not streams").
//
// Call it first in main, before any client is made: client-go reads the
// setting when an informer is created.
func ListsFirst() {
	clientfeatures.ReplaceFeatureGates(listsFirst{clientfeatures.FeatureGates()})
}

// listsFirst is client-go's feature gates with WatchListClient off unless
// the environment sets it.
type listsFirst struct{ clientfeatures.Gates }

// Enabled implements clientfeatures.Gates.
func (g listsFirst) Enabled(f clientfeatures.Feature) bool {
	if f == clientfeatures.WatchListClient {
		if _, set := os.LookupEnv(WatchListEnv); !set {
			return false
		}
	}
	return g.Gates.Enabled(f)
}
