//go:build !linux

// Package netns runs code inside another network namespace (Linux only).
package netns

import (
	"errors"
	"os"
)

// Do fails: network namespaces exist on Linux only.
func Do(*os.File, func()) error {
	return errors.New("network namespaces exist on Linux only")
}
