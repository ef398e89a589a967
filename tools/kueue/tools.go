//go:build tools

// Package tools records the Kueue command built from sigs.k8s.io/kueue so `go mod tidy` keeps it.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
