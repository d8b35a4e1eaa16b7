//go:build !linux

package streaming

import (
	"context"
	"errors"
	"net"
	"os"
)

var errNoNetNS = errors.New("port-forward into a pod's network namespace needs Linux")

func openNetNS(int) (*os.File, error) { return nil, errNoNetNS }

func dialInNetNS(context.Context, *os.File, int32) (net.Conn, error) { return nil, errNoNetNS }
