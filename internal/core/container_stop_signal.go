package core

import (
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stop signals (the kubelet's ContainerStopSignals): the kubelet sends a container's
// lifecycle.stopSignal at create. Docker keeps it as Config.StopSignal (the image's STOPSIGNAL
// when none is given, merged in at create) and sends it on every stop, StopContainer's
// included; with neither, it sends SIGTERM.

// dockerStopSignal is Docker's name for a CRI stop signal: "" for the runtime's default.
// The CRI's SIGRTMINPLUS1 and SIGRTMAXMINUS1 are Docker's SIGRTMIN+1 and SIGRTMAX-1.
func dockerStopSignal(sig runtimeapi.Signal) (string, error) {
	if sig == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return "", nil
	}
	name, ok := runtimeapi.Signal_name[int32(sig)]
	if !ok {
		return "", invalidf("container config: unknown stop_signal %d", sig)
	}
	name = strings.TrimPrefix(name, "SIGNAL_")
	name = strings.Replace(name, "RTMINPLUS", "RTMIN+", 1)
	return strings.Replace(name, "RTMAXMINUS", "RTMAX-", 1), nil
}

// criStopSignal is the CRI's name for the stop signal Docker holds for a container (a name
// with or without SIG, or a number): SIGTERM, Docker's default, for none; the runtime default
// for a signal the CRI has no name for.
func criStopSignal(docker string) runtimeapi.Signal {
	if docker == "" {
		return runtimeapi.Signal_SIGNAL_SIGTERM
	}
	name := strings.ToUpper(docker)
	if n, err := strconv.Atoi(docker); err == nil {
		name = signalName(n)
	}
	name = "SIG" + strings.TrimPrefix(name, "SIG")
	name = strings.Replace(name, "RTMIN+", "RTMINPLUS", 1)
	name = strings.Replace(name, "RTMAX-", "RTMAXMINUS", 1)
	return runtimeapi.Signal(runtimeapi.Signal_value["SIGNAL_"+name])
}

// Docker's (and glibc's) real-time signals: SIGRTMIN is 34 and SIGRTMAX 64 for containers,
// named RTMIN+1..RTMIN+15 and RTMAX-14..RTMAX-1 between.
const (
	sigRTMin = 34
	sigRTMax = 64
)

// signalName is Linux's name for signal n, as Docker names it ("" for none).
func signalName(n int) string {
	switch {
	case n == sigRTMin:
		return "SIGRTMIN"
	case n > sigRTMin && n <= sigRTMin+15:
		return "SIGRTMIN+" + strconv.Itoa(n-sigRTMin)
	case n > sigRTMin+15 && n < sigRTMax:
		return "SIGRTMAX-" + strconv.Itoa(sigRTMax-n)
	case n == sigRTMax:
		return "SIGRTMAX"
	}
	return unix.SignalName(syscall.Signal(n))
}
