package libdocker

// StreamingClient is what exec, attach and port-forward need of Docker beyond Client.
type StreamingClient interface{}
