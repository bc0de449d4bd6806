//go:build tools

// Package tools pins the clients .ci/run builds for the front ends' tests:
// the OCI conformance suite and oras. It is not part of stead's module.
package tools

import (
	_ "github.com/opencontainers/distribution-spec/conformance"
	_ "oras.land/oras/cmd/oras"
)
