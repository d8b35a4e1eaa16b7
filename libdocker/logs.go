package libdocker

// LogClient is what container logs need of Docker.
type LogClient interface{}
