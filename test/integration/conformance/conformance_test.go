package conformance

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// A variant is one way the docs write a TrainJob against a runtime.
type variant struct {
	name string
	// command, when set, is the trainer command; it exists on the Slurm
	// nodes too, so eligible jobs really run there.
	command []string
	// perNode are the trainer's resourcesPerNode; nil asks for nothing.
	perNode corev1.ResourceList
}

var (
	cpuOnly = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	oneGPU  = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi"),
		v1alpha1.GPUResource: resource.MustParse("1")}
	echo = []string{"sh", "-c", "echo trainyard conformance"}
)

// perTarget are the variants sent to each target's own queue.
var perTarget = []variant{
	{name: "nocmd", perNode: cpuOnly},
	{name: "cmd", command: echo, perNode: cpuOnly},
	{name: "gpu", command: echo, perNode: oneGPU},
}

// cell is one TrainJob of the matrix and how it ended.
type cell struct {
	runtime, target, variant string
	job                      *trainer.TrainJob
	// outcome is "Succeeded on <target>", "refused: <check message>" or
	// "Failed: <message>"; empty while the job is under way.
	outcome string
	ranOn   string
	refused string
	failed  string
	attempt int
}

func (c *cell) done() bool { return c.outcome != "" }

func trainJob(name, queue, runtime string, v variant) *trainer.TrainJob {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant,
		Labels: map[string]string{kueueconstants.QueueLabel: queue}}}
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: runtime}
	if v.command != nil || v.perNode != nil {
		tj.Spec.Trainer = &trainer.Trainer{Command: v.command}
		if v.perNode != nil {
			tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Requests: v.perNode, Limits: v.perNode}
		}
	}
	return tj
}

// shortName keeps job names readable and within 63 characters.
func shortName(runtime string) string {
	r := strings.NewReplacer("-distributed", "", "torchtune-", "tt-", ".", "-", "-with-cache", "-cache")
	return r.Replace(runtime)
}

// longName is a TrainJob name of exactly 63 characters.
func longName(target string) string {
	n := "conformance-name-at-the-kubernetes-limit-" + target + "-"
	return n + strings.Repeat("x", 63-len(n))
}

func TestShippedRuntimesOnEveryTarget(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	h := env.fleet.Hub.Client
	runtimes := shippedRuntimeNames(t)

	var cells []*cell
	for _, rt := range runtimes {
		for _, tg := range targets {
			for _, v := range perTarget {
				name := fmt.Sprintf("%s-%s-%s", shortName(rt), tg.name, v.name)
				cells = append(cells, &cell{runtime: rt, target: tg.name, variant: v.name, job: trainJob(name, queueOf(tg.name), rt, v)})
			}
		}
		// As the docs write it: a runtime reference and nothing else.
		cells = append(cells, &cell{runtime: rt, target: "any", variant: "docs",
			job: trainJob(shortName(rt)+"-docs", anyQueue, rt, variant{})})
	}
	for _, tg := range targets {
		cells = append(cells, &cell{runtime: "torch-distributed", target: tg.name, variant: "63-char name",
			job: trainJob(longName(tg.name), queueOf(tg.name), "torch-distributed", variant{command: echo, perNode: cpuOnly})})
	}
	for _, c := range cells {
		createOrRecord(g, c)
	}

	// Every cell ends: no job hangs or loops holding quota.
	awaitOutcomes(ctx, g, cells, 10*time.Minute)

	fmt.Println(matrix(cells))

	for _, c := range cells {
		where := fmt.Sprintf("%s on %s (%s)", c.runtime, c.target, c.variant)
		if c.failed != "" {
			t.Errorf("%s failed: %s", where, c.failed)
		}
		if c.ranOn != "" && c.target != "any" && c.ranOn != c.target {
			t.Errorf("%s ran on %s", where, c.ranOn)
		}
		if c.refused != "" {
			if c.target != "any" && !strings.Contains(c.refused, c.target+": ") {
				t.Errorf("%s refused without naming the target: %q", where, c.refused)
			}
			// Refused at placement: no Dispatch, no attempt burnt.
			if c.attempt > 1 {
				t.Errorf("%s refused after %d attempts", where, c.attempt)
			}
		}
	}
	// What each kind of target is known to run or refuse.
	for _, c := range cells {
		where := fmt.Sprintf("%s on %s (%s)", c.runtime, c.target, c.variant)
		switch {
		case c.target == "spoke1" && c.ranOn == "":
			t.Errorf("%s: a JobSet spoke runs every runtime Kubeflow ships, got %s", where, c.outcome)
		case c.runtime == "flux-distributed" && c.target == "hpc":
			if !strings.Contains(c.outcome, "Flux launcher is not offered") {
				t.Errorf("%s: the harness Slurm has no Flux, got %s", where, c.outcome)
			}
		case hasInitializers(c.runtime) && c.target == "hpc":
			if !strings.Contains(c.outcome, "runs only on Kubernetes spokes") {
				t.Errorf("%s: Slurm runs no initializer steps, got %s", where, c.outcome)
			}
		case c.target == "hpc" && c.variant == "nocmd" && !strings.Contains(c.outcome, "no command"):
			t.Errorf("%s: Slurm without containers must refuse a job with no command, got %s", where, c.outcome)
		case strings.HasPrefix(c.runtime, "torchtune") && c.target == "spoke2" && !strings.Contains(c.outcome, "volumeClaimPolicies"):
			t.Errorf("%s: a LeaderWorkerSet has no shared volume claims, got %s", where, c.outcome)
		case c.runtime == "torch-distributed" && c.variant != "nocmd" && c.target != "any" && c.ranOn == "":
			t.Errorf("%s: every target runs torch-distributed with a command, got %s", where, c.outcome)
		}
	}

	// Refused or finished, nothing holds quota.
	g.Eventually(func(g gomega.Gomega) {
		var cqs kueue.ClusterQueueList
		g.Expect(h.List(ctx, &cqs)).To(gomega.Succeed())
		for _, cq := range cqs.Items {
			g.Expect(cq.Status.ReservingWorkloads).To(gomega.BeZero(), "ClusterQueue %s", cq.Name)
		}
	}, time.Minute, time.Second).Should(gomega.Succeed())
}

// createOrRecord creates c's TrainJob, once, as a user does. The hub must
// accept every job: a refusal at creation is a cell that failed, reported
// with the rest of the matrix.
func createOrRecord(_ gomega.Gomega, c *cell) {
	if err := env.fleet.Hub.Client.Create(context.Background(), c.job.DeepCopy()); err != nil {
		c.failed = "the hub refused to create it: " + err.Error()
		c.outcome = "Failed: " + c.failed
	}
}

// observe records c's outcome once the TrainJob finished or trainyard's
// check rejected its Workload.
func observe(ctx context.Context, g gomega.Gomega, c *cell) {
	h := env.fleet.Hub.Client
	var tj trainer.TrainJob
	g.Expect(h.Get(ctx, client.ObjectKeyFromObject(c.job), &tj)).To(gomega.Succeed())
	var wls kueue.WorkloadList
	g.Expect(h.List(ctx, &wls, client.InNamespace(tenant))).To(gomega.Succeed())
	var wl *kueue.Workload
	for i := range wls.Items {
		for _, o := range wls.Items[i].OwnerReferences {
			if o.UID == tj.UID {
				wl = &wls.Items[i]
			}
		}
	}
	if wl != nil {
		c.attempt, _ = strconv.Atoi(wl.Annotations[v1alpha1.AnnotationAttempt])
	}
	// trainyard says on the TrainJob why it will never run it; Kueue resets
	// the check of a deactivated Workload, so the check is no record.
	if cond := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed); cond != nil && cond.Status == metav1.ConditionTrue {
		if cond.Reason == v1alpha1.ReasonDispatchRejected {
			c.refused, c.outcome = cond.Message, "refused: "+cond.Message
			return
		}
		c.failed, c.outcome = cond.Message, "Failed: "+cond.Message
		return
	}
	if !apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) || wl == nil {
		return
	}
	var ds v1alpha1.DispatchList
	g.Expect(h.List(ctx, &ds)).To(gomega.Succeed())
	for _, d := range ds.Items {
		if d.Spec.Workload.UID == wl.UID && d.Status.Phase == v1alpha1.DispatchSucceeded {
			c.ranOn = d.Spec.TargetName
		}
	}
	c.outcome = "Succeeded on " + c.ranOn
}

// awaitOutcomes waits until every cell has ended: no job may hang or loop
// holding quota.
func awaitOutcomes(ctx context.Context, g gomega.Gomega, cells []*cell, timeout time.Duration) {
	g.Eventually(func(g gomega.Gomega) {
		pending := 0
		for _, c := range cells {
			if !c.done() {
				observe(ctx, g, c)
			}
			if !c.done() {
				pending++
			}
		}
		g.Expect(pending).To(gomega.BeZero(), "jobs still under way:\n%s", underWay(cells))
	}, timeout, 2*time.Second).Should(gomega.Succeed())
}

func underWay(cells []*cell) string {
	var b strings.Builder
	for _, c := range cells {
		if !c.done() {
			fmt.Fprintf(&b, "  %s (%s on %s)\n", c.job.Name, c.runtime, c.target)
		}
	}
	return b.String()
}

// matrix prints one line per runtime, target and variant: ok where the job
// succeeded there, else the refusal's reason.
func matrix(cells []*cell) string {
	var b strings.Builder
	b.WriteString("conformance: Kubeflow Trainer's shipped runtimes × targets (ok = Succeeded there)\n")
	for _, c := range cells {
		if c.variant != "63-char name" {
			fmt.Fprintf(&b, "%-28s %-8s %-6s %s\n", c.runtime, c.target, c.variant, short(c))
		}
	}
	for _, c := range cells {
		if c.variant == "63-char name" {
			fmt.Fprintf(&b, "%-28s %-8s %-6s %s\n", "63-character TrainJob name", c.target, "cmd", short(c))
		}
	}
	return b.String()
}

func short(c *cell) string {
	switch {
	case c.ranOn != "" && (c.target == "any" || c.ranOn == c.target):
		if c.target == "any" {
			return "ok (on " + c.ranOn + ")"
		}
		return "ok"
	case c.refused != "":
		return "refused: " + c.refused
	default:
		return c.outcome
	}
}

func shippedRuntimeNames(t *testing.T) []string {
	rts, err := runtimesUnderTest()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rt := range rts {
		names = append(names, rt.Name)
	}
	sort.Strings(names)
	if len(names) < 10 {
		t.Fatalf("found %d runtimes, want the 9 Trainer v2.3 installs and its Flux example", len(names))
	}
	return names
}

// hasInitializers: Kubeflow's runtimes with dataset or model initializer steps.
func hasInitializers(runtime string) bool {
	return strings.HasPrefix(runtime, "torchtune") || strings.HasSuffix(runtime, "-with-cache")
}
