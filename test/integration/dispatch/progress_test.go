package dispatch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/test/util"
)

func progressReport(pct int32) *trainer.TrainerStatus {
	return &trainer.TrainerStatus{ProgressPercentage: ptr.To(pct), EstimatedRemainingSeconds: ptr.To[int32](120),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.25"}}, LastUpdatedTime: metav1.NewTime(time.Now().Truncate(time.Second))}
}

// reportOnDispatch writes a progress report into d's status the way the
// agent carries one.
func reportOnDispatch(g Gomega, d *v1alpha1.Dispatch, ts *trainer.TrainerStatus) {
	ctx, c := context.Background(), env.fleet.Hub.Client
	g.Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Status.TrainerStatus = ts
		return c.Status().Update(ctx, d)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestProgressOnDispatchReachesTrainJob: a report the agent carries on the
// live Dispatch shows in the TrainJob's status.trainerStatus, written by
// server-side apply as trainyard-progress alone; the next report within
// MinProgressInterval is held back; the API server refuses a report out of
// Trainer's bounds on the Dispatch.
func TestProgressOnDispatchReachesTrainJob(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-progress", "10m")
	tj := submit(t, trainJob("progress", "torch-progress", 1, 2))
	_, d := waitRunning(t, tj)

	first := progressReport(10)
	reportOnDispatch(g, &d, first)
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(tj.Status.TrainerStatus).NotTo(BeNil())
		g.Expect(tj.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](10)))
		g.Expect(tj.Status.TrainerStatus.Metrics).To(Equal(first.Metrics))
	}, util.Timeout, util.Interval).Should(Succeed())
	var progressWriters []metav1.ManagedFieldsEntry
	for _, m := range tj.ManagedFields {
		if m.Manager == dispatch.ProgressFieldOwner {
			progressWriters = append(progressWriters, m)
		}
	}
	g.Expect(progressWriters).To(ConsistOf(And(HaveField("Operation", metav1.ManagedFieldsOperationApply),
		HaveField("Subresource", "status"))), "managed fields %v", tj.ManagedFields)
	// The hub's gauges show the running job's progress and report time.
	g.Eventually(func(g Gomega) {
		got := progressGauges(g, tj)
		g.Expect(got).To(HaveKeyWithValue("trainyard_trainjob_progress_percent", 10.0))
		g.Expect(got).To(HaveKeyWithValue("trainyard_trainjob_progress_last_report_timestamp_seconds", float64(first.LastUpdatedTime.Unix())))
	}, util.Timeout, util.Interval).Should(Succeed())

	// The next report within the interval waits.
	reportOnDispatch(g, &d, progressReport(20))
	g.Consistently(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(tj.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](10)))
	}, 3*time.Second, util.Interval).Should(Succeed())

	// Trainer's bounds hold on the Dispatch too.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&d), &d)).To(Succeed())
	d.Status.TrainerStatus = progressReport(101)
	g.Expect(c.Status().Update(ctx, &d)).NotTo(Succeed(), "progress 101 accepted")
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&d), &d)).To(Succeed())
	d.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](5)}
	g.Expect(c.Status().Update(ctx, &d)).NotTo(Succeed(), "report without lastUpdatedTime accepted")

	// Once due, the held-back report is written without another event.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(tj.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](20)))
	}, dispatch.MinProgressInterval+util.Timeout, util.Interval).Should(Succeed())
}

// progressGauges reads tj's progress series, by metric name, from the
// registry the in-process hub serves.
func progressGauges(g Gomega, tj *trainer.TrainJob) map[string]float64 {
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["trainjob_namespace"] == tj.Namespace && l["trainjob"] == tj.Name {
				got[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

// podOf returns a pod of d's JobSet on its spoke.
func podOf(g Gomega, d *v1alpha1.Dispatch) corev1.Pod {
	var pods corev1.PodList
	g.Eventually(func(g Gomega) {
		g.Expect(spokeNamed(d.Spec.TargetName).Client.List(context.Background(), &pods, client.InNamespace(d.Status.Remote.Namespace),
			client.MatchingLabels{v1alpha1.LabelDispatchName: d.Name})).To(Succeed())
		g.Expect(pods.Items).NotTo(BeEmpty())
	}, util.Timeout, util.Interval).Should(Succeed())
	return pods.Items[0]
}

// podToken is a token the spoke's API server issues for pod's service
// account, bound to the pod, with audience: what the kubelet projects.
func podToken(g Gomega, d *v1alpha1.Dispatch, pod corev1.Pod, audience string) string {
	cs, err := kubernetes.NewForConfig(spokeNamed(d.Spec.TargetName).Config)
	g.Expect(err).NotTo(HaveOccurred())
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

// TestProgressFromASpokePod: a process posting as a trainer pod of a spoke
// would (the URL, CA and projected token Trainer's variables name) reaches
// its agent's status endpoint over TLS, and the hub TrainJob shows the
// report; a token of another audience, or used for another job's name, is
// refused and nothing is written.
func TestProgressFromASpokePod(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-progress-pod", "10m")
	tj := submit(t, trainJob("podprogress", "torch-progress-pod", 1, 2))
	_, d := waitRunning(t, tj)
	pod := podOf(g, &d)

	url := fmt.Sprintf("https://%s.%s.svc:%d", controllers.StatusService, controllers.StatusNamespace, controllers.StatusPort) +
		statusserver.StatusUrl(tenant, tj.Name)
	g.Expect(envOf(pod.Spec.Containers[0], kubework.EnvTrainerServerURL)).To(Equal(url))
	g.Expect(envOf(pod.Spec.Containers[0], kubework.EnvTrainerServerToken)).To(Equal("/var/run/secrets/kubeflow/trainer/token"))
	var ca corev1.ConfigMap
	g.Expect(spokeNamed(d.Spec.TargetName).Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: spoke.DefaultStatusCAConfigMap}, &ca)).To(Succeed())
	var policy networkingv1.NetworkPolicy
	g.Expect(spokeNamed(d.Spec.TargetName).Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: kubework.PolicyAllowStatus}, &policy)).To(Succeed())

	// The Service stands for the agent's loopback address here.
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM([]byte(ca.Data["ca.crt"]))).To(BeTrue())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: fmt.Sprintf("%s.%s.svc", controllers.StatusService, controllers.StatusNamespace)}}}
	addr := env.statusAddrs[d.Spec.TargetName]
	post := func(g Gomega, job, token string, pct int32) int {
		body, err := json.Marshal(trainer.UpdateTrainJobStatusRequest{TrainerStatus: progressReport(pct)})
		g.Expect(err).NotTo(HaveOccurred())
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+statusserver.StatusUrl(tenant, job), bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		return resp.StatusCode
	}
	own := podToken(g, &d, pod, statusserver.TokenAudience(tenant, tj.Name))
	other := podToken(g, &d, pod, statusserver.TokenAudience(tenant, "someone-else"))
	g.Expect(post(g, tj.Name, other, 90)).To(Equal(http.StatusForbidden), "a token of another audience")
	g.Expect(post(g, "someone-else", own, 90)).To(Equal(http.StatusForbidden), "the job's token for another job's name")
	g.Expect(post(g, tj.Name, "not-a-token", 90)).To(Equal(http.StatusForbidden), "garbage")
	g.Eventually(func(g Gomega) int { return post(g, tj.Name, own, 30) }, util.Timeout, util.Interval).Should(Equal(http.StatusOK))

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(tj.Status.TrainerStatus).NotTo(BeNil())
		g.Expect(tj.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](30)))
	}, util.Timeout, util.Interval).Should(Succeed())

	// The agent kept the report in the Dispatch's progress history (the
	// API server took it), and the hub copied that onto the TrainJob for
	// its owner.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&d), &d)).To(Succeed())
		h := d.Status.ProgressHistory
		g.Expect(h).NotTo(BeNil())
		g.Expect(h.Points).To(HaveLen(1))
		g.Expect(h.Points[0].ProgressPercentage).To(Equal(ptr.To[int32](30)))
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		var copied v1alpha1.ProgressHistory
		g.Expect(json.Unmarshal([]byte(tj.Annotations[v1alpha1.AnnotationProgressHistory]), &copied)).To(Succeed())
		g.Expect(copied.Points).To(HaveLen(1))
		g.Expect(copied.Points[0].Time.Equal(&h.Points[0].Time)).To(BeTrue())
		g.Expect(copied.Points[0].ProgressPercentage).To(Equal(ptr.To[int32](30)))
	}, util.Timeout, util.Interval).Should(Succeed())
}
