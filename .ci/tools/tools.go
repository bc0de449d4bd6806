//go:build tools

// Package tools pins the clients .ci/run builds for the front ends' tests:
// the OCI conformance suite, oras, crane and regctl. It is not part of stead's module.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/opencontainers/distribution-spec/conformance"
	_ "github.com/regclient/regclient/cmd/regctl"
	_ "oras.land/oras/cmd/oras"
)
