package libdocker

// EventsClient is what the container event stream needs of Docker.
type EventsClient interface{}
