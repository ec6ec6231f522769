package placement

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// target is an available Kubernetes target serving flavor "h100". It takes
// no queued jobs, so that a case is about what fits now; queue_test.go
// covers the queue.
func target(name string) *tytesting.TargetWrapper {
	return spoke(name, "h100").Available()
}

// spoke is a Kubernetes target of flavor that takes no queued jobs.
func spoke(name, flavor string) *tytesting.TargetWrapper {
	return tytesting.MakeKubernetesTarget(name, flavor).KubernetesQueueDepth(0)
}

func cand(w *tytesting.TargetWrapper) Candidate { return Candidate{Target: w.Obj()} }

func inFlight(w *tytesting.TargetWrapper, gpus int64) Candidate {
	return Candidate{Target: w.Obj(), InFlightGPUs: gpus}
}

// job asks for flavor h100 and count pods of gpus GPUs each.
func job(count int32, gpus int64) Request {
	return Request{Flavors: []string{"h100"}, PodSets: []PodSet{{Name: "node", Count: count, GPUsPerPod: gpus}}}
}

type chooseCase struct {
	req        Request
	candidates []Candidate
	want       Decision
	// wantErr is the sentinel the error wraps; wantMsg are substrings of its text.
	wantErr error
	wantMsg []string
}

// runChoose checks the target and the error; where the pod sets go is the
// business of runPlace.
func runChoose(t *testing.T, cases map[string]chooseCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Choose(tc.req, tc.candidates)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Choose error = %v, want %v", err, tc.wantErr)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Choose error %q does not contain %q", err, m)
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Decision{}, "PodSets")); diff != "" {
				t.Errorf("Choose decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChooseBestFit(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"the only target that fits": {
			req:        job(1, 4),
			candidates: []Candidate{cand(target("a").FreeGPUs(8))},
			want:       Decision{Target: "a", FreeAfter: 4},
		},
		"fewest GPUs left wins": {
			req: job(2, 2),
			candidates: []Candidate{
				cand(target("a").FreeGPUs(16)),
				cand(target("b").FreeGPUs(6)),
				cand(target("c").FreeGPUs(3)), // too small
			},
			want: Decision{Target: "b", FreeAfter: 2},
		},
		"ties go to the name first": {
			req: job(1, 4),
			candidates: []Candidate{
				cand(target("zeta").FreeGPUs(8)),
				cand(target("alpha").FreeGPUs(8)),
				cand(target("mid").FreeGPUs(8)),
			},
			want: Decision{Target: "alpha", FreeAfter: 4},
		},
		"an exact fit leaves nothing": {
			req:        job(2, 4),
			candidates: []Candidate{cand(target("a").FreeGPUs(9)), cand(target("b").FreeGPUs(8))},
			want:       Decision{Target: "b", FreeAfter: 0},
		},
		"all flavors must be served": {
			req: Request{Flavors: []string{"cpu", "h100"}, PodSets: []PodSet{{Name: "node", Count: 1, GPUsPerPod: 1}}},
			candidates: []Candidate{
				cand(target("only-h100").FreeGPUs(1)),
				cand(target("both").Flavors("h100", "cpu").FreeGPUs(8)),
			},
			want: Decision{Target: "both", FreeAfter: 7},
		},
		"targets of another flavor are not considered": {
			req: job(1, 1),
			candidates: []Candidate{
				cand(spoke("a100", "a100").Available().FreeGPUs(1)),
				cand(target("h").FreeGPUs(5)),
			},
			want: Decision{Target: "h", FreeAfter: 4},
		},
		"a CPU-only job fits anywhere available": {
			req:        job(3, 0),
			candidates: []Candidate{cand(target("a").FreeGPUsPerNode(0, 0))},
			want:       Decision{Target: "a", FreeAfter: 0},
		},
		"several pod sets add up": {
			req: Request{Flavors: []string{"h100"}, PodSets: []PodSet{
				{Name: "launcher", Count: 1, GPUsPerPod: 0},
				{Name: "node", Count: 3, GPUsPerPod: 2},
			}},
			candidates: []Candidate{cand(target("a").FreeGPUs(5)), cand(target("b").FreeGPUs(7))},
			want:       Decision{Target: "b", FreeAfter: 1},
		},
	})
}

func TestChooseSkipsUnavailable(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"paused, not available and silent targets are skipped": {
			req: job(1, 2),
			candidates: []Candidate{
				cand(target("paused").Paused().FreeGPUs(2)),
				cand(target("stale").AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonHeartbeatStale).FreeGPUs(2)),
				cand(spoke("new", "h100").FreeGPUs(2)),
				cand(target("ok").FreeGPUs(10)),
			},
			want: Decision{Target: "ok", FreeAfter: 8},
		},
		"a paused target": {
			req:        job(1, 2),
			candidates: []Candidate{cand(target("a").Paused().FreeGPUs(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: paused"},
		},
		"a target out of service, even with a fresh lease": {
			req:        job(1, 2),
			candidates: []Candidate{cand(target("a").OutOfService().FreeGPUs(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: out of service"},
		},
		"a target whose heartbeat is stale": {
			req:        job(1, 2),
			candidates: []Candidate{cand(target("a").AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonHeartbeatStale).FreeGPUs(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: not available (HeartbeatStale)"},
		},
		"a target with unknown availability": {
			req:        job(1, 2),
			candidates: []Candidate{cand(target("a").AvailableCondition(metav1.ConditionUnknown, v1alpha1.ReasonNoHeartbeat).FreeGPUs(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: not available (NoHeartbeat)"},
		},
		"a target that never sent a heartbeat": {
			req:        job(1, 2),
			candidates: []Candidate{cand(spoke("a", "h100").FreeGPUs(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: no heartbeat yet"},
		},
	})
}

func TestChooseNodeByNode(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"pods do not split across nodes": {
			req:        job(2, 4),
			candidates: []Candidate{cand(target("a").FreeGPUsPerNode(3, 3, 3, 3))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 12 GPUs free, job needs 8"},
		},
		"one pod per whole node": {
			req:        job(2, 4),
			candidates: []Candidate{cand(target("a").FreeGPUsPerNode(4, 4))},
			want:       Decision{Target: "a", FreeAfter: 0},
		},
		"the fragmented target loses to one that holds the pods": {
			req: job(2, 4),
			candidates: []Candidate{
				cand(target("frag").FreeGPUsPerNode(3, 3, 3)),
				cand(target("whole").FreeGPUsPerNode(4, 4, 4, 4)),
			},
			want: Decision{Target: "whole", FreeAfter: 8},
		},
		"several pods share a node": {
			req:        job(4, 2),
			candidates: []Candidate{cand(target("a").FreeGPUsPerNode(8, 1))},
			want:       Decision{Target: "a", FreeAfter: 1},
		},
		"largest pods are placed first": {
			// 3, 3, 2 onto [5, 3] fits only largest first: the 2 first
			// would take the 3-node and strand a 3.
			req: Request{Flavors: []string{"h100"}, PodSets: []PodSet{
				{Name: "small", Count: 1, GPUsPerPod: 2},
				{Name: "big", Count: 2, GPUsPerPod: 3},
			}},
			candidates: []Candidate{cand(target("a").FreeGPUsPerNode(5, 3))},
			want:       Decision{Target: "a", FreeAfter: 0},
		},
		"without per-node data only the total counts": {
			req:        job(2, 4),
			candidates: []Candidate{cand(target("a").FreeGPUs(8))},
			want:       Decision{Target: "a", FreeAfter: 0},
		},
	})
}

func TestChooseInFlight(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"in-flight GPUs are not free": {
			req:        job(1, 4),
			candidates: []Candidate{inFlight(target("a").FreeGPUs(8), 6)},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 2 GPUs free, job needs 4"},
		},
		"in-flight GPUs change which target fits best": {
			req: job(1, 4),
			candidates: []Candidate{
				inFlight(target("a").FreeGPUs(6), 0),
				inFlight(target("b").FreeGPUs(8), 3),
			},
			want: Decision{Target: "b", FreeAfter: 1},
		},
		"more in flight than free reports zero free": {
			req:        job(1, 1),
			candidates: []Candidate{inFlight(target("a").FreeGPUs(2), 5)},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 0 GPUs free, job needs 1"},
		},
		"in-flight GPUs come off the nodes too": {
			// 3+3 free, 2 in flight: 4 in total is enough for 2 pods of 2,
			// but wherever the 2 went, only one node keeps 2.
			req:        job(2, 2),
			candidates: []Candidate{inFlight(target("a").FreeGPUsPerNode(3, 3), 2)},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 4 GPUs free, job needs 4"},
		},
		"in flight on a per-node target that still fits": {
			req:        job(1, 4),
			candidates: []Candidate{inFlight(target("a").FreeGPUsPerNode(4, 4), 4)},
			want:       Decision{Target: "a", FreeAfter: 0},
		},
	})
}

func TestChooseErrors(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"no candidates at all": {
			req:     job(1, 1),
			wantErr: ErrNoTarget,
			wantMsg: []string{"h100"},
		},
		"no target serves the flavor": {
			req:        job(1, 1),
			candidates: []Candidate{cand(spoke("a", "a100").Available().FreeGPUs(8))},
			wantErr:    ErrNoTarget,
			wantMsg:    []string{"no target serves flavor h100"},
		},
		"a request without flavors matches no target that denies flavor-less jobs": {
			req:        Request{PodSets: []PodSet{{Name: "n", Count: 1, GPUsPerPod: 1}}},
			candidates: []Candidate{cand(target("a").FreeGPUs(8).FlavorlessJobs(v1alpha1.FlavorlessJobsDeny))},
			wantErr:    ErrNoTarget,
			wantMsg:    []string{"admitted with no flavor and no target takes flavor-less jobs"},
		},
		"no target serves every flavor": {
			req:        Request{Flavors: []string{"cpu", "h100"}, PodSets: []PodSet{{Name: "n", Count: 1, GPUsPerPod: 1}}},
			candidates: []Candidate{cand(target("a").FreeGPUs(8))},
			wantErr:    ErrNoTarget,
			wantMsg:    []string{"cpu, h100"},
		},
		"a pod larger than the largest node of every serving target (named in order)": {
			req: job(1, 8),
			candidates: []Candidate{
				cand(target("b").Paused().MaxGPUsPerNode(6).FreeGPUsPerNode(6, 6)),
				cand(target("a").MaxGPUsPerNode(4).FreeGPUsPerNode(4, 4, 4, 4)),
				cand(spoke("other", "a100").Available().MaxGPUsPerNode(8).FreeGPUs(8)),
			},
			wantErr: ErrNeverFits,
			wantMsg: []string{"a pod asks for 8 GPUs", "targets a, b has 6"},
		},
		"an unavailable target with large nodes keeps the job waiting": {
			req: job(1, 8),
			candidates: []Candidate{
				cand(target("a").MaxGPUsPerNode(4).FreeGPUs(4)),
				cand(target("b").Paused().MaxGPUsPerNode(8).FreeGPUs(8)),
			},
			wantErr: ErrNoCapacity,
		},
		"unknown node sizes never mean never": {
			req:        job(1, 64),
			candidates: []Candidate{cand(target("a").FreeGPUs(8))},
			wantErr:    ErrNoCapacity,
		},
		"no capacity lists every reason, sorted": {
			req: job(1, 4),
			candidates: []Candidate{
				cand(target("c").FreeGPUs(2)),
				cand(target("a").Paused().FreeGPUs(8)),
				cand(spoke("b", "h100").FreeGPUs(8)),
			},
			wantErr: ErrNoCapacity,
			wantMsg: []string{"no target has room for flavor h100: a: paused; b: no heartbeat yet; c: 2 GPUs free, job needs 4"},
		},
	})
}

// TestChooseNeverFitsWithUnknownNodeSize: a target whose node size is not
// known yet (no heartbeat: MaxGPUsPerNode 0) might hold the pod, so the job
// must wait, not be rejected for good.
func TestChooseNeverFitsWithUnknownNodeSize(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"one target of unknown size": {
			req: job(1, 8),
			candidates: []Candidate{
				cand(target("small").MaxGPUsPerNode(4).FreeGPUs(4)),
				cand(spoke("new", "h100")),
			},
			wantErr: ErrNoCapacity,
		},
	})
}

// TestChooseInFlightPessimistic: the heartbeat has not said where in-flight
// GPUs went; the pessimistic guess is that they broke up the largest free
// blocks, so a large pod must not be promised the node they may be using.
func TestChooseInFlightPessimistic(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"in flight may be on the big node": {
			// 2 in flight on nodes free [2,4]: pessimistically [2,2], no room for a 4.
			req:        job(1, 4),
			candidates: []Candidate{inFlight(target("a").FreeGPUsPerNode(2, 4), 2)},
			wantErr:    ErrNoCapacity,
		},
	})
}

// Property test: compare Choose with a direct model of its contract on
// random fleets.

// inFlightFromLeastFree is how the model spreads in-flight GPUs over nodes:
// false means off the nodes with the most free GPUs first, the pessimistic
// guess placement makes (see TestChooseInFlightPessimistic).
const inFlightFromLeastFree = false

// modelEligible reports whether c serves every flavor of req, is available
// and holds req by a greedy packing, largest pod first onto the node with
// the least room that holds it.
func modelEligible(req Request, c Candidate) bool {
	t := c.Target
	if len(req.Flavors) == 0 {
		return false
	}
	for _, f := range req.Flavors {
		if !slices.Contains(t.Spec.Flavors, f) {
			return false
		}
	}
	if t.Spec.Paused {
		return false
	}
	available := false
	for _, cond := range t.Status.Conditions {
		if cond.Type == v1alpha1.TargetAvailable && cond.Status == metav1.ConditionTrue {
			available = true
		}
	}
	if !available || t.Status.FreeGPUs-c.InFlightGPUs < req.GPUs() {
		return false
	}
	var nodes []int64
	if t.Status.Topology != nil {
		for _, d := range t.Status.Topology.Domains {
			for _, f := range d.FreeGPUsPerNode {
				nodes = append(nodes, int64(f))
			}
		}
	}
	if len(nodes) == 0 {
		for _, ps := range req.PodSets {
			if t.Status.MaxGPUsPerNode > 0 && ps.Count > 0 && ps.GPUsPerPod > t.Status.MaxGPUsPerNode {
				return false
			}
		}
		return true
	}
	slices.Sort(nodes)
	if !inFlightFromLeastFree {
		slices.Reverse(nodes)
	}
	left := c.InFlightGPUs
	for i := range nodes {
		take := min(nodes[i], left)
		nodes[i] -= take
		left -= take
	}
	var pods []int64
	for _, ps := range req.PodSets {
		for range ps.Count {
			pods = append(pods, ps.GPUsPerPod)
		}
	}
	slices.Sort(pods)
	slices.Reverse(pods)
	for _, need := range pods {
		if need == 0 {
			continue
		}
		best := -1
		for i, free := range nodes {
			if free >= need && (best < 0 || free < nodes[best]) {
				best = i
			}
		}
		if best < 0 {
			return false
		}
		nodes[best] -= need
	}
	return true
}

func randomCandidate(rng *rand.Rand, i int) Candidate {
	flavors := []string{"h100", "a100", "cpu"}
	w := spoke(fmt.Sprintf("t%d", i), flavors[rng.Intn(2)])
	if rng.Intn(3) == 0 {
		w.Flavors(append(w.Spec.Flavors, "cpu")...)
	}
	switch rng.Intn(6) {
	case 0:
		w.Paused().Available()
	case 1:
		w.AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonHeartbeatStale)
	case 2: // no heartbeat yet
	default:
		w.Available()
	}
	if rng.Intn(3) == 0 {
		w.FreeGPUs(int64(rng.Intn(17)))
	} else {
		free := make([]int32, 1+rng.Intn(4))
		for j := range free {
			free[j] = int32(rng.Intn(9))
		}
		w.FreeGPUsPerNode(free...)
	}
	if rng.Intn(2) == 0 {
		w.MaxGPUsPerNode(int64(4 + 4*rng.Intn(2)))
	}
	return Candidate{Target: w.Obj(), InFlightGPUs: int64(rng.Intn(3)) * int64(rng.Intn(5))}
}

func randomRequest(rng *rand.Rand) Request {
	req := Request{Flavors: []string{[]string{"h100", "a100"}[rng.Intn(2)]}}
	if rng.Intn(4) == 0 {
		req.Flavors = append(req.Flavors, "cpu")
		sort.Strings(req.Flavors)
	}
	for i := range 1 + rng.Intn(2) {
		req.PodSets = append(req.PodSets, PodSet{
			Name: fmt.Sprintf("ps%d", i), Count: int32(1 + rng.Intn(3)), GPUsPerPod: int64(rng.Intn(6)),
		})
	}
	return req
}

func TestChooseProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(20240601))
	decisions := 0
	for iter := range 5000 {
		req := randomRequest(rng)
		var cands []Candidate
		for i := range rng.Intn(5) {
			cands = append(cands, randomCandidate(rng, i))
		}
		got, err := Choose(req, cands)
		var eligible []Candidate
		for _, c := range cands {
			if modelEligible(req, c) {
				eligible = append(eligible, c)
			}
		}
		describe := func() string {
			var b strings.Builder
			fmt.Fprintf(&b, "iteration %d, request %+v\n", iter, req)
			for _, c := range cands {
				t := c.Target
				fmt.Fprintf(&b, "  %s flavors=%v paused=%v conds=%v free=%d topology=%+v max=%d inFlight=%d\n",
					t.Name, t.Spec.Flavors, t.Spec.Paused, t.Status.Conditions, t.Status.FreeGPUs, t.Status.Topology,
					t.Status.MaxGPUsPerNode, c.InFlightGPUs)
			}
			return b.String()
		}
		serving := slices.ContainsFunc(cands, func(c Candidate) bool {
			return !slices.ContainsFunc(req.Flavors, func(f string) bool { return !slices.Contains(c.Target.Spec.Flavors, f) })
		})
		if errors.Is(err, ErrNoTarget) == serving {
			t.Fatalf("Choose error %v, but a target serving %v exists: %v\n%s", err, req.Flavors, serving, describe())
		}
		if err != nil {
			if len(eligible) > 0 {
				t.Fatalf("Choose error %v, but %s is eligible\n%s", err, eligible[0].Target.Name, describe())
			}
			if !errors.Is(err, ErrNoTarget) && !errors.Is(err, ErrNoCapacity) && !errors.Is(err, ErrNeverFits) {
				t.Fatalf("Choose error %v wraps no sentinel\n%s", err, describe())
			}
			continue
		}
		decisions++
		i := slices.IndexFunc(cands, func(c Candidate) bool { return c.Target.Name == got.Target })
		if i < 0 || !modelEligible(req, cands[i]) {
			t.Fatalf("Choose picked %q, which is not eligible\n%s", got.Target, describe())
		}
		c := cands[i]
		if want := c.Target.Status.FreeGPUs - c.InFlightGPUs - req.GPUs(); got.FreeAfter != want {
			t.Fatalf("FreeAfter = %d, want %d\n%s", got.FreeAfter, want, describe())
		}
		for _, e := range eligible {
			after := e.Target.Status.FreeGPUs - e.InFlightGPUs - req.GPUs()
			if after < got.FreeAfter || (after == got.FreeAfter && e.Target.Name < got.Target) {
				t.Fatalf("Choose picked %q (%d left), but %q leaves %d\n%s", got.Target, got.FreeAfter, e.Target.Name, after, describe())
			}
		}
	}
	// Guard the generator: both outcomes must be exercised.
	if decisions < 500 || decisions > 4500 {
		t.Errorf("only %d of 5000 random requests were placed; the generator is skewed", decisions)
	}
}
