package outage

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	// slurmTimeout bounds waits on Slurm: each job start forks a
	// slurmstepd on a 2-core machine that also runs three control planes.
	slurmTimeout = 2 * time.Minute
	// steady is how long everything must stay as it was once the agents
	// hold their leases again: several fence passes, resyncs and polls.
	steady = 15 * time.Second
)

// job is one running TrainJob and what ran for it before the outage.
type job struct {
	tj       *trainer.TrainJob
	workload types.UID
	dispatch v1alpha1.Dispatch
	// slurmID and stamps (the chroot path its process writes) of a Slurm job.
	slurmID int32
	stamps  string
	// spoke, jobSetUID and pods (by name) of a JobSet.
	spoke     *kube.Cluster
	jobSetUID types.UID
	pods      map[string]types.UID
}

// jobs are a JobSet on the spoke and a Slurm job, each an hour long.
type jobs struct{ kube, hpc *job }

// startJobs submits the two TrainJobs and waits until both run: the
// JobSet's pods Running, the Slurm job's process writing its start stamp.
func startJobs(t *testing.T, prefix string) *jobs {
	t.Helper()
	kubeRT := tytesting.MakeClusterTrainingRuntime(prefix+"-kube").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "1h").Obj()
	hpcRT := tytesting.MakeClusterTrainingRuntime(prefix + "-hpc").Obj()
	stampFile := strings.ReplaceAll(workDir, "%u", slurmUser) + "/" + prefix + ".stamps"
	js := &jobs{
		kube: &job{tj: tytesting.MakeTrainJob(prefix+"-kube", tenant).Queue(kubeQueue).
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, kubeRT.Name).NumNodes(1).GPUsPerNode(2).Obj()},
		hpc: &job{stamps: stampFile, tj: tytesting.MakeTrainJob(prefix+"-hpc", tenant).Queue(hpcQueue).
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, hpcRT.Name).NumNodes(1).GPUsPerNode(1).
			Command([]string{"bash"}, "-c", stampScript(stampFile)).Obj()},
	}
	// The chroot's filesystem outlives the cluster: no stamps of a run before.
	if err := os.Remove(env.cluster.Path(stampFile)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := env.fleet.Hub.Client
	for _, rt := range []*trainer.ClusterTrainingRuntime{kubeRT, hpcRT} {
		NewWithT(t).Expect(h.Create(ctx, rt)).To(Succeed())
		t.Cleanup(func() { _ = h.Delete(ctx, rt) })
	}
	for _, j := range []*job{js.kube, js.hpc} {
		util.CreateTrainJob(NewWithT(t), h, j.tj)
		t.Cleanup(func() { _ = h.Delete(ctx, j.tj, client.PropagationPolicy(metav1.DeletePropagationBackground)) })
	}
	js.kube.waitRunning(t)
	js.hpc.waitRunning(t)
	return js
}

// stampScript is the Slurm job: it writes its start to path, and its end
// with the cause, a SIGTERM (scancel) or its own exit.
func stampScript(path string) string {
	return `f=` + path + `
echo "start $(date +%s.%N) job=$SLURM_JOB_ID host=$(hostname)" >> "$f"
sleep 3600 & p=$!
trap 'echo "end $(date +%s.%N) SIGTERM" >> "$f"; kill $p; exit 143' TERM
wait $p
echo "end $(date +%s.%N) exit" >> "$f"
`
}

// waitRunning waits until j's Dispatch is Running and its remote work
// runs, and records both.
func (j *job) waitRunning(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	j.workload = util.WorkloadOf(g, env.fleet.Hub.Client, j.tj).UID
	g.Eventually(func(g Gomega) {
		j.dispatch = j.onlyDispatch(g)
		g.Expect(j.dispatch.Status.Phase).To(Equal(v1alpha1.DispatchRunning), "dispatch %s: %s", j.dispatch.Name, j.dispatch.Status.Message)
		g.Expect(j.dispatch.Status.Remote).NotTo(BeNil())
	}, slurmTimeout, util.Interval).Should(Succeed())
	if j.stamps != "" {
		id, err := strconv.Atoi(j.dispatch.Status.Remote.ID)
		g.Expect(err).NotTo(HaveOccurred(), "Slurm job id of %s", j.dispatch.Name)
		j.slurmID = int32(id)
		g.Eventually(func(g Gomega) {
			starts, _ := stampsOf(g, j.stamps)
			g.Expect(starts).To(HaveLen(1))
		}, slurmTimeout, util.Interval).Should(Succeed(), "the Slurm job's process did not start")
		return
	}
	j.spoke = spokeNamed(j.dispatch.Spec.TargetName)
	g.Eventually(func(g Gomega) {
		var set jobset.JobSet
		g.Expect(j.spoke.Client.Get(context.Background(), j.remoteKey(), &set)).To(Succeed())
		j.jobSetUID = set.UID
		j.pods = map[string]types.UID{}
		for _, p := range j.podsOf(g) {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
			j.pods[p.Name] = p.UID
		}
		g.Expect(j.pods).NotTo(BeEmpty())
	}, util.Timeout, util.Interval).Should(Succeed())
}

// unchanged checks that j runs as it did before the outage: the same one
// Dispatch at the same attempt, Running, as its TrainJob says, and the
// same remote work, never restarted.
func (j *job) unchanged(g Gomega) {
	d := j.onlyDispatch(g)
	g.Expect(d.UID).To(Equal(j.dispatch.UID), "the Dispatch of %s was replaced", j.tj.Name)
	g.Expect(d.Spec.Attempt).To(Equal(j.dispatch.Spec.Attempt))
	g.Expect(d.Spec.TargetName).To(Equal(j.dispatch.Spec.TargetName))
	g.Expect(d.Status.Phase).To(Equal(v1alpha1.DispatchRunning), "dispatch %s: %s: %s", d.Name, d.Status.Reason, d.Status.Message)
	g.Expect(d.Status.Remote).To(Equal(j.dispatch.Status.Remote))
	trainJobRunning(g, j.tj, d)
	if j.stamps != "" {
		info, err := env.rest.Job(context.Background(), j.slurmID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(info.JobState).To(ConsistOf("RUNNING"), "Slurm job %d", j.slurmID)
		g.Expect(info.RestartCount).To(BeZero(), "Slurm job %d restarts", j.slurmID)
		starts, ends := stampsOf(g, j.stamps)
		g.Expect(starts).To(HaveLen(1), "starts of the Slurm job's process")
		g.Expect(ends).To(BeEmpty(), "ends of the Slurm job's process")
		return
	}
	var set jobset.JobSet
	g.Expect(j.spoke.Client.Get(context.Background(), j.remoteKey(), &set)).To(Succeed())
	g.Expect(set.UID).To(Equal(j.jobSetUID), "JobSet %s was made again", set.Name)
	g.Expect(set.DeletionTimestamp).To(BeNil(), "JobSet %s is being deleted", set.Name)
	g.Expect(set.Status.Restarts).To(BeZero(), "JobSet %s restarts", set.Name)
	now := map[string]types.UID{}
	for _, p := range j.podsOf(g) {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
		now[p.Name] = p.UID
	}
	g.Expect(now).To(Equal(j.pods), "pods of JobSet %s", set.Name)
}

// survived waits until both agents have renewed their leases since the
// outage ended and both Targets are Available, and checks that nothing
// changed, then and for steady after.
func (js *jobs) survived(t *testing.T, rec *recorder, ended time.Time) {
	t.Helper()
	g := NewWithT(t)
	for _, j := range []*job{js.kube, js.hpc} {
		var c *metav1.Condition
		g.Eventually(func(g Gomega) { c = renewedSince(g, j.dispatch.Spec.TargetName, ended) }, util.Timeout, util.Interval).Should(Succeed())
		t.Logf("%v after the outage: %s's agent has renewed its lease; Target Available %s since %s (%s)",
			time.Since(ended).Round(100*time.Millisecond), j.dispatch.Spec.TargetName, c.Reason, c.LastTransitionTime.UTC().Format(time.TimeOnly), c.Message)
	}
	check := func(g Gomega) {
		js.kube.unchanged(g)
		js.hpc.unchanged(g)
		g.Expect(rec.violations()).To(BeEmpty(), "seen by the watches and polls since before the outage")
	}
	g.Eventually(check, util.Timeout, util.Interval).Should(Succeed())
	g.Consistently(check, steady, time.Second).Should(Succeed())
	starts, _ := stampsOf(g, js.hpc.stamps)
	t.Logf("after the outage: Slurm job %d RUNNING, process %s; JobSet %s/%s uid %s with %d pods unchanged; attempts %s=%d, %s=%d",
		js.hpc.slurmID, starts[0], js.kube.dispatch.Status.Remote.Namespace, js.kube.dispatch.Status.Remote.Name, js.kube.jobSetUID,
		len(js.kube.pods), js.kube.dispatch.Name, js.kube.dispatch.Spec.Attempt, js.hpc.dispatch.Name, js.hpc.dispatch.Spec.Attempt)
}

// renewedSince checks that target's agent has renewed its Lease since t
// and that the Target is Available, and returns that condition.
func renewedSince(g Gomega, target string, t time.Time) *metav1.Condition {
	ctx := context.Background()
	var tg v1alpha1.Target
	g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: target}, &tg)).To(Succeed())
	var lease coordinationv1.Lease
	g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Namespace: tg.Spec.Agent.Namespace, Name: v1alpha1.LeaseName(target)}, &lease)).To(Succeed())
	g.Expect(lease.Spec.RenewTime).NotTo(BeNil())
	g.Expect(lease.Spec.RenewTime.Time).To(BeTemporally(">", t), "the last renewal of %s's lease", target)
	c := apimeta.FindStatusCondition(tg.Status.Conditions, v1alpha1.TargetAvailable)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Target %s: %s: %s", target, c.Reason, c.Message)
	return c
}

// finish deletes both TrainJobs and waits until their remote work is gone
// (the Slurm job's process saw its SIGTERM then) and Kueue holds no quota.
func (js *jobs) finish(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	for _, j := range []*job{js.kube, js.hpc} {
		g.Expect(env.fleet.Hub.Client.Delete(ctx, j.tj, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		var set jobset.JobSet
		err := js.kube.spoke.Client.Get(ctx, js.kube.remoteKey(), &set)
		g.Expect(err).To(MatchError(ContainSubstring("not found")), "JobSet of %s", js.kube.tj.Name)
		_, ends := stampsOf(g, js.hpc.stamps)
		g.Expect(ends).To(HaveLen(1), "end stamps of the Slurm job's process")
	}, slurmTimeout, util.Interval).Should(Succeed())
	g.Eventually(quotaReleased, util.Timeout, util.Interval).Should(Succeed())
	starts, ends := stampsOf(g, js.hpc.stamps)
	t.Logf("deleted: Slurm job %d process %s, %s; quota released", js.hpc.slurmID, starts[0], ends[0])
}

// onlyDispatch is the one Dispatch of j's Workload; a second (another
// attempt) fails the check.
func (j *job) onlyDispatch(g Gomega) v1alpha1.Dispatch {
	var list v1alpha1.DispatchList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &list,
		client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(j.workload)})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1), "Dispatches of %s", j.tj.Name)
	return list.Items[0]
}

// trainJobRunning checks that the hub TrainJob says it runs where d does,
// and has not ended.
func trainJobRunning(g Gomega, tj *trainer.TrainJob, d v1alpha1.Dispatch) {
	var cur trainer.TrainJob
	g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), &cur)).To(Succeed())
	c := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.TrainJobRunning)
	g.Expect(c).NotTo(BeNil(), "TrainJob %s conditions %v", tj.Name, cur.Status.Conditions)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "TrainJob %s Running: %s", tj.Name, c.Message)
	g.Expect(c.Message).To(HaveSuffix(fmt.Sprintf("on target %s (attempt %d)", d.Spec.TargetName, d.Spec.Attempt)))
	for _, end := range []string{trainer.TrainJobComplete, trainer.TrainJobFailed} {
		g.Expect(apimeta.FindStatusCondition(cur.Status.Conditions, end)).To(BeNil(), "TrainJob %s is %s", tj.Name, end)
	}
}

// quotaReleased checks that neither ClusterQueue holds a Workload or quota.
func quotaReleased(g Gomega) {
	for _, name := range []string{"cq-kube", "cq-hpc"} {
		var cq kueue.ClusterQueue
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Name: name}, &cq)).To(Succeed())
		g.Expect(cq.Status.ReservingWorkloads).To(BeZero(), "%s reserving", name)
		g.Expect(cq.Status.AdmittedWorkloads).To(BeZero(), "%s admitted", name)
		for _, f := range cq.Status.FlavorsReservation {
			for _, r := range f.Resources {
				g.Expect(r.Total.IsZero()).To(BeTrue(), "%s reserves %s of %s", name, r.Total.String(), r.Name)
			}
		}
	}
}

// readStamps reads a Slurm job's stamp file (chroot path): its start and
// end lines; none while it does not exist.
func readStamps(path string) (starts, ends []string, err error) {
	raw, err := os.ReadFile(env.cluster.Path(path))
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		switch {
		case strings.HasPrefix(line, "start "):
			starts = append(starts, stampTime(line))
		case strings.HasPrefix(line, "end "):
			ends = append(ends, stampTime(line))
		}
	}
	return starts, ends, err
}

// stampsOf is readStamps inside a Gomega check.
func stampsOf(g Gomega, path string) (starts, ends []string) {
	starts, ends, err := readStamps(path)
	g.Expect(err).NotTo(HaveOccurred())
	return starts, ends
}

// stampTime shows a stamp line with its epoch seconds as a time.
func stampTime(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return line
	}
	secs, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return line
	}
	at := time.Unix(0, int64(secs*1e9)).UTC().Format("15:04:05.000")
	return strings.Join(slices.Concat([]string{f[0], at}, f[2:]), " ")
}

func (j *job) remoteKey() client.ObjectKey {
	return client.ObjectKey{Namespace: j.dispatch.Status.Remote.Namespace, Name: j.dispatch.Status.Remote.Name}
}

// podsOf lists the pods of j's JobSet.
func (j *job) podsOf(g Gomega) []corev1.Pod {
	var list corev1.PodList
	g.Expect(j.spoke.Client.List(context.Background(), &list, client.InNamespace(j.dispatch.Status.Remote.Namespace),
		client.MatchingLabels{jobset.JobSetNameKey: j.dispatch.Status.Remote.Name})).To(Succeed())
	return list.Items
}

func spokeNamed(name string) *kube.Cluster {
	for _, s := range env.fleet.Spokes {
		if s.Name == name {
			return s
		}
	}
	return nil
}
