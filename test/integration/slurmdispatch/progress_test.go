package slurmdispatch

import (
	"context"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// progressProgram trains for two steps with a real gloo all-reduce and, on
// rank 0, reports after each through Trainer's status API with Python's
// standard library only, as Trainer's training callbacks do: the URL, the
// CA file and the token file from Trainer's three variables. It also
// tries its credential on another job's name and prints the answer.
const progressProgram = `import datetime, json, os, ssl, time, urllib.error, urllib.request
import torch
import torch.distributed as dist

def post(url, body):
    token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read().strip()
    ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code

def report(pct, remaining, loss):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": {"progressPercentage": pct, "estimatedRemainingSeconds": remaining,
        "metrics": [{"name": "loss", "value": "%.4f" % loss}], "lastUpdatedTime": now}}

dist.init_process_group("gloo")
rank = dist.get_rank()
url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
for step, pct, remaining in ((1, 50, 20), (2, 100, 0)):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    loss = 1.0 / (step * t.item())
    if rank == 0:
        print("report step=%d status=%d" % (step, post(url, report(pct, remaining, loss))), flush=True)
    if step == 1:
        if rank == 0:
            other = url.replace("/trainjobs/progress/", "/trainjobs/someone-else/")
            print("other job status=%d" % post(other, report(1, 1, 1.0)), flush=True)
        time.sleep(20)
    dist.barrier()
dist.destroy_process_group()
`

// TestPyTorchReportsProgressFromSlurm: a real PyTorch job on two Slurm
// nodes reports its progress to the agent's status endpoint; the hub
// TrainJob shows the report while the job runs and the last one when it is
// done; the job's credential is refused for another job's name.
func TestPyTorchReportsProgressFromSlurm(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-progress-slurm", tytesting.TorchRuntimeSpec(1))
	tj := trainJob("progress", "torch-progress-slurm", 2, 1, "torchrun", "--no-python", "python3", "-c", progressProgram)
	// All emulated nodes are one host: gloo must use loopback.
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "GLOO_SOCKET_IFNAME", Value: "lo"}}
	tj = submit(t, tj)

	var live trainer.TrainJob
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), &live)).To(Succeed())
		g.Expect(live.Status.TrainerStatus).NotTo(BeNil(), "no progress on the hub yet")
		g.Expect(live.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](50)))
	}, slurmTimeout, util.Interval).Should(Succeed())
	g.Expect(apimeta.IsStatusConditionTrue(live.Status.Conditions, trainer.TrainJobComplete)).To(BeFalse(),
		"the first report reached the hub only after the job completed")
	g.Expect(live.Status.TrainerStatus.Metrics).To(ConsistOf(HaveField("Name", "loss")))

	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), &live)).To(Succeed())
		g.Expect(live.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](100)))
		g.Expect(live.Status.TrainerStatus.EstimatedRemainingSeconds).To(Equal(ptr.To[int32](0)))
		g.Expect(live.Status.TrainerStatus.Metrics).To(ConsistOf(trainer.Metric{Name: "loss", Value: "0.1667"}))
	}, slurmTimeout, util.Interval).Should(Succeed())

	out := output(t, d)
	for _, want := range []string{"report step=1 status=200", "report step=2 status=200", "other job status=403"} {
		if !strings.Contains(out, want) {
			t.Errorf("output of Slurm job %s lacks %q:\n%s", d.Status.Remote.ID, want, out)
		}
	}
	if strings.Contains(out, "tyst1.") {
		t.Errorf("the credential is in the job's output:\n%s", out)
	}
}
