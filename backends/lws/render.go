// Package lws runs Dispatches on a Kubernetes spoke as LeaderWorkerSets:
// one group whose leader is rank 0 (or an MPI job's launcher) and whose
// workers are the other nodes. The pods are the ones Trainer's runtime
// framework renders for a JobSet (backends/jobset), re-wired for LWS's
// naming: node rank from the worker index, rendezvous at the leader's address.
package lws

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/constants"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// Kind is the RemoteRef kind of this backend's remote work.
const Kind = "LeaderWorkerSet"

// Rendered is a Dispatch's LeaderWorkerSet and the objects its pods mount
// (an MPI job's SSH key Secret and hostfile ConfigMap), which Submit
// creates owned by it.
type Rendered struct {
	LWS        *lwsv1.LeaderWorkerSet
	Companions []client.Object
}

// workerIndexField is the downward-API path of a pod's index in its group:
// 0 for the leader, 1..size-1 for the workers.
var workerIndexField = "metadata.labels['" + lwsv1.WorkerIndexLabelKey + "']"

// completionIndexField is where a JobSet pod reads its index; Trainer's
// torch plugin points PET_NODE_RANK at it.
const completionIndexField = "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"

// Render turns d into the LeaderWorkerSet that runs it in opts.Namespace,
// under the Target's opts.Policy. Runtimes that do not map onto one leader
// and its workers (CheckRuntime; the hub's eligibility check renders too) are
// refused with an error wrapping backends.ErrRejected. The job's
// NetworkPolicy selects its pods by the set's name label.
func Render(d *v1alpha1.Dispatch, opts jobset.RenderOptions) (*Rendered, error) {
	opts.Check, opts.PeerLabel = CheckRuntime, lwsv1.SetNameLabelKey
	r, err := jobset.RenderAll(d, opts)
	if err != nil {
		return nil, err
	}
	lws, err := fromJobSet(r.JobSet)
	if err != nil {
		return nil, fmt.Errorf("%w: dispatch %s/%s: %w", backends.ErrRejected, d.Namespace, d.Name, err)
	}
	companions, err := rewireHostfile(r.Companions, r.JobSet.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: dispatch %s/%s: %w", backends.ErrRejected, d.Namespace, d.Name, err)
	}
	return &Rendered{LWS: lws, Companions: companions}, nil
}

// fromJobSet maps the JobSet Trainer rendered onto one LWS group: a single
// trainer job ("node") becomes leader and workers from one template; an MPI
// launcher and its nodes become leader and workers.
func fromJobSet(js *jobsetv1alpha2.JobSet) (*lwsv1.LeaderWorkerSet, error) {
	var node, launcher *jobsetv1alpha2.ReplicatedJob
	var others []string
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		switch rj.Name {
		case trainer.Node:
			node = rj
		case trainer.Launcher:
			launcher = rj
		default:
			others = append(others, rj.Name)
		}
	}
	if len(others) > 0 {
		return nil, fmt.Errorf("the LeaderWorkerSet backend runs a trainer's nodes (and an MPI launcher) only, not replicated jobs %s: use the JobSet backend for runtimes with initializers", strings.Join(others, ", "))
	}
	if node == nil {
		return nil, fmt.Errorf("the runtime has no %q replicated job for the LeaderWorkerSet's workers", trainer.Node)
	}
	for _, rj := range []*jobsetv1alpha2.ReplicatedJob{node, launcher} {
		if rj != nil && rj.Replicas != 1 {
			return nil, fmt.Errorf("replicated job %q has %d replicas; a LeaderWorkerSet group holds one", rj.Name, rj.Replicas)
		}
	}
	// A replicated job's dependsOn (launcher after nodes Ready) has no LWS
	// equivalent: the leader starts with its workers (docs/operator-guide.md).
	nodes := ptr.Deref(node.Template.Spec.Parallelism, 1)
	size := nodes
	worker := podTemplate(node)
	var leader *corev1.PodTemplateSpec
	if launcher != nil {
		if p := ptr.Deref(launcher.Template.Spec.Parallelism, 1); p != 1 {
			return nil, fmt.Errorf("the launcher runs %d pods; a LeaderWorkerSet has one leader", p)
		}
		leader = podTemplate(launcher)
		size = nodes + 1
	}
	lws := &lwsv1.LeaderWorkerSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: js.Name, Namespace: js.Namespace,
			Labels: maps.Clone(js.Labels), Annotations: maps.Clone(js.Annotations),
		},
		Spec: lwsv1.LeaderWorkerSetSpec{
			Replicas: ptr.To[int32](1),
			// The leader is rank 0 and the rendezvous point: create it first.
			StartupPolicy: lwsv1.LeaderCreatedStartupPolicy,
			LeaderWorkerTemplate: lwsv1.LeaderWorkerTemplate{
				LeaderTemplate: leader,
				WorkerTemplate: *worker,
				Size:           ptr.To(size),
				// A container that exits is restarted in place, never the
				// whole group: its exit code stays in the pod's status for
				// Observe, and the finished set is scaled to zero.
				RestartPolicy: lwsv1.NoneRestartPolicy,
			},
		},
	}
	return lws, nil
}

// podTemplate is rj's pod template re-wired for a LeaderWorkerSet: LWS's pods must restart their containers (StatefulSet pods), their
// node rank is their worker index, and torch's rendezvous is the leader.
func podTemplate(rj *jobsetv1alpha2.ReplicatedJob) *corev1.PodTemplateSpec {
	t := rj.Template.Spec.Template.DeepCopy()
	t.Labels = maps.Clone(t.Labels)
	maps.Copy(t.Labels, rj.Template.Labels)
	delete(t.Labels, jobsetv1alpha2.ReplicatedJobNameKey)
	t.Spec.RestartPolicy = corev1.RestartPolicyAlways
	// JobSet names pods' subdomain after itself; LWS sets its own.
	t.Spec.Subdomain = ""
	for _, cs := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
		for i := range cs {
			rewireEnv(&cs[i])
		}
	}
	return t
}

// rewireEnv points a container's JobSet-specific environment at its LWS
// equivalent. LWS's pod webhook puts LWS_LEADER_ADDRESS first in every
// container's env, so $(LWS_LEADER_ADDRESS) expands in the later entries.
func rewireEnv(c *corev1.Container) {
	for i := range c.Env {
		e := &c.Env[i]
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == completionIndexField {
			e.ValueFrom.FieldRef = &corev1.ObjectFieldSelector{FieldPath: workerIndexField}
		}
		if e.Name == trainer.TorchEnvMasterAddr {
			e.Value, e.ValueFrom = "$("+lwsv1.LwsLeaderAddress+")", nil
		}
	}
}

// rewireHostfile renames the hosts of an MPI hostfile from JobSet pod names
// (<name>-node-0-<i>, <name>-launcher-0-0) to the LWS group's (<name>-0-<i+1>,
// leader <name>-0), all in the subdomain <name>, which both share.
func rewireHostfile(objs []client.Object, name string) ([]client.Object, error) {
	for _, o := range objs {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		for key, data := range cm.Data {
			out, err := renameHosts(data, name)
			if err != nil {
				return nil, fmt.Errorf("configmap %s key %s: %w", cm.Name, key, err)
			}
			cm.Data[key] = out
		}
	}
	return objs, nil
}

func renameHosts(hostfile, name string) (string, error) {
	var b strings.Builder
	lines := strings.SplitAfter(hostfile, "\n")
	for _, line := range lines {
		if strings.TrimSpace(line) == "" {
			b.WriteString(line)
			continue
		}
		host, rest, _ := strings.Cut(line, " ")
		short, ok := strings.CutSuffix(host, "."+name)
		if !ok {
			return "", fmt.Errorf("host %q is not in subdomain %s", host, name)
		}
		var lwsHost string
		switch {
		case short == name+"-"+trainer.Launcher+"-0-0":
			lwsHost = name + "-0"
		case strings.HasPrefix(short, name+"-"+trainer.Node+"-0-"):
			i, err := strconv.Atoi(strings.TrimPrefix(short, name+"-"+trainer.Node+"-0-"))
			if err != nil {
				return "", fmt.Errorf("host %q has no node index", host)
			}
			lwsHost = fmt.Sprintf("%s-0-%d", name, i+1)
		default:
			return "", fmt.Errorf("host %q is neither the launcher nor a node", host)
		}
		b.WriteString(lwsHost + "." + name)
		if rest != "" {
			b.WriteString(" " + rest)
		}
	}
	return b.String(), nil
}

// trainerContainer is the container whose exit ends the job: the one named
// "node" (Trainer's name for the trainer and the launcher), else the first.
func trainerContainer(spec *corev1.PodSpec) string {
	return kubework.ContainerNamed(spec, trainer.Node)
}
