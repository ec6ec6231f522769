package jobset

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// cacheSA is the ServiceAccount Kubeflow's torch-distributed-with-cache
// runs its dataset initializer as.
const cacheSA = "kubeflow-trainer-cache-initializer"

// TestShippedRuntimesOnADefaultTarget: every runtime Kubeflow ships renders
// unchanged under a default Target's policy (Pod Security baseline, nothing
// allowlisted), except the cache runtime, whose ServiceAccount the Target
// must allow by name; and each render carries the job's NetworkPolicy.
func TestShippedRuntimesOnADefaultTarget(t *testing.T) {
	runtimes, err := tytesting.AllShippedRuntimes()
	if err != nil {
		t.Fatal(err)
	}
	for path, rt := range runtimes {
		t.Run(rt.Name, func(t *testing.T) {
			tj := tytesting.MakeTrainJob("train", "team-a").RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).Obj()
			var podSets []v1alpha1.PodSetPlacement
			for _, rj := range rt.Spec.Template.Spec.ReplicatedJobs {
				podSets = append(podSets, v1alpha1.PodSetPlacement{Name: rj.Name, Count: 64})
			}
			d := shippedDispatch(t, path, tj, podSets...)
			r, err := RenderAll(d, RenderOptions{Namespace: testNS})
			if rt.Name == "torch-distributed-with-cache" {
				if err == nil || !strings.Contains(backends.RejectionReason(err), `serviceAccountName "`+cacheSA+`" is not allowed on this target`) {
					t.Fatalf("RenderAll = %v, want the ServiceAccount refused", err)
				}
				allowed := kubework.PodPolicy{Allowed: v1alpha1.AllowedPodFields{ServiceAccountNames: []string{cacheSA}}}
				if r, err = RenderAll(d, RenderOptions{Namespace: testNS, Policy: allowed}); err != nil {
					t.Fatalf("RenderAll with %s allowed: %v", cacheSA, err)
				}
			} else if err != nil {
				t.Fatalf("RenderAll: %v", err)
			}
			np, ok := r.Companions[len(r.Companions)-1].(*networkingv1.NetworkPolicy)
			if !ok || np.Spec.PodSelector.MatchLabels[jobsetv1alpha2.JobSetNameKey] != r.JobSet.Name ||
				np.Spec.Ingress[0].From[0].PodSelector.MatchLabels[jobsetv1alpha2.JobSetNameKey] != r.JobSet.Name ||
				np.Spec.Egress[0].To[0].PodSelector.MatchLabels[jobsetv1alpha2.JobSetNameKey] != r.JobSet.Name {
				t.Errorf("last companion %v, want a NetworkPolicy between the JobSet's own pods", r.Companions[len(r.Companions)-1])
			}
		})
	}
}

// TestRenderRefusesTenantPatches: what a tenant's runtime patch sets that
// the Target does not allow makes Render refuse the job, naming the field.
func TestRenderRefusesTenantPatches(t *testing.T) {
	other := "other-0123456789-a1-mpi-ssh-auth"
	cases := map[string]struct {
		patch   trainer.PodSpecPatch
		wantErr string
	}{
		"hostPath": {
			patch:   trainer.PodSpecPatch{Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}},
			wantErr: `volume "host" of type hostPath is not allowed on this target`,
		},
		"serviceAccountName": {
			patch:   trainer.PodSpecPatch{ServiceAccountName: ptr.To("cluster-admin")},
			wantErr: `serviceAccountName "cluster-admin" is not allowed on this target`,
		},
		"another job's key Secret": {
			patch:   trainer.PodSpecPatch{Volumes: []corev1.Volume{{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: other}}}}},
			wantErr: `volume "keys" mounts Secret "` + other + `", which was not made for this job`,
		},
		"terminationGracePeriodSeconds": {
			patch:   trainer.PodSpecPatch{TerminationGracePeriodSeconds: ptr.To[int64](3600)},
			wantErr: "terminationGracePeriodSeconds 3600 is more than this target allows (maxTerminationGracePeriodSeconds 30)",
		},
		"privileged container": {
			patch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}},
			wantErr: `container "node": privileged is not allowed on this target`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := tytesting.MakeTrainJob("train", "team-b").NumNodes(2).Obj()
			spec := nodePodPatch(&tc.patch)
			tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "team-b/tools", TrainingRuntimeSpec: &spec}}
			_, err := Render(torchDispatch("d1", tj, tytesting.TorchRuntimeSpec(1), 2).Obj(), RenderOptions{Namespace: testNS})
			if !errors.Is(err, backends.ErrRejected) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Render = %v, want a rejection containing %q", err, tc.wantErr)
			}
		})
	}
}

// nodePodPatch patches the pod template of the node replicated job.
func nodePodPatch(spec *trainer.PodSpecPatch) trainer.TrainingRuntimeSpecPatch {
	return trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{
		ReplicatedJobs: []trainer.ReplicatedJobPatch{{Name: "node", Template: &trainer.JobTemplatePatch{
			Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: spec}},
		}}},
	}}}
}

// TestRenderBoundsTerminationGrace: the grace the rendered pods run with,
// whoever set it (runtime or tenant patch), is at most the Target's cap;
// pods that set none get the cap when it is below Kubernetes' 30 s.
func TestRenderBoundsTerminationGrace(t *testing.T) {
	capped := func(seconds int64) kubework.PodPolicy {
		return kubework.PodPolicy{Allowed: v1alpha1.AllowedPodFields{MaxTerminationGracePeriodSeconds: &seconds}}
	}
	cases := map[string]struct {
		policy    kubework.PodPolicy
		runtime   *int64 // the runtime's own grace
		patch     *int64 // a tenant patch's
		wantGrace *int64
		wantErr   string
	}{
		"none set, default cap":             {},
		"none set, cap below 30":            {policy: capped(10), wantGrace: ptr.To[int64](10)},
		"the runtime's, within the cap":     {runtime: ptr.To[int64](20), wantGrace: ptr.To[int64](20)},
		"the runtime's, over the cap":       {runtime: ptr.To[int64](120), wantErr: "terminationGracePeriodSeconds 120 is more than"},
		"a patch over the runtime, allowed": {policy: capped(600), runtime: ptr.To[int64](20), patch: ptr.To[int64](600), wantGrace: ptr.To[int64](600)},
		"a patch over the cap":              {policy: capped(600), runtime: ptr.To[int64](20), patch: ptr.To[int64](601), wantErr: "(maxTerminationGracePeriodSeconds 600)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := tytesting.MakeTrainJob("train", "team-b").NumNodes(2).Obj()
			if tc.patch != nil {
				spec := nodePodPatch(&trainer.PodSpecPatch{TerminationGracePeriodSeconds: tc.patch})
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "team-b/tools", TrainingRuntimeSpec: &spec}}
			}
			rt := tytesting.TorchRuntimeSpec(1)
			rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.TerminationGracePeriodSeconds = tc.runtime
			js, err := Render(torchDispatch("d1", tj, rt, 2).Obj(), RenderOptions{Namespace: testNS, Policy: tc.policy})
			if tc.wantErr != "" {
				if !errors.Is(err, backends.ErrRejected) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Render = %v, want a rejection containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			got := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.TerminationGracePeriodSeconds
			if diff := cmp.Diff(tc.wantGrace, got); diff != "" {
				t.Errorf("terminationGracePeriodSeconds (-want +got):\n%s", diff)
			}
		})
	}
}
