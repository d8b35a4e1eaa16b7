package core

// TrackedLabel is the Docker label that every sandbox and container of ours carries (its value
// is the kind): the container store (package store) tracks the containers that have it.
const TrackedLabel = containerTypeLabel
