package jobset

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestLogsReadsPodsThroughAPIServer: Logs picks a replica's pod and reads
// its trainer container's output through the API server's pods/log, which
// the API server fetches from kwok's kubelet-like server.
func TestLogsReadsPodsThroughAPIServer(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	cs, err := kubernetes.NewForConfig(spoke.Config)
	g.Expect(err).NotTo(HaveOccurred())
	o := backendOptions()
	o.Logs = cs
	b := jobset.New(cached, o)
	d := gpuDispatch("logs", map[string]string{"kwok.trainyard.dev/run-for": "1h"})
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	defer util.CancelUntilGone(g, b, d)
	g.Eventually(func(g Gomega) {
		g.Expect(observe(g, b, d).Phase).To(Equal(v1alpha1.DispatchRunning))
	}, util.Timeout, util.Interval).Should(Succeed())

	for _, idx := range []string{"0", "1"} {
		var lines []string
		for i := range 4 {
			lines = append(lines, fmt.Sprintf("pod %s line %d", idx, i))
		}
		names, err := spoke.SetPodLogs(ctx, jobsNS, map[string]string{
			jobsetapi.JobSetNameKey:                    ref.Name,
			"batch.kubernetes.io/job-completion-index": idx,
		}, "node", lines...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names).To(HaveLen(1))
	}

	for _, tc := range []struct{ replica, pod, want string }{
		{"", ref.Name + "-node-0-0", "pod 0 line 2\npod 0 line 3\n"},
		{"node-0-1", ref.Name + "-node-0-1", "pod 1 line 2\npod 1 line 3\n"},
	} {
		g.Eventually(func(g Gomega) {
			logs, err := b.Logs(ctx, d, backends.LogOptions{Replica: tc.replica, TailLines: 2, LimitBytes: 1 << 20})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(logs.Data)).To(Equal(tc.want))
			g.Expect(logs.Truncated).To(BeTrue())
			g.Expect(logs.Source).To(HavePrefix("pod " + jobsNS + "/" + tc.pod))
			g.Expect(logs.Source).To(HaveSuffix(" container node"))
		}, util.Timeout, util.Interval).Should(Succeed(), "replica %q", tc.replica)
	}
	all, err := b.Logs(ctx, d, backends.LogOptions{Replica: "node-0-1", TailLines: 10})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(all.Data)).To(Equal("pod 1 line 0\npod 1 line 1\npod 1 line 2\npod 1 line 3\n"))
	g.Expect(all.Truncated).To(BeFalse())

	_, err = b.Logs(ctx, d, backends.LogOptions{Replica: "node-0-7"})
	g.Expect(err).To(MatchError(ContainSubstring(`no replica "node-0-7"; replicas: node-0-0, node-0-1`)))
}
