package libdocker

// StatsClient is what container and pod stats need of Docker.
type StatsClient interface{}
