// Package supervise keeps a panic in background work from ending the daemon. The gRPC
// interceptors recover panics of RPCs, but a goroutine that panics takes the whole process
// with it, and every pod's RPCs with it. Work run here has its panic logged with the stack
// and comes back as an error, which the caller handles as any other failure (retry, resync).
package supervise

import (
	"fmt"
	"runtime/debug"

	"github.com/sirupsen/logrus"
)

// Run calls fn and returns the panic it raised, if any, as an error, after logging it with its
// stack. what names the work in the message, e.g. "stats refresh of 3f2a".
func Run(log logrus.FieldLogger, what string, fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v", what, r)
			log.WithField("stack", string(debug.Stack())).Error(err)
		}
	}()
	fn()
	return nil
}
