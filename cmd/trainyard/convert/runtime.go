package convert

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/constants"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// MLPolicy names the ML policy source a runtime sets (mlPolicy.torch,
// mlPolicy.mpi, ...); "" when it sets none.
type MLPolicy string

// The policies converted jobs need.
const (
	policyTorch MLPolicy = "torch"
	policyMPI   MLPolicy = "mpi"
)

// shippedRuntimes are the runtimes Kubeflow Trainer v2.3.0 ships
// (manifests/base/runtimes) that convert prefers, in this order, over other
// runtimes with the policy. Trainer ships no plain MPI runtime any more:
// deepspeed-distributed is OpenMPI with sshd on every node, which is what an
// MPIJob's launcher expects; mlx-distributed is the same for MLX.
var shippedRuntimes = map[MLPolicy][]string{
	policyTorch: {"torch-distributed"},
	policyMPI:   {"deepspeed-distributed", "mlx-distributed"},
}

// jobsOf names the jobs a policy is picked for, in notes and errors.
var jobsOf = map[MLPolicy]string{policyTorch: "PyTorchJobs", policyMPI: "MPIJobs"}

// runtimeInfo is a runtime on the hub, as convert ranks it.
type runtimeInfo struct {
	kind, name, namespace string
	policy                MLPolicy
	// plain runtimes have no replicated jobs but the node and the
	// launcher: no dataset or model initializer a user must configure.
	plain bool
}

func (r runtimeInfo) String() string {
	s := r.kind + " " + r.name
	if r.namespace != "" {
		s = fmt.Sprintf("%s %s/%s", r.kind, r.namespace, r.name)
	}
	return fmt.Sprintf("%s (%s)", s, cmp.Or(string(r.policy), "no mlPolicy"))
}

func infoOf(kind, ns, name string, spec *trainer.TrainingRuntimeSpec) runtimeInfo {
	r := runtimeInfo{kind: kind, namespace: ns, name: name, policy: policyOf(spec.MLPolicy), plain: true}
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		if rj.Name != constants.Node && rj.Name != constants.Launcher {
			r.plain = false
		}
	}
	return r
}

func policyOf(p *trainer.MLPolicy) MLPolicy {
	switch {
	case p == nil:
		return ""
	case p.Torch != nil:
		return policyTorch
	case p.MPI != nil:
		return policyMPI
	case p.JAX != nil:
		return "jax"
	case p.XGBoost != nil:
		return "xgboost"
	case p.Flux != nil:
		return "flux"
	}
	return ""
}

// rank orders runtimes with a policy: Kubeflow's shipped names first, then
// plain runtimes, then a namespace's TrainingRuntimes, then by name.
func rank(policy MLPolicy) func(a, b runtimeInfo) int {
	pref := func(r runtimeInfo) int {
		if i := slices.Index(shippedRuntimes[policy], r.name); i >= 0 {
			return i
		}
		return len(shippedRuntimes[policy])
	}
	flag := func(b bool) int {
		if b {
			return 0
		}
		return 1
	}
	return func(a, b runtimeInfo) int {
		return cmp.Or(
			cmp.Compare(pref(a), pref(b)),
			cmp.Compare(flag(a.plain), flag(b.plain)),
			cmp.Compare(flag(a.namespace != ""), flag(b.namespace != "")),
			cmp.Compare(a.name, b.name),
		)
	}
}

// RuntimeCatalog picks runtimes for jobs converted without --runtime from
// the hub's ClusterTrainingRuntimes (listed once) and TrainingRuntimes
// (listed once per namespace), and notes each choice once.
type RuntimeCatalog struct {
	ctx context.Context
	// open connects to the hub when a job first needs a runtime, and
	// returns the namespace of jobs without one (the context's, or -n).
	open      func() (client.Reader, string, error)
	opened    bool
	reader    client.Reader
	namespace string
	// kind limits the search to one kind of runtime; "" searches both.
	kind  string
	notes io.Writer

	cluster       []runtimeInfo
	clusterListed bool
	namespaced    map[string][]runtimeInfo
	// unlisted says which lists RBAC refused, for errors.
	unlisted []string
	noted    map[string]bool
}

func NewRuntimeCatalog(ctx context.Context, open func() (client.Reader, string, error), kind string, notes io.Writer) *RuntimeCatalog {
	return &RuntimeCatalog{
		ctx: ctx, open: open, kind: kind, notes: notes,
		namespaced: map[string][]runtimeInfo{}, noted: map[string]bool{},
	}
}

// Pick returns the best-ranked runtime with policy for a job in ns (the
// catalog's namespace when ""), and the namespace of a TrainingRuntime.
func (c *RuntimeCatalog) Pick(policy MLPolicy, ns string) (trainer.RuntimeRef, string, error) {
	if !c.opened {
		r, namespace, err := c.open()
		if err != nil {
			return trainer.RuntimeRef{}, "", fmt.Errorf("no --runtime, and the hub's runtimes cannot be listed: %w (pass --runtime NAME to convert without the hub)", err)
		}
		c.reader, c.namespace, c.opened = r, namespace, true
	}
	ns = cmp.Or(ns, c.namespace)
	all, err := c.runtimes(ns)
	if err != nil {
		return trainer.RuntimeRef{}, "", fmt.Errorf("%w (pass --runtime NAME to convert without the hub)", err)
	}
	var match []runtimeInfo
	for _, r := range all {
		if r.policy == policy {
			match = append(match, r)
		}
	}
	if len(match) == 0 {
		return trainer.RuntimeRef{}, "", c.noMatch(policy, ns, all)
	}
	slices.SortStableFunc(match, rank(policy))
	chosen := match[0]
	if key := fmt.Sprintf("%s/%s/%s", policy, ns, chosen); !c.noted[key] {
		c.noted[key] = true
		fmt.Fprintf(c.notes, "note: %s in namespace %s refer to %s %s (mlPolicy.%s)%s; pass --runtime to choose another\n",
			jobsOf[policy], ns, chosen.kind, chosen.name, policy, others(match[1:]))
	}
	ref := trainer.RuntimeRef{Name: chosen.name, APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(chosen.kind)}
	return ref, chosen.namespace, nil
}

func others(rs []runtimeInfo) string {
	if len(rs) == 0 {
		return ""
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.kind + " " + r.name
	}
	return "; also found: " + strings.Join(names, ", ")
}

// noMatch is the error for a policy no runtime has, listing what was found.
func (c *RuntimeCatalog) noMatch(policy MLPolicy, ns string, all []runtimeInfo) error {
	found := "none"
	if len(all) > 0 {
		names := make([]string, len(all))
		for i, r := range all {
			names[i] = r.String()
		}
		found = strings.Join(names, ", ")
	}
	if len(c.unlisted) > 0 {
		found += " (not allowed to list " + strings.Join(c.unlisted, ", ") + ")"
	}
	return fmt.Errorf("no runtime with mlPolicy.%s for %s in namespace %s; runtimes found: %s; apply one (Kubeflow Trainer ships %s) or pass --runtime NAME",
		policy, jobsOf[policy], ns, found, strings.Join(shippedRuntimes[policy], ", "))
}

// runtimes lists the TrainingRuntimes of ns and the ClusterTrainingRuntimes
// the catalog searches.
func (c *RuntimeCatalog) runtimes(ns string) ([]runtimeInfo, error) {
	if !c.clusterListed && c.kind != trainer.TrainingRuntimeKind {
		var l trainer.ClusterTrainingRuntimeList
		if err := c.list(&l, trainer.ClusterTrainingRuntimeKind+"s"); err != nil {
			return nil, err
		}
		for i := range l.Items {
			c.cluster = append(c.cluster, infoOf(trainer.ClusterTrainingRuntimeKind, "", l.Items[i].Name, &l.Items[i].Spec))
		}
		c.clusterListed = true
	}
	if _, ok := c.namespaced[ns]; !ok && c.kind != trainer.ClusterTrainingRuntimeKind {
		var l trainer.TrainingRuntimeList
		if err := c.list(&l, trainer.TrainingRuntimeKind+"s in "+ns, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		infos := []runtimeInfo{}
		for i := range l.Items {
			infos = append(infos, infoOf(trainer.TrainingRuntimeKind, ns, l.Items[i].Name, &l.Items[i].Spec))
		}
		c.namespaced[ns] = infos
	}
	return append(slices.Clone(c.namespaced[ns]), c.cluster...), nil
}

// list lists into l; a list RBAC forbids is remembered and counts as empty.
func (c *RuntimeCatalog) list(l client.ObjectList, what string, opts ...client.ListOption) error {
	err := c.reader.List(c.ctx, l, opts...)
	if apierrors.IsForbidden(err) {
		c.unlisted = append(c.unlisted, what)
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", what, hubview.Explain(err))
	}
	return nil
}
