package metrics

import (
	"net/http"
	"strconv"
	"strings"
)

// verbs are the writes CountWriteErrors counts, by HTTP method.
var verbs = map[string]string{
	http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete",
}

// CountWriteErrors wraps a client's transport (rest.Config.Wrap) so that
// every failed write to the API server counts in api_write_errors_total,
// whichever client or controller made it.
func CountWriteErrors(rt http.RoundTripper) http.RoundTripper {
	return writeErrors{rt}
}

type writeErrors struct{ next http.RoundTripper }

func (w writeErrors) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	verb, write := verbs[req.Method]
	switch {
	case !write:
	case err != nil:
		APIWriteErrors.WithLabelValues(Resource(req.URL.Path), verb, "0").Inc()
	case resp.StatusCode >= 400:
		APIWriteErrors.WithLabelValues(Resource(req.URL.Path), verb, strconv.Itoa(resp.StatusCode)).Inc()
	}
	return resp, err
}

// Resource names the resource of an API path, with its subresource:
// /apis/trainyard.dev/v1alpha1/namespaces/a/dispatches/d/status is
// "dispatches/status", /api/v1/namespaces/a/events is "events".
func Resource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	// Below a namespace, unless the path is the Namespace's own.
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "other"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}
