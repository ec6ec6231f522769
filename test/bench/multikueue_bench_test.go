package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// Side by side with MultiKueue, on one harness of MultiKueue's own
// performance test's shape: a manager (hub) and three workers (spokes),
// real control planes, no pods. Each side gets a fresh fleet, one after
// the other, so neither runs beside the other's leftovers.
const (
	sideBySideSpokes = 3
	sideBySideNS     = "bench"
	mkCheck          = "multikueue"
	// sideBySideTimeout bounds one side's wait for its remote JobSets:
	// MultiKueue made about 1.2 a second here, so 1,000 take some 14
	// minutes.
	sideBySideTimeout = 30 * time.Minute
)

// BenchmarkSideBySideMultiKueue dispatches TRAINYARD_BENCH_MK_JOBS (default
// 1000) one-GPU JobSets through Kueue v0.19's MultiKueue, then as many
// one-GPU TrainJobs through trainyard, each to three spokes, and times
// both from creation on the hub to the remote JobSet's creation.
func BenchmarkSideBySideMultiKueue(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	n := envInt("TRAINYARD_BENCH_MK_JOBS", 1000)
	for i := 0; i < b.N; i++ {
		mk := multiKueueRound(b, n)
		ty, cost := trainyardWideRound(b, n)
		b.ReportMetric(float64(mk.n)/mk.took.Seconds(), "multikueue-jobs/s")
		b.ReportMetric(float64(ty.n)/ty.took.Seconds(), "trainyard-jobs/s")
		row(sideBySideCells("Side by side: MultiKueue (Kueue v0.19), JobSets to 3 workers", mk, nil, nil)...)
		row(sideBySideCells("Side by side: trainyard, TrainJobs to 3 spokes", ty, &mk, cost)...)
		b.ReportMetric(mk.hubAPI.writes(mk.n), "multikueue-hub-writes/job")
		b.ReportMetric(ty.hubAPI.writes(ty.n), "trainyard-hub-writes/job")
		// Both count from the first create to the last remote JobSet.
		costRow("Cost per job: side by side, MultiKueue (to remote JobSet)", mk.n, mk.hubAPI, mk.cpu)
		costRow("Cost per job: side by side, trainyard (to remote JobSet)", ty.n, ty.hubAPI, ty.cpu)
	}
}

// sideBySideCells is a row of the one table: rate cells (with the ratio to
// base when given), the hub's p99s (trainyard only), no agent load, P50
// and P95 from creation to remote JobSet, and how long the creates took.
func sideBySideCells(what string, r result, base *result, cost []string) []string {
	var cells []string
	if base != nil {
		cells = rateCells(what, r.n, r.took, base.took)
	} else {
		cells = rateCells(what, r.n, r.took)
	}
	if cost == nil {
		cost = []string{"", ""}
	}
	notes := fmt.Sprintf("created in %.0f s (%.1f/s)", r.creating.Seconds(), float64(r.n)/r.creating.Seconds())
	if r.retries > 0 {
		notes += fmt.Sprintf(", %d creates tried again", r.retries)
	}
	if r.cpu != "" {
		notes += "; CPU s/job: " + r.cpu
	}
	return append(append(cells, cost...), "", secs(r.p50), secs(r.p95), notes)
}

// multiKueueRound starts a manager and three workers, connects them with
// MultiKueueClusters from kubeconfig Secrets, a MultiKueueConfig and an
// AdmissionCheck of controllerName kueue.x-k8s.io/multikueue, then creates
// n JobSets on the manager (spec.managedBy: kueue.x-k8s.io/multikueue).
// Every worker runs Kueue and the JobSet controller, as MultiKueue's docs
// require; the manager runs Kueue only.
func multiKueueRound(b *testing.B, n int) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := artifacts("multikueue")
	var workerOpts []kube.Options
	for i := 1; i <= sideBySideSpokes; i++ {
		name := fmt.Sprintf("worker%d", i)
		workerOpts = append(workerOpts, kube.Options{
			Name: name, Dir: subdir(dir, name),
			CRDs:  []string{kube.CRDsKueue, kube.CRDsJobSet, kube.CRDsTrainer},
			Kueue: true, JobSet: true,
		})
	}
	fleet := startClusters(b, kube.HubOptions(subdir(dir, "manager"), true), workerOpts...)
	defer func() { _ = fleet.Stop() }()
	for _, w := range fleet.Spokes {
		if err := setUpPlainQueue(ctx, w, ""); err != nil {
			b.Fatal(err)
		}
	}
	if err := connectWorkers(ctx, fleet); err != nil {
		b.Fatal(err)
	}
	if err := setUpPlainQueue(ctx, fleet.Hub, mkCheck); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "MultiKueue admission check active", func() (int, error) {
		var ac kueue.AdmissionCheck
		if err := fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: mkCheck}, &ac); err != nil {
			return 0, err
		}
		if apimeta.IsStatusConditionTrue(ac.Status.Conditions, kueue.AdmissionCheckActive) {
			return 1, nil
		}
		return 0, nil
	}, 1)

	a := newArrivals()
	for _, w := range fleet.Spokes {
		a.watch(ctx, b, w, func(js *jobset.JobSet) string { return js.Namespace + "/" + js.Name })
	}
	c, cpu, api := fleet.Hub.Client, newCPUMeter(fleet), startAPIMeter(fleet.Hub.Config)
	parallel(b, n, func(i int) error {
		js := rawJobSet(sideBySideNS, fmt.Sprintf("mk-%d", i))
		js.Labels = map[string]string{kueueconstants.QueueLabel: "lq"}
		js.Spec.ManagedBy = ptr.To(kueue.MultiKueueControllerName)
		t := time.Now()
		if err := c.Create(ctx, js); err != nil {
			return err
		}
		a.create(js.Namespace+"/"+js.Name, t)
		return nil
	})
	a.waitArrived(b, "MultiKueue", n, sideBySideTimeout, append([]*kube.Cluster{fleet.Hub}, fleet.Spokes...)...)
	r := a.result()
	settle(b, api, admittedWorkloads(c, sideBySideNS), n)
	r.cpu = cpu.cell(n)
	r.hubAPI = hubRequests(b, api)
	return r
}

// connectWorkers gives the manager's Kueue a kubeconfig Secret and a
// MultiKueueCluster per worker, a MultiKueueConfig listing them and the
// AdmissionCheck that uses it, and waits until every cluster is Active.
func connectWorkers(ctx context.Context, fleet *kube.Fleet) error {
	c := fleet.Hub.Client
	cfg := &kueue.MultiKueueConfig{ObjectMeta: metav1.ObjectMeta{Name: mkCheck}}
	for _, w := range fleet.Spokes {
		raw, err := os.ReadFile(w.Kubeconfig)
		if err != nil {
			return err
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-kubeconfig", Namespace: kube.KueueNamespace},
			Data:       map[string][]byte{"kubeconfig": raw},
		}
		cluster := &kueue.MultiKueueCluster{
			ObjectMeta: metav1.ObjectMeta{Name: w.Name},
			Spec: kueue.MultiKueueClusterSpec{ClusterSource: kueue.ClusterSource{KubeConfig: &kueue.KubeConfig{
				Location: secret.Name, LocationType: kueue.SecretLocationType}}},
		}
		for _, o := range []client.Object{secret, cluster} {
			if err := c.Create(ctx, o); err != nil {
				return err
			}
		}
		cfg.Spec.Clusters = append(cfg.Spec.Clusters, w.Name)
	}
	check := &kueue.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: mkCheck},
		Spec: kueue.AdmissionCheckSpec{
			ControllerName: kueue.MultiKueueControllerName,
			Parameters:     &kueue.AdmissionCheckParametersReference{APIGroup: kueue.SchemeGroupVersion.Group, Kind: "MultiKueueConfig", Name: mkCheck},
		},
	}
	for _, o := range []client.Object{cfg, check} {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, w := range fleet.Spokes {
		for {
			var mc kueue.MultiKueueCluster
			if err := c.Get(ctx, client.ObjectKey{Name: w.Name}, &mc); err != nil {
				return err
			}
			cond := apimeta.FindStatusCondition(mc.Status.Conditions, kueue.MultiKueueClusterActive)
			if cond != nil && cond.Status == metav1.ConditionTrue {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("MultiKueueCluster %s not active: %+v", w.Name, cond)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// setUpPlainQueue makes the flavor "gpu", ClusterQueue "cq" with room for
// every job (and the admission check check, if any) and LocalQueue "lq"
// in the bench namespace.
func setUpPlainQueue(ctx context.Context, cl *kube.Cluster, check string) error {
	if err := cl.EnsureNamespace(ctx, sideBySideNS); err != nil {
		return err
	}
	cq := &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "cq"},
		Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueue.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{kube.GPUResource},
				Flavors: []kueue.FlavorQuotas{{Name: "gpu", Resources: []kueue.ResourceQuota{{
					Name: kube.GPUResource, NominalQuota: resource.MustParse("100000")}}}},
			}},
		},
	}
	if check != "" {
		cq.Spec.AdmissionChecksStrategy = &kueue.AdmissionChecksStrategy{
			AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: kueue.AdmissionCheckReference(check)}}}
	}
	for _, o := range []client.Object{
		&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}},
		cq,
		&kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "lq", Namespace: sideBySideNS},
			Spec: kueue.LocalQueueSpec{ClusterQueue: "cq"}},
	} {
		if err := cl.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// startClusters starts a hub and spokes of the given options one after
// the other: on a loaded 2-core machine, control planes started together
// miss envtest's deadline for installing CRDs.
func startClusters(b *testing.B, hub kube.Options, spokes ...kube.Options) *kube.Fleet {
	f := &kube.Fleet{}
	for i, o := range append([]kube.Options{hub}, spokes...) {
		c, err := kube.Start(context.Background(), o)
		if err != nil {
			_ = f.Stop()
			b.Fatal(err)
		}
		if i == 0 {
			f.Hub = c
		} else {
			f.Spokes = append(f.Spokes, c)
		}
	}
	return f
}

// artifacts is a folder for one fleet's logs under TRAINYARD_ARTIFACTS, or
// "" (temporary folders).
func artifacts(name string) string {
	if dir := os.Getenv("TRAINYARD_ARTIFACTS"); dir != "" {
		return filepath.Join(dir, name)
	}
	return ""
}

func subdir(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name)
}
