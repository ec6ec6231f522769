package partition

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// samples is what sampleOneAttempt saw: the first violation, and for each
// attempt of a job the first and last sample that found its pods, and
// that found them Terminating (deleted, their processes still stopping).
type samples struct {
	mu                sync.Mutex
	violation         string
	n                 int
	pods, terminating map[attemptOf]span
}

type attemptOf struct {
	job     string
	attempt string
}

// span is the first and last sample that saw something.
type span struct{ first, last time.Time }

func (s span) String() string {
	return "[" + s.first.Format(time.StampMilli) + ", " + s.last.Format(time.StampMilli) + "]"
}

func (s *samples) podsOf(tj *trainer.TrainJob, attempt int32) span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[attemptOf{tj.Name, fmt.Sprint(attempt)}]
}

func (s *samples) terminatingOf(tj *trainer.TrainJob, attempt int32) span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.terminating[attemptOf{tj.Name, fmt.Sprint(attempt)}]
}

func (s *samples) record(now time.Time, tj *trainer.TrainJob, violation string, pods, terminating []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if violation != "" && s.violation == "" {
		s.violation = violation
	}
	see := func(m map[attemptOf]span, attempts []string) {
		for _, a := range attempts {
			k := attemptOf{tj.Name, a}
			sp, ok := m[k]
			if !ok {
				sp.first = now
			}
			sp.last = now
			m[k] = sp
		}
	}
	see(s.pods, pods)
	see(s.terminating, terminating)
}

// sampleOneAttempt checks, every 100 ms until the returned func is called,
// that no job has pods of two attempts on the spokes at once (Terminating
// pods count: a process stopping after SIGTERM, as one that checkpoints,
// still runs), more than one JobSet, or more than one live Dispatch. The
// func (or the test's end, whichever is first) fails the test with the
// first violation; the func returns what the samples saw.
func sampleOneAttempt(t *testing.T, jobs []*trainer.TrainJob) func() *samples {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	seen := &samples{pods: map[attemptOf]span{}, terminating: map[attemptOf]span{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, tj := range jobs {
				now := time.Now()
				msg, pods, terminating := oneAttempt(ctx, tj)
				seen.record(now, tj, msg, pods, terminating)
			}
			seen.mu.Lock()
			seen.n++
			seen.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			seen.mu.Lock()
			defer seen.mu.Unlock()
			if seen.violation != "" {
				t.Errorf("two attempts at once: %s", seen.violation)
				return
			}
			t.Logf("%d samples of %d jobs, one attempt at a time in each", seen.n, len(jobs))
		})
	}
	// A test that fails before it stops the sampler still reports what
	// the sampler saw.
	t.Cleanup(stop)
	return func() *samples {
		stop()
		return seen
	}
}

// oneAttempt returns a violation, or "" (also when a read fails: a sample
// that cannot be read proves nothing either way), and the attempts of tj
// whose pods it found, and found Terminating.
func oneAttempt(ctx context.Context, tj *trainer.TrainJob) (violation string, attempts, terminating []string) {
	pods, terminating, ok := podsByAttempt(ctx, tj)
	if !ok {
		return "", nil, nil
	}
	attempts = slices.Sorted(maps.Keys(pods))
	if len(pods) > 1 {
		var where []string
		for _, a := range attempts {
			where = append(where, fmt.Sprintf("attempt %s: %s", a, strings.Join(pods[a], ", ")))
		}
		return tj.Name + ": pods of two attempts, " + strings.Join(where, "; "), attempts, terminating
	}
	var where []string
	for _, s := range env.fleet.Spokes {
		var list jobset.JobSetList
		if err := s.Client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelTrainJobUID: string(tj.UID)}); err != nil {
			return "", attempts, terminating
		}
		for _, js := range list.Items {
			where = append(where, s.Name+"/"+js.Name)
		}
	}
	if len(where) > 1 {
		return tj.Name + ": JobSets " + joinAll(where), attempts, terminating
	}
	live, ok := liveDispatchNames(ctx, tj)
	if ok && len(live) > 1 {
		return tj.Name + ": live Dispatches " + joinAll(live), attempts, terminating
	}
	return "", attempts, terminating
}

// podsByAttempt lists tj's pods on every spoke, Terminating ones included,
// by the attempt label of the work that made them, and the attempts that
// have a Terminating pod; ok is false when a list failed.
func podsByAttempt(ctx context.Context, tj *trainer.TrainJob) (pods map[string][]string, terminating []string, ok bool) {
	pods = map[string][]string{}
	stopping := map[string]bool{}
	for _, s := range env.fleet.Spokes {
		var list corev1.PodList
		if err := s.Client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelTrainJobUID: string(tj.UID)}); err != nil {
			return nil, nil, false
		}
		for _, p := range list.Items {
			a := p.Labels[v1alpha1.LabelAttempt]
			state := string(p.Status.Phase)
			if !p.DeletionTimestamp.IsZero() {
				state += ", Terminating"
				stopping[a] = true
			}
			pods[a] = append(pods[a], fmt.Sprintf("%s/%s (%s)", s.Name, p.Name, state))
		}
	}
	return pods, slices.Sorted(maps.Keys(stopping)), true
}

// liveDispatchNames are the Dispatches of tj's Workloads that are neither
// being deleted nor final.
func liveDispatchNames(ctx context.Context, tj *trainer.TrainJob) ([]string, bool) {
	var wls kueue.WorkloadList
	if err := env.fleet.Hub.Client.List(ctx, &wls, client.InNamespace(tj.Namespace)); err != nil {
		return nil, false
	}
	var live []string
	for _, wl := range wls.Items {
		if len(wl.OwnerReferences) == 0 || wl.OwnerReferences[0].UID != tj.UID {
			continue
		}
		var l v1alpha1.DispatchList
		if err := env.fleet.Hub.Client.List(ctx, &l, client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)}); err != nil {
			return nil, false
		}
		for _, d := range l.Items {
			if d.DeletionTimestamp.IsZero() && !d.Status.Phase.IsFinal() {
				live = append(live, d.Name)
			}
		}
	}
	return live, true
}
