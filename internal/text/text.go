// Package text holds string helpers shared by the hub's controllers.
package text

// Truncate is s cut to at most n bytes, ending in "..." when cut, for
// messages written into fields of bounded length (check messages,
// conditions, LogRequest status).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
