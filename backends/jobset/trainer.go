package jobset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	kftrainerruntime "github.com/kubeflow/trainer/v2/pkg/runtime"
	kftrainercore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	kftrainerfwk "github.com/kubeflow/trainer/v2/pkg/runtime/framework/core"
	kftrainerplugins "github.com/kubeflow/trainer/v2/pkg/runtime/framework/plugins"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetv1alpha2ac "sigs.k8s.io/jobset/client-go/applyconfiguration/jobset/v1alpha2"
)

// trainerFramework is Kubeflow Trainer's runtime framework, run in memory.
//
// Trainer's runtimes and plugins are written against a controller-runtime
// client and field indexer, but the parts trainyard calls never need the
// cluster: RuntimeInfo takes the runtime spec as an argument (trainyard
// passes the Dispatch's snapshot), and the component builders only read the
// cluster to skip rebuilding objects that already exist. So both are given
// an empty in-memory client, whose reads always answer NotFound, and an
// indexer that records nothing. No API server is contacted and no TrainJob or
// runtime CRD has to exist on the spoke.
type trainerFramework struct {
	runtimes map[string]kftrainerruntime.Runtime
	// builders are all of Trainer's component builder plugins: the JobSet,
	// MPI's SSH key Secret and hostfile, Flux's init script and curve key,
	// and the pod group plugins (which build nothing without a pod group
	// policy, and such runtimes are refused before rendering).
	builders *kftrainerfwk.Framework
}

var (
	frameworkOnce sync.Once
	frameworkVal  *trainerFramework
	errFramework  error
)

// sharedFramework initialises Trainer's framework once per process. core.New
// writes package globals in Trainer, so it must not run concurrently; the
// returned map is kept here rather than read back through core.Runtimes(), so
// another caller of core.New in the same binary cannot swap it under us.
func sharedFramework() (*trainerFramework, error) {
	frameworkOnce.Do(func() {
		frameworkVal, errFramework = newTrainerFramework(context.Background())
	})
	return frameworkVal, errFramework
}

// InitTrainerRuntimes initialises Trainer's runtime framework in this
// process, as renders do on first use. Trainer keeps its runtimes in package
// globals that Kueue's TrainJob code also reads (hub/kueuejob): the hub
// calls this before its controllers start, so the globals are written once,
// before anyone reads them.
func InitTrainerRuntimes() error {
	_, err := sharedFramework()
	return err
}

func newTrainerFramework(ctx context.Context) (*trainerFramework, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).Build()

	runtimes, err := kftrainercore.New(ctx, c, noopIndexer{}, nil)
	if err != nil {
		return nil, fmt.Errorf("initialise Trainer runtimes: %w", err)
	}
	builders, err := kftrainerfwk.New(ctx, c, kftrainerplugins.NewRegistry(), noopIndexer{}, nil)
	if err != nil {
		return nil, fmt.Errorf("initialise Trainer plugins: %w", err)
	}
	return &trainerFramework{runtimes: runtimes, builders: builders}, nil
}

// noopIndexer satisfies Trainer's set-up, which registers TrainJob indexes
// for its reconcilers' List calls; rendering never lists.
type noopIndexer struct{}

func (noopIndexer) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

// buildJobSet runs the same steps Trainer's TrainJob controller runs: the
// runtime's RuntimeInfo (ML policy plugins such as torch, MPI and Flux, pod
// group policy, pod network) and then every component builder, which syncs
// the pod counts and applies the pod sets' env, ports and volumes and the
// TrainJob's trainer overrides. Kueue's getChildJobSet stops short of the env
// merge (it only needs pod counts), which would lose torch's PET_* variables,
// so its shortcut is not copied here. The companions are the Secrets and
// ConfigMaps the JobSet mounts (MPI's SSH keys and hostfile, Flux's init
// script and curve key); Trainer makes them owned by the TrainJob, which
// exists only on the hub, so Submit makes them owned by the JobSet instead.
//
// Trainer's plugins dereference optional fields its webhooks and CRD
// defaults normally fill; a panic on such input is returned as an error, so
// one tenant's job cannot crash the agent.
func (f *trainerFramework) buildJobSet(tj *trainer.TrainJob, spec *trainer.TrainingRuntimeSpec) (js *jobsetv1alpha2.JobSet, companions []client.Object, err error) {
	defer func() {
		if r := recover(); r != nil {
			js, companions, err = nil, nil, fmt.Errorf("trainer's runtime framework failed on this job: %v", r)
		}
	}()
	key := kftrainerruntime.RuntimeRefToRuntimeRegistryKey(tj.Spec.RuntimeRef)
	rt, ok := f.runtimes[key]
	if !ok {
		return nil, nil, fmt.Errorf("unsupported runtime kind %q", key)
	}
	info, err := rt.RuntimeInfo(tj, spec.Template, spec.MLPolicy, spec.PodGroupPolicy)
	if err != nil {
		return nil, nil, fmt.Errorf("runtime info: %w", err)
	}
	objs, err := f.builders.RunComponentBuilderPlugins(context.Background(), info, tj)
	if err != nil {
		return nil, nil, fmt.Errorf("build JobSet: %w", err)
	}
	for _, o := range objs {
		var obj client.Object
		switch ac := o.(type) {
		case *jobsetv1alpha2ac.JobSetApplyConfiguration:
			if js, err = fromApply[jobsetv1alpha2.JobSet](ac); err != nil {
				return nil, nil, err
			}
			continue
		case *corev1ac.SecretApplyConfiguration:
			obj, err = fromApply[corev1.Secret](ac)
		case *corev1ac.ConfigMapApplyConfiguration:
			obj, err = fromApply[corev1.ConfigMap](ac)
		default:
			err = fmt.Errorf("trainer built an unexpected %T", o)
		}
		if err != nil {
			return nil, nil, err
		}
		obj.SetOwnerReferences(nil)
		companions = append(companions, obj)
	}
	if js == nil {
		return nil, nil, errors.New("trainer built no JobSet")
	}
	// Plugins are kept in a map, so their objects come in any order; a
	// stable order keeps creates and tests deterministic.
	slices.SortFunc(companions, func(a, b client.Object) int {
		return strings.Compare(fmt.Sprintf("%T/%s", a, a.GetName()), fmt.Sprintf("%T/%s", b, b.GetName()))
	})
	return js, companions, nil
}

// fromApply turns an apply configuration into its typed object through
// JSON, as Kueue does: both share the wire format.
func fromApply[T any, PT interface{ *T }](ac any) (PT, error) {
	raw, err := json.Marshal(ac)
	if err != nil {
		return nil, err
	}
	obj := PT(new(T))
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, err
	}
	return obj, nil
}
