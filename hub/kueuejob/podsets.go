package kueuejob

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// podSetCache keeps the pod sets of each pinned TrainJob at one
// generation. Kueue's job reconciler asks for them on every pass over a job
// (to compare them with its Workload's), and Kueue's TrainJob computes them
// anew each time: Trainer's runtime framework, then a dry-run Workload
// create on the hub's API server for the defaults (9 dry runs a job in
// `make bench BENCH=Fill`). They depend only on the job's spec (its
// generation) and its pinned copy, which never changes once written, so
// they are computed once per generation of a job.
//
// It holds at most max jobs, the oldest put first out: a job's passes come
// close together (admission, start, finish), so a small cache catches them.
type podSetCache struct {
	mu    sync.Mutex
	max   int
	byJob map[types.UID]podSetEntry
	order []types.UID
}

// podSetCacheSize bounds the cache; a job's pod sets are a few KiB.
const podSetCacheSize = 2048

type podSetEntry struct {
	generation int64
	pin        string
	podSets    []kueue.PodSet
}

func newPodSetCache(max int) *podSetCache {
	return &podSetCache{max: max, byJob: map[types.UID]podSetEntry{}}
}

// get returns a copy of the pod sets cached for the job uid at generation
// under the pinned copy pin. A nil cache has none.
func (c *podSetCache) get(uid types.UID, generation int64, pin string) ([]kueue.PodSet, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byJob[uid]
	if !ok || e.generation != generation || e.pin != pin {
		return nil, false
	}
	return copyPodSets(e.podSets), true
}

// put caches a copy of podSets for the job uid at generation under pin.
func (c *podSetCache) put(uid types.UID, generation int64, pin string, podSets []kueue.PodSet) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byJob[uid]; !ok {
		c.order = append(c.order, uid)
	}
	c.byJob[uid] = podSetEntry{generation: generation, pin: pin, podSets: copyPodSets(podSets)}
	for len(c.order) > c.max {
		delete(c.byJob, c.order[0])
		c.order = c.order[1:]
	}
}

func copyPodSets(in []kueue.PodSet) []kueue.PodSet {
	out := make([]kueue.PodSet, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
