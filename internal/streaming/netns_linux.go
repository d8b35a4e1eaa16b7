//go:build linux

package streaming

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/cri-dockerd/cri-dockerd/internal/netns"
)

// openNetNS opens the network namespace of process pid.
func openNetNS(pid int) (*os.File, error) {
	return os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
}

// dialInNetNS connects to port on the loopback of network namespace ns. net.Dialer creates and
// connects the socket on the calling goroutine, so inside netns.Do the socket is the pod's;
// the connection keeps working from any thread afterwards.
func dialInNetNS(ctx context.Context, ns *os.File, port int32) (conn net.Conn, err error) {
	if nsErr := netns.Do(ns, func() { conn, err = dialLoopback(ctx, port) }); nsErr != nil {
		return nil, nsErr
	}
	return conn, err
}
