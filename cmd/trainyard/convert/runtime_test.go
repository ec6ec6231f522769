package convert

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// pickShipped picks the first of Kubeflow's shipped runtimes for a policy,
// as convert does on a hub with Trainer's default runtimes.
func pickShipped(policy MLPolicy, _ string) (trainer.RuntimeRef, string, error) {
	return ref(trainer.ClusterTrainingRuntimeKind, shippedRuntimes[policy][0]), "", nil
}

func ref(kind, name string) trainer.RuntimeRef {
	return trainer.RuntimeRef{Name: name, APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(kind)}
}

// kubeflowRuntimes are the ClusterTrainingRuntimes Trainer v2.3.0 ships in
// manifests/base/runtimes, as an admin applies them.
func kubeflowRuntimes(t *testing.T) []client.Object {
	t.Helper()
	var objs []client.Object
	for _, f := range []string{
		"torch_distributed.yaml", "deepspeed_distributed.yaml", "mlx_distributed.yaml", "jax_distributed.yaml",
		"xgboost_distributed.yaml", "torchtune/llama3_2/llama3_2_1B.yaml", "data-cache/torch_distributed_with_cache.yaml",
	} {
		rt, err := tytesting.ShippedRuntime("manifests/base/runtimes/" + f)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, rt)
	}
	return objs
}

func clusterRuntime(name string, spec trainer.TrainingRuntimeSpec) *trainer.ClusterTrainingRuntime {
	return &trainer.ClusterTrainingRuntime{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func namespacedRuntime(ns, name string, spec trainer.TrainingRuntimeSpec) *trainer.TrainingRuntime {
	return &trainer.TrainingRuntime{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

func TestRuntimeCatalogPick(t *testing.T) {
	forbidClusterRuntimes := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
		if _, ok := l.(*trainer.ClusterTrainingRuntimeList); ok {
			return apierrors.NewForbidden(schema.GroupResource{Group: trainer.GroupVersion.Group, Resource: "clustertrainingruntimes"}, "", errors.New("RBAC"))
		}
		return c.List(ctx, l, opts...)
	}}
	cases := map[string]struct {
		objs      func(t *testing.T) []client.Object
		forbid    bool
		kind      string
		policy    MLPolicy
		namespace string
		want      trainer.RuntimeRef
		wantNS    string
		wantNote  string
		wantErr   string
	}{
		"Kubeflow's runtimes: torch-distributed for PyTorchJobs": {
			objs: kubeflowRuntimes, policy: policyTorch,
			want:     ref(trainer.ClusterTrainingRuntimeKind, "torch-distributed"),
			wantNote: "note: PyTorchJobs in namespace team-a refer to ClusterTrainingRuntime torch-distributed (mlPolicy.torch); also found: ClusterTrainingRuntime torch-distributed-with-cache, ClusterTrainingRuntime torchtune-llama3.2-1b; pass --runtime to choose another\n",
		},
		"Kubeflow's runtimes: deepspeed-distributed for MPIJobs": {
			objs: kubeflowRuntimes, policy: policyMPI, namespace: "team-b",
			want:     ref(trainer.ClusterTrainingRuntimeKind, "deepspeed-distributed"),
			wantNote: "note: MPIJobs in namespace team-b refer to ClusterTrainingRuntime deepspeed-distributed (mlPolicy.mpi); also found: ClusterTrainingRuntime mlx-distributed; pass --runtime to choose another\n",
		},
		"other names: a plain runtime first, then a namespace's": {
			objs: func(*testing.T) []client.Object {
				return []client.Object{
					clusterRuntime("a-torch", tytesting.TorchRuntimeSpec(1)),
					namespacedRuntime("team-a", "team-torch", tytesting.TorchRuntimeSpec(1)),
					namespacedRuntime("team-b", "b-torch", tytesting.TorchRuntimeSpec(1)),
				}
			},
			policy: policyTorch,
			want:   ref(trainer.TrainingRuntimeKind, "team-torch"), wantNS: "team-a",
			wantNote: "note: PyTorchJobs in namespace team-a refer to TrainingRuntime team-torch (mlPolicy.torch); also found: ClusterTrainingRuntime a-torch; pass --runtime to choose another\n",
		},
		"--runtime-kind TrainingRuntime searches only the namespace": {
			objs: func(*testing.T) []client.Object {
				return []client.Object{
					clusterRuntime("deepspeed-distributed", tytesting.MPIRuntimeSpec(1, 1)),
					namespacedRuntime("team-a", "team-mpi", tytesting.MPIRuntimeSpec(1, 1)),
				}
			},
			kind: trainer.TrainingRuntimeKind, policy: policyMPI,
			want: ref(trainer.TrainingRuntimeKind, "team-mpi"), wantNS: "team-a",
			wantNote: "note: MPIJobs in namespace team-a refer to TrainingRuntime team-mpi (mlPolicy.mpi); pass --runtime to choose another\n",
		},
		"no runtime with the policy: the error lists those found": {
			objs: func(*testing.T) []client.Object {
				return []client.Object{
					clusterRuntime("torch-distributed", tytesting.TorchRuntimeSpec(1)),
					namespacedRuntime("team-b", "team-mpi", tytesting.MPIRuntimeSpec(1, 1)),
				}
			},
			policy:  policyMPI,
			wantErr: "no runtime with mlPolicy.mpi for MPIJobs in namespace team-a; runtimes found: ClusterTrainingRuntime torch-distributed (torch); apply one (Kubeflow Trainer ships deepspeed-distributed, mlx-distributed) or pass --runtime NAME",
		},
		"no runtimes at all, and ClusterTrainingRuntimes not allowed": {
			objs: func(*testing.T) []client.Object { return nil }, forbid: true,
			policy:  policyTorch,
			wantErr: "no runtime with mlPolicy.torch for PyTorchJobs in namespace team-a; runtimes found: none (not allowed to list ClusterTrainingRuntimes); apply one (Kubeflow Trainer ships torch-distributed) or pass --runtime NAME",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(hubview.Scheme()).WithObjects(tc.objs(t)...)
			if tc.forbid {
				b = b.WithInterceptorFuncs(forbidClusterRuntimes)
			}
			c := b.Build()
			var notes bytes.Buffer
			open := func() (client.Reader, string, error) { return c, "team-a", nil }
			cat := NewRuntimeCatalog(context.Background(), open, tc.kind, &notes)
			got, ns, err := cat.Pick(tc.policy, tc.namespace)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || ns != tc.wantNS {
				t.Errorf("runtime (-want +got):\n%s\nnamespace %q, want %q", diff, ns, tc.wantNS)
			}
			// A second job of the same kind is not noted again.
			if _, _, err := cat.Pick(tc.policy, tc.namespace); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantNote, notes.String()); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}
