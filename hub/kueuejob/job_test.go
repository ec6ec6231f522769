package kueuejob

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/podset"
	clientutil "sigs.k8s.io/kueue/pkg/util/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	jobsetbackend "github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

const ns = "team-a"

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	if err := jobsetbackend.InitTrainerRuntimes(); err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(jobset.AddToScheme(s))
	utilruntime.Must(kueue.AddToScheme(s))
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&trainer.TrainJob{}).Build()
}

// pinnedJob is a queued TrainJob of ClusterTrainingRuntime torch, pinned
// when torch had nodes nodes, stored in c.
func pinnedJob(t *testing.T, c client.Client, nodes int32) *trainer.TrainJob {
	t.Helper()
	ctx := context.Background()
	src := tytesting.MakeClusterTrainingRuntime("torch").Spec(tytesting.TorchRuntimeSpec(nodes)).Obj()
	if err := c.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	tj := tytesting.MakeTrainJob("train", ns).Queue("q").Suspend(true).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj()
	if err := snapshot.Pin(ctx, c, c, tj); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// editSource makes the live source runtime nodes nodes, as a tenant's edit
// after the job was submitted would.
func editSource(t *testing.T, c client.Client, nodes int32) {
	t.Helper()
	var src trainer.ClusterTrainingRuntime
	if err := c.Get(context.Background(), client.ObjectKey{Name: "torch"}, &src); err != nil {
		t.Fatal(err)
	}
	src.Spec = tytesting.TorchRuntimeSpec(nodes)
	if err := c.Update(context.Background(), &src); err != nil {
		t.Fatal(err)
	}
}

// TestPodSetsReadThePinnedCopy: the pod sets are the pinned runtime's, not
// the live source's; a job without a pin gets none, and an error Kueue does
// not retry.
func TestPodSetsReadThePinnedCopy(t *testing.T) {
	cases := map[string]struct {
		edit      func(*trainer.TrainJob)
		wantCount int32
		wantErr   func(error) bool
	}{
		"pinned":               {wantCount: 2},
		"no pin annotations":   {edit: func(tj *trainer.TrainJob) { tj.Annotations = nil }, wantErr: jobframework.IsUnretryableError},
		"a malformed pin hash": {edit: func(tj *trainer.TrainJob) { tj.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:12" }, wantErr: jobframework.IsUnretryableError},
		"a pin to a copy that is gone": {
			edit: func(tj *trainer.TrainJob) {
				tj.Annotations[v1alpha1.AnnotationRuntimeSource] = "ClusterTrainingRuntime/gone"
			},
			wantErr: func(err error) bool { return errors.Is(err, snapshot.ErrRuntimeNotFound) },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(t)
			tj := pinnedJob(t, c, 2)
			editSource(t, c, 5)
			if tc.edit != nil {
				tc.edit(tj)
			}
			job := FromObject(tj)
			got, err := job.PodSets(context.Background(), c)
			if tc.wantErr != nil {
				if err == nil || !tc.wantErr(err) {
					t.Fatalf("PodSets error = %v, want the expected kind", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("PodSets: %v", err)
			}
			if len(got) != 1 || got[0].Count != tc.wantCount {
				t.Fatalf("pod sets %+v, want one of count %d", got, tc.wantCount)
			}
			if job.Spec.RuntimeRef.Name != "torch" {
				t.Errorf("PodSets changed runtimeRef to %q", job.Spec.RuntimeRef.Name)
			}
		})
	}
}

// TestPodSetsComputedOncePerGeneration: Kueue asks for a job's pod sets on
// every pass; they are computed (a dry-run Workload create on the API
// server) once per generation of the job and pinned copy, and a caller that
// changes what it got changes nothing cached.
func TestPodSetsComputedOncePerGeneration(t *testing.T) {
	dryRuns := 0
	c := interceptor.NewClient(newClient(t).(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*kueue.Workload); ok {
				dryRuns++
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	tj := pinnedJob(t, c, 2)
	cache := newPodSetCache(podSetCacheSize)
	podSets := func(tj *trainer.TrainJob) []kueue.PodSet {
		t.Helper()
		job := newJobWithCache(cache)().(*TrainJob)
		job.TrainJob = *asKueue(tj.DeepCopy())
		got, err := job.PodSets(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := podSets(tj)
	first[0].Count = 99
	if got := podSets(tj); got[0].Count != 2 || dryRuns != 1 {
		t.Errorf("second pass: count %d after %d dry runs, want 2 after 1", got[0].Count, dryRuns)
	}
	tj.Generation++
	podSets(tj)
	if dryRuns != 2 {
		t.Errorf("a new generation: %d dry runs in all, want 2", dryRuns)
	}
	other := tj.DeepCopy()
	other.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:" + strings.Repeat("0", 64)
	job := newJobWithCache(cache)().(*TrainJob)
	job.TrainJob = *asKueue(other)
	if _, err := job.PodSets(context.Background(), c); err == nil {
		t.Errorf("a job pinned to another copy got the cached pod sets, want the copy read (and missing)")
	}
}

// TestRunWithPodSetsInfoKeepsTheUserSpec: starting the job writes Kueue's
// runtime patch with the admitted flavor's node selector and unsuspends it,
// and leaves the runtimeRef and trainer the user wrote.
func TestRunWithPodSetsInfoKeepsTheUserSpec(t *testing.T) {
	ctx := context.Background()
	var updates, patches int
	c := interceptor.NewClient(newClient(t).(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches++
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	tj := pinnedJob(t, c, 2)
	written := tj.DeepCopy()
	job := FromObject(tj)
	info := []podset.PodSetInfo{{Name: "node", NodeSelector: map[string]string{"pool": "a100"}}}
	// As Kueue's reconciler starts a job: one patch around RunWithPodSetsInfo.
	obj := job.Object()
	if err := clientutil.Patch(ctx, c, obj, func() (bool, error) {
		return true, job.RunWithPodSetsInfo(ctx, c, info)
	}); err != nil {
		t.Fatalf("RunWithPodSetsInfo: %v", err)
	}
	if job.IsSuspended() {
		t.Error("the job is still suspended")
	}
	// The runtime patch goes out with the unsuspend, not in an update of
	// its own.
	if updates != 0 || patches != 1 {
		t.Errorf("starting the job wrote %d updates and %d patches, want 0 and 1", updates, patches)
	}
	var stored trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(tj), &stored); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]*trainer.TrainJob{"in memory": (*trainer.TrainJob)(&job.TrainJob), "stored": &stored} {
		if diff := cmp.Diff(written.Spec.RuntimeRef, got.Spec.RuntimeRef); diff != "" {
			t.Errorf("%s runtimeRef (-written +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(written.Spec.Trainer, got.Spec.Trainer); diff != "" {
			t.Errorf("%s trainer (-written +got):\n%s", name, diff)
		}
		if ptr.Deref(got.Spec.Suspend, true) {
			t.Errorf("%s job is suspended", name)
		}
		var selector map[string]string
		for _, p := range got.Spec.RuntimePatches {
			if p.Manager == v1alpha1.KueueRuntimePatchManager {
				rj := p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs
				if len(rj) == 1 && rj[0].Template != nil && rj[0].Template.Spec != nil && rj[0].Template.Spec.Template != nil && rj[0].Template.Spec.Template.Spec != nil {
					selector = rj[0].Template.Spec.Template.Spec.NodeSelector
				}
			}
		}
		if diff := cmp.Diff(map[string]string{"pool": "a100"}, selector); diff != "" {
			t.Errorf("%s Kueue runtime patch node selector (-want +got):\n%s", name, diff)
		}
	}
}

// TestStopWithoutKueuePatch: a job stopped before it ever ran (created
// unsuspended, say) has no Kueue runtime patch yet; Stop still suspends it.
func TestStopWithoutKueuePatch(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	tj := pinnedJob(t, c, 1)
	tj.Spec.Suspend = ptr.To(false)
	if err := c.Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	job := FromObject(tj)
	stopped, err := job.Stop(ctx, c, nil, jobframework.StopReasonNotAdmitted, "not admitted")
	if err != nil || !stopped {
		t.Fatalf("Stop = %v, %v; want stopped", stopped, err)
	}
	var stored trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(tj), &stored); err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(stored.Spec.Suspend, false) {
		t.Error("the stored job is not suspended")
	}
}

// TestReclaimablePods: pods of a replicated job that succeeded are
// reclaimable, as Kueue counts them on the pinned copy; while none has
// succeeded there are none, and the pinned copy is not even read (here it
// is gone, which would be an error).
func TestReclaimablePods(t *testing.T) {
	cases := map[string]struct {
		jobs       []trainer.JobStatus
		copyIsGone bool
		want       []kueue.ReclaimablePod
	}{
		"no status yet": {copyIsGone: true},
		"running, none succeeded": {
			jobs:       []trainer.JobStatus{{Name: "node", Active: ptr.To[int32](1), Succeeded: ptr.To[int32](0)}},
			copyIsGone: true,
		},
		"the node job succeeded": {
			jobs: []trainer.JobStatus{{Name: "node", Active: ptr.To[int32](0), Succeeded: ptr.To[int32](1)}},
			want: []kueue.ReclaimablePod{{Name: "node", Count: 2}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t)
			tj := pinnedJob(t, c, 2)
			if tc.copyIsGone {
				tj.Annotations[v1alpha1.AnnotationRuntimeSource] = "ClusterTrainingRuntime/gone"
			}
			tj.Status.JobsStatus = tc.jobs
			got, err := FromObject(tj).ReclaimablePods(ctx, c)
			if err != nil {
				t.Fatalf("ReclaimablePods: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("reclaimable pods (-want +got):\n%s", diff)
			}
		})
	}
}
