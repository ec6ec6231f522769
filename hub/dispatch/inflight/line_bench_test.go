package inflight

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkWakeUp is one wake-up (a Dispatch ending, a heartbeat with more
// free GPUs) with 10,000 jobs waiting and room for one: its cost must not
// grow with the line beyond reading it.
func BenchmarkWakeUp(b *testing.B) {
	f := New(time.Now)
	f.now = func() time.Time { return t0 }
	f.mu.Lock()
	for i := range 10000 {
		f.waitLocked(types.NamespacedName{Namespace: fmt.Sprint("team-", i%20), Name: fmt.Sprint("wl-", i)},
			waiter{gpus: 1, flavors: []string{"h100"}, priority: int32(i % 3), since: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	f.mu.Unlock()
	target := spokeTarget("gpu-a", "h100").Available().FreeGPUs(1).Obj()
	f.RecordTarget(target)
	b.ResetTimer()
	for range b.N {
		f.mu.Lock()
		if len(f.wakeForLocked("gpu-a")) != 1 {
			b.Fatal("woke other than one")
		}
		f.mu.Unlock()
	}
}
