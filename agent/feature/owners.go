package feature

import (
	"fmt"
	"slices"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
)

// OwnerStore is the part of a reconcile.Store a feature writes through.
type OwnerStore interface {
	Set(owner string, st reconcile.State) error
	Owners(prefix string) []string
	Contested(owner string, st reconcile.State) []reconcile.Contest
}

// Restrict returns an Owners handle on store that accepts only owners of
// the plan features in allowed: a feature cannot write another feature's
// owners, even by mistake.
func Restrict(store OwnerStore, feature string, allowed []plan.Feature) Owners {
	return &restricted{store: store, feature: feature, allowed: slices.Clone(allowed)}
}

type restricted struct {
	store   OwnerStore
	feature string
	allowed []plan.Feature
}

func (r *restricted) Set(owner string, st reconcile.State) error {
	f, err := plan.OwnerFeature(owner)
	if err != nil {
		return fmt.Errorf("feature %s: %w", r.feature, err)
	}
	if !slices.Contains(r.allowed, f) {
		return fmt.Errorf("feature %s: owner %s belongs to plan feature %s, which %s does not own", r.feature, owner, f, r.feature)
	}
	return r.store.Set(owner, st)
}

func (r *restricted) List(prefix string) []string { return r.store.Owners(prefix) }

func (r *restricted) Contested(owner string, st reconcile.State) []reconcile.Contest {
	return r.store.Contested(owner, st)
}
