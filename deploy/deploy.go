// Package deploy holds nodeflow's Kubernetes manifests, embedded so that
// the testbed applies the manifests of the tree it was built from.
package deploy

import "embed"

// CRDs holds crds/*.yaml: the CustomResourceDefinitions nodeflow needs.
//
//go:embed crds/*.yaml
var CRDs embed.FS

// Manifests holds the namespace, the RBAC of nodeflow's processes and the
// admission policy of the addresses Services claim (namespace.yaml,
// rbac/*.yaml, service-address-policy.yaml), applied after the CRDs.
//
//go:embed namespace.yaml rbac/*.yaml service-address-policy.yaml
var Manifests embed.FS

// All holds every manifest: what `kubectl apply -k deploy/` applies.
//
//go:embed crds/*.yaml namespace.yaml rbac/*.yaml service-address-policy.yaml agent.yaml ipam.yaml unidler.yaml kustomization.yaml
var All embed.FS
