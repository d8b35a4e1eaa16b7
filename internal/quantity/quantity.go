// Package quantity parses the Kubernetes quantities that pod annotations carry (a /dev/shm size,
// a bandwidth rate). Annotations reach us unchecked by the API server, and
// resource.ParseQuantity's time grows with the square of a decimal exponent's value: one
// "1e-99999999" takes it most of a minute, per RunPodSandbox, which the kubelet retries. So the
// text is bounded before it is parsed.
package quantity

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// maxLen is longer than any size or rate written by hand ("1.5Gi", "100M", "1e9").
	maxLen = 32
	// maxExponentDigits bounds an "e" exponent to ±999, far past any int64.
	maxExponentDigits = 3
)

// Parse is resource.ParseQuantity for text no longer than 32 characters, whose decimal
// exponent, if any, has at most 3 digits.
func Parse(s string) (resource.Quantity, error) {
	if len(s) > maxLen {
		return resource.Quantity{}, fmt.Errorf("quantity of %d characters: at most %d", len(s), maxLen)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		digits := strings.TrimLeft(s[i+1:], "+-")
		if len(digits) > maxExponentDigits {
			return resource.Quantity{}, fmt.Errorf("quantity %q: an exponent of at most %d digits", s, maxExponentDigits)
		}
	}
	return resource.ParseQuantity(s)
}
