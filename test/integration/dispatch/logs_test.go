package dispatch

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/test/util"
)

func trainyardCLI(args ...string) (stdout, stderr string, code int) {
	return util.TrainyardCLI(env.fleet.Hub.Kubeconfig, args...)
}

// TestLogsFromTheSpokePod: `trainyard logs` on the hub prints the trainer
// container's output of a pod on the spoke, read by the spoke's agent
// through the spoke's API server (from kwok's kubelet-like server).
func TestLogsFromTheSpokePod(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "logs-long", "1h")
	tj := submit(t, trainJob("logs", "logs-long", 2, 1))
	waitRunning(t, tj)
	remote := remoteJobSetsOf(t, tj)
	g.Expect(remote).To(HaveLen(1))
	spoke := spokeNamed(remote[0].spoke)
	for _, idx := range []string{"0", "1"} {
		_, err := spoke.SetPodLogs(context.Background(), spokeNS, map[string]string{
			jobsetapi.JobSetNameKey:                    remote[0].js.Name,
			"batch.kubernetes.io/job-completion-index": idx,
		}, "node", fmt.Sprintf("rank %s step 1", idx), fmt.Sprintf("rank %s step 2", idx))
		g.Expect(err).NotTo(HaveOccurred())
	}

	g.Eventually(func(g Gomega) {
		out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant, "--replica", "node-0-1", "--tail", "1")
		g.Expect(code).To(BeZero(), "stderr: %s", errOut)
		g.Expect(out).To(Equal("rank 1 step 2\n"))
		g.Expect(errOut).To(ContainSubstring("from pod " + spokeNS + "/" + remote[0].js.Name + "-node-0-1"))
	}, util.Timeout, util.Interval).Should(Succeed())
	out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
	g.Expect(code).To(BeZero(), "stderr: %s", errOut)
	g.Expect(out).To(Equal("rank 0 step 1\nrank 0 step 2\n"))

	_, errOut, code = trainyardCLI("logs", tj.Name, "-n", tenant, "--replica", "node-0-5")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring(`no replica "node-0-5"`))
}
