// Package kubeclient makes the typed Kubernetes client that nodeflow's
// processes share: the built-in kinds travel as protobuf.
//
// The API server sends the built-in kinds as protobuf when asked, and the
// client decodes protobuf several times faster than JSON, with far less
// garbage. That matters most when a process starts: its informers decode
// every Service, EndpointSlice, Node and Pod of the cluster at once
// (docs/benchmarks.md, "Cold start at 10,000 Services"). Custom
// resources have no protobuf form; the dynamic clients that read them keep
// the configuration they are given.
//
// ListsFirst makes the process's informers start with one list instead of
// client-go's stream of single events, for the same reason.
package kubeclient

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Protobuf returns a copy of rc that sends protobuf and asks for it first,
// with JSON still accepted (an aggregated API may only speak JSON).
func Protobuf(rc *rest.Config) *rest.Config {
	c := rest.CopyConfig(rc)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// NewTyped returns the typed clientset for rc, speaking protobuf (see
// Protobuf). rc itself is left as it was.
func NewTyped(rc *rest.Config) (kubernetes.Interface, error) {
	kc, err := kubernetes.NewForConfig(Protobuf(rc))
	if err != nil {
		return nil, fmt.Errorf("protobuf client for %s: %w", rc.Host, err)
	}
	return kc, nil
}
