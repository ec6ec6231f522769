package eligibility

import (
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// shippedRuntimes reads every ClusterTrainingRuntime Kubeflow Trainer ships
// in the pinned module, unchanged, by name.
func shippedRuntimes(t *testing.T) map[string]*trainer.ClusterTrainingRuntime {
	t.Helper()
	files, err := tytesting.AllShippedRuntimes()
	if err != nil {
		t.Fatal(err)
	}
	rts := map[string]*trainer.ClusterTrainingRuntime{}
	for _, rt := range files {
		rts[rt.Name] = rt
	}
	if len(rts) < 9 {
		t.Fatalf("found %d shipped runtimes, want the 9 of Trainer v2.3", len(rts))
	}
	return rts
}

// docsJob is a TrainJob as the Trainer docs write one: a runtime reference
// and nothing else (no command, no resources).
func docsJob(runtime string) *v1alpha1.Dispatch {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "team-a", UID: "tj-uid"}}
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: runtime}
	return tytesting.MakeDispatch("d", "agents", "").SnapshotTrainJob(tj).Obj()
}

func withRuntime(d *v1alpha1.Dispatch, rt *trainer.ClusterTrainingRuntime) *v1alpha1.Dispatch {
	w := &tytesting.DispatchWrapper{Dispatch: *d.DeepCopy()}
	w.SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, rt.Name, rt.Spec)
	// Admitted counts large enough for any render: eligibility is about
	// what a target refuses, not about pod counts.
	var podSets []v1alpha1.PodSetPlacement
	for _, rj := range rt.Spec.Template.Spec.ReplicatedJobs {
		podSets = append(podSets, v1alpha1.PodSetPlacement{Name: rj.Name, Count: 64})
	}
	return w.PodSets(podSets...).Obj()
}

func fleet() map[string]*v1alpha1.Target {
	lws := tytesting.MakeKubernetesTarget("lws", "gpu").Kubernetes(&v1alpha1.KubernetesTarget{Backend: v1alpha1.KubernetesBackendLeaderWorkerSet}).Obj()
	slurm := tytesting.MakeSlurmTarget("hpc", "gpu", "gpu").SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "alice"}).
		HostImages("pytorch/pytorch:*").Obj()
	return map[string]*v1alpha1.Target{
		// Kubeflow's torch-distributed-with-cache runs its initializer as
		// this ServiceAccount, which a Target must allow by name.
		"jobset": tytesting.MakeKubernetesTarget("jobset", "gpu").Kubernetes(&v1alpha1.KubernetesTarget{
			AllowedPodFields: &v1alpha1.AllowedPodFields{ServiceAccountNames: []string{"kubeflow-trainer-cache-initializer"}}}).Obj(),
		"lws": lws,
		"hpc": slurm,
	}
}

// TestShippedRuntimesAsTheDocsWriteJobs is the matrix of every runtime
// Kubeflow ships against each kind of target, for a TrainJob with no
// command: every cell either is eligible or names its reason.
func TestShippedRuntimesAsTheDocsWriteJobs(t *testing.T) {
	targets := fleet()
	got := map[string]map[string]string{}
	for name, rt := range shippedRuntimes(t) {
		got[name] = map[string]string{}
		for tn, target := range targets {
			got[name][tn] = Check(target, withRuntime(docsJob(name), rt))
		}
	}
	noCommand := "no command: set the trainer command or the runtime's node container command"
	lwsOneNode := `replicated job "node" has 0 replicas; a LeaderWorkerSet group holds one`
	initializers := func(rj string) string {
		return "runtime \"%s\": its dataset-initializer step (replicated job " + rj + ") runs only on Kubernetes spokes"
	}
	want := map[string]map[string]string{
		"torch-distributed": {"jobset": "", "lws": "", "hpc": noCommand},
		// The MPI runtimes leave the launcher's command to the job; with
		// one node, run by the launcher itself, no LWS worker is left.
		"deepspeed-distributed": {"jobset": "", "lws": lwsOneNode, "hpc": noCommand},
		"mlx-distributed":       {"jobset": "", "lws": lwsOneNode, "hpc": noCommand},
		"jax-distributed":       {"jobset": "", "lws": "", "hpc": noCommand},
		"xgboost-distributed":   {"jobset": "", "lws": "", "hpc": noCommand},
	}
	for name, cells := range want {
		if diff := cmp.Diff(cells, got[name]); diff != "" {
			t.Errorf("runtime %s (-want +got):\n%s", name, diff)
		}
	}
	// Runtimes with initializers and volume claims run on JobSet spokes
	// only; the other targets each say why.
	for name, cells := range got {
		if _, checked := want[name]; checked {
			continue
		}
		if cells["jobset"] != "" {
			t.Errorf("runtime %s on a JobSet spoke: %q, want eligible", name, cells["jobset"])
		}
		for _, tn := range []string{"lws", "hpc"} {
			if cells[tn] == "" {
				t.Errorf("runtime %s on %s: eligible, want a refusal (it has initializers)", name, tn)
			}
		}
		if want := strings.ReplaceAll(initializers("dataset-initializer"), "%s", name); cells["hpc"] != want {
			t.Errorf("runtime %s on hpc: %q, want %q", name, cells["hpc"], want)
		}
	}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("%-28s jobset=%q lws=%q hpc=%q", n, got[n]["jobset"], got[n]["lws"], got[n]["hpc"])
	}
}

func TestCheckNamesWhatTheTargetRefuses(t *testing.T) {
	torch := shippedRuntimes(t)["torch-distributed"]
	withCommand := func(ns string) *v1alpha1.Dispatch {
		d := docsJob("torch-distributed")
		tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: ns, UID: "tj-uid"}}
		tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed"}
		tj.Spec.Trainer = &trainer.Trainer{Command: []string{"python3", "train.py"}}
		w := &tytesting.DispatchWrapper{Dispatch: *d}
		w.SnapshotTrainJob(tj)
		w.Spec.Workload.Namespace = ns
		return withRuntime(w.Obj(), torch)
	}
	slurm := fleet()["hpc"]
	unknownBackend := tytesting.MakeKubernetesTarget("deployments", "gpu").Kubernetes(&v1alpha1.KubernetesTarget{Backend: "Deployment"}).Obj()
	unknownType := tytesting.MakeKubernetesTarget("nomad", "gpu").Obj()
	unknownType.Spec.Type = "Nomad"
	cases := map[string]struct {
		target *v1alpha1.Target
		d      *v1alpha1.Dispatch
		want   string
	}{
		"a job with a command, from a mapped namespace": {target: slurm, d: withCommand("team-a"), want: ""},
		"a namespace the cluster does not map": {target: slurm, d: withCommand("team-b"),
			want: "namespace team-b may not use this cluster"},
		// The agent refuses to start for these (backends.For), so no job
		// may be placed there.
		"a Kubernetes backend no agent runs": {target: unknownBackend, d: withCommand("team-a"),
			want: `spec.kubernetes.backend "Deployment" is not JobSet or LeaderWorkerSet`},
		"a target type no agent runs": {target: unknownType, d: withCommand("team-a"),
			want: `unknown target type "Nomad"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Check(tc.target, tc.d); got != tc.want {
				t.Errorf("Check = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCacheAnswersOncePerTargetSpec(t *testing.T) {
	torch := shippedRuntimes(t)["torch-distributed"]
	d := withRuntime(docsJob("torch-distributed"), torch)
	slurm := fleet()["hpc"]
	c := NewCache(2)
	first := c.Check(slurm, d)
	if first == "" {
		t.Fatal("a job without a command is eligible on a cluster without containers")
	}
	// A changed target spec is asked again: the administrator may have
	// fixed what made it refuse.
	changed := slurm.DeepCopy()
	changed.Generation++
	changed.Spec.Slurm.Accounts = nil
	if got := c.Check(changed, d); got == first {
		t.Errorf("after a spec change the cache answered the old %q", got)
	}
	if got := c.Check(slurm, d); got != first {
		t.Errorf("second answer %q, first %q", got, first)
	}
	if len(c.answers) > 2 {
		t.Errorf("cache holds %d answers, bound is 2", len(c.answers))
	}
}

// TestCheckNamesImagesTheTargetDoesNotRun: every container that would run
// on a spoke, initializers included, is held to its spec.images.allowed,
// and the answer names the image.
func TestCheckNamesImagesTheTargetDoesNotRun(t *testing.T) {
	rts := shippedRuntimes(t)
	spoke := func(allowed ...string) *v1alpha1.Target {
		return tytesting.MakeKubernetesTarget("jobset", "gpu").Kubernetes(&v1alpha1.KubernetesTarget{
			AllowedPodFields: &v1alpha1.AllowedPodFields{ServiceAccountNames: []string{"kubeflow-trainer-cache-initializer"}}}).
			AllowedImages(allowed...).Obj()
	}
	cases := map[string]struct {
		target  *v1alpha1.Target
		runtime string
		want    string
	}{
		"the trainer's image is allowed": {target: spoke("docker.io/pytorch/*"), runtime: "torch-distributed"},
		"the trainer's image is not": {target: spoke("registry.example.org/*"), runtime: "torch-distributed",
			want: `pod template of replicated job node: container "node": image "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime" is not one this target runs (spec.images.allowed: registry.example.org/*)`},
		"an initializer's image is not": {target: spoke("pytorch/pytorch:*"), runtime: "torch-distributed-with-cache",
			want: `pod template of replicated job dataset-initializer: container "dataset-initializer": image "ghcr.io/kubeflow/trainer/dataset-initializer" is not one this target runs (spec.images.allowed: pytorch/pytorch:*)`},
		"the initializer's and the trainer's images are allowed": {target: spoke("pytorch/pytorch:*", "ghcr.io/kubeflow/trainer/*"),
			runtime: "torch-distributed-with-cache"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Check(tc.target, withRuntime(docsJob(tc.runtime), rts[tc.runtime])); !strings.Contains(got, tc.want) || (tc.want == "") != (got == "") {
				t.Errorf("Check = %q, want %q", got, tc.want)
			}
		})
	}
}
