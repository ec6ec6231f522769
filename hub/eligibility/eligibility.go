// Package eligibility answers, before placement fits capacity, whether a
// target could ever run a job. The answer is the backend's own: the hub
// renders the job for the target with the same pure Render the agent will
// call, so what placement calls eligible is exactly what the agent accepts,
// and there is one source of truth for what each kind of target refuses.
package eligibility

import (
	"fmt"
	"strings"
	"sync"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	"github.com/trainyard-dev/trainyard/backends/lws"
	"github.com/trainyard-dev/trainyard/backends/slurm"
)

// renderNamespace stands in for the spoke namespace, which no refusal
// depends on.
const renderNamespace = "trainyard-eligibility"

// Check says why target t could never run the job d describes (d as the hub
// would write it for t, without topology); "" when it could. Errors that are
// not refusals (a bug, a decode of something the hub wrote itself) do not
// make a target ineligible: the agent then reports them.
func Check(t *v1alpha1.Target, d *v1alpha1.Dispatch) string {
	c := *d
	c.Namespace = t.Spec.Agent.Namespace
	c.Spec.TargetName = t.Name
	// The agent builds the same backend, and refuses a target For refuses.
	kind, err := backends.For(&t.Spec)
	if err != nil {
		return err.Error()
	}
	// The Target's pod policy (Pod Security level, allowed pod fields) is
	// part of the answer: the agent renders under the same one.
	kube := jobset.RenderOptions{Namespace: renderNamespace, Policy: kubework.PolicyOf(&t.Spec)}
	switch kind {
	case backends.KindJobSet:
		_, err = jobset.Render(&c, kube)
	case backends.KindLeaderWorkerSet:
		_, err = lws.Render(&c, kube)
	case backends.KindSlurm:
		_, err = slurm.Render(&c, t)
	}
	return backends.RejectionReason(err)
}

// Cache remembers answers, which depend only on the target's spec, the
// runtime and TrainJob snapshots and the admitted flavors: rendering a job
// (an MPI render makes a key pair) for every target on every pass would
// cost more than placement itself.
type Cache struct {
	mu      sync.Mutex
	answers map[string]string
	// max bounds the map; it is emptied when full, as entries are cheap to
	// recompute and most belong to jobs long placed.
	max int
}

// NewCache returns a cache of at most size answers.
func NewCache(size int) *Cache {
	return &Cache{answers: map[string]string{}, max: size}
}

// Check is Check, remembered under a key of everything the answer depends on.
func (c *Cache) Check(t *v1alpha1.Target, d *v1alpha1.Dispatch) string {
	key := cacheKey(t, d)
	c.mu.Lock()
	why, ok := c.answers[key]
	c.mu.Unlock()
	if ok {
		return why
	}
	why = Check(t, d)
	c.mu.Lock()
	if len(c.answers) >= c.max {
		clear(c.answers)
	}
	c.answers[key] = why
	c.mu.Unlock()
	return why
}

func cacheKey(t *v1alpha1.Target, d *v1alpha1.Dispatch) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%d/%s/%s/%s/%s/", t.UID, t.Generation, d.Spec.Workload.UID, d.Spec.Workload.Namespace,
		d.Spec.Runtime.Hash, d.Spec.TrainJob.UID)
	for _, ps := range d.Spec.PodSets {
		fmt.Fprintf(&b, "%s:%d:%v;", ps.Name, ps.Count, ps.Flavors)
	}
	return b.String()
}
