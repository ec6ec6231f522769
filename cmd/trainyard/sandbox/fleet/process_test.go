package fleet

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePortAvoidsTheEphemeralRange: ports are below the range the kernel
// hands to client connections, never the same twice, and free to bind.
func TestFreePortAvoidsTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 100 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port >= low || port <= 1024 {
			t.Fatalf("port %d is not between 1024 and the ephemeral range's start %d", port, low)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("port %d cannot be bound: %v", port, err)
		}
		l.Close()
	}
}
