//go:build tools

// Package tools records the upstream programs this module builds, so that
// go.mod and go.sum pin everything they need.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/regression-issue-74839"
)
