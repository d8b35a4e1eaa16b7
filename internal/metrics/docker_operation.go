package metrics

import (
	"net/http"
	"strings"
	"time"
)

// DockerTransport wraps the Docker client's HTTP transport and reports each Engine API call
// to observe, labelled by method and path pattern ("GET /containers/{id}/json"), so that IDs
// and image names do not explode the label set.
func DockerTransport(next http.RoundTripper, observe func(operation string, d time.Duration, failed bool)) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		observe(Operation(req.Method, req.URL.Path), time.Since(start), err != nil || resp.StatusCode >= 400)
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Operation names an Engine API call by its method and path pattern.
func Operation(method, path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// Drop the API version prefix: /v1.41/containers/json.
	if len(parts) > 0 && strings.HasPrefix(parts[0], "v1.") {
		parts = parts[1:]
	}
	if len(parts) >= 2 {
		switch parts[0] {
		case "containers", "exec":
			if parts[1] != "json" && parts[1] != "create" && parts[1] != "prune" {
				parts[1] = "{id}"
			}
		case "images":
			// Image names hold slashes: keep the first segment and the action, if any.
			switch last := parts[len(parts)-1]; {
			case parts[1] == "json" || parts[1] == "create" || parts[1] == "prune" || parts[1] == "load" || parts[1] == "search":
			case last == "json" || last == "history" || last == "push" || last == "tag" || last == "get":
				parts = []string{"images", "{name}", last}
			default:
				parts = []string{"images", "{name}"}
			}
		}
	}
	return method + " /" + strings.Join(parts, "/")
}
