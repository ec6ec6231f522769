package dispatch

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

// makeRuntime creates a ClusterTrainingRuntime whose pods run on kwok nodes
// for runFor, and deletes it when the test ends.
func makeRuntime(t *testing.T, name, runFor string) *trainer.ClusterTrainingRuntime {
	t.Helper()
	rt := util.KwokRuntime(name, runFor).Obj()
	util.CreateForTest(t, env.fleet.Hub.Client, rt)
	return rt
}

// submit creates a TrainJob in the tenant namespace and, at the end of the
// test, deletes it and waits until its remote work is gone everywhere.
func submit(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	return util.SubmitTrainJob(t, env.fleet.Hub.Client, tj, func(Gomega) int { return len(remoteJobSetsOf(t, tj)) })
}

// dispatchesOf lists the Dispatches of a Workload across agent namespaces.
func dispatchesOf(g Gomega, wl *kueue.Workload) []v1alpha1.Dispatch {
	var list v1alpha1.DispatchList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &list,
		client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)})).To(Succeed())
	return list.Items
}

// remoteJobSet is a JobSet found on a spoke.
type remoteJobSet struct {
	spoke string
	js    jobset.JobSet
}

// remoteJobSetsOf lists, on every spoke, the JobSets made for a TrainJob:
// remote work is labelled with the hub TrainJob's UID.
func remoteJobSetsOf(t *testing.T, tj *trainer.TrainJob) []remoteJobSet {
	t.Helper()
	if tj.UID == "" {
		t.Fatalf("TrainJob %s has no UID: create it first", tj.Name)
	}
	var out []remoteJobSet
	for _, s := range env.fleet.Spokes {
		var list jobset.JobSetList
		if err := s.Client.List(context.Background(), &list, client.InNamespace(spokeNS),
			client.MatchingLabels{v1alpha1.LabelTrainJobUID: string(tj.UID)}); err != nil {
			t.Fatalf("list JobSets on %s: %v", s.Name, err)
		}
		for _, js := range list.Items {
			out = append(out, remoteJobSet{spoke: s.Name, js: js})
		}
	}
	return out
}

func spokeNamed(name string) *kube.Cluster {
	for _, s := range env.fleet.Spokes {
		if s.Name == name {
			return s
		}
	}
	panic("no spoke " + name)
}

// checkState returns trainyard's admission check state on wl.
func checkState(wl *kueue.Workload) (kueue.CheckState, string) {
	for _, c := range wl.Status.AdmissionChecks {
		if c.Name == "trainyard" {
			return c.State, c.Message
		}
	}
	return "", ""
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			if e.ValueFrom != nil {
				return fmt.Sprintf("valueFrom(%v)", e.ValueFrom.FieldRef)
			}
			return e.Value
		}
	}
	return "<unset>"
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// eventMessages lists the messages of events with reason about wl.
func eventMessages(g Gomega, wl *kueue.Workload, reason string) []string {
	var events corev1.EventList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &events, client.InNamespace(wl.Namespace))).To(Succeed())
	var msgs []string
	for _, e := range events.Items {
		if e.InvolvedObject.UID == wl.UID && e.Reason == reason {
			msgs = append(msgs, e.Message)
		}
	}
	return msgs
}

// fillSpokes starts from spokes whose heartbeats show every GPU free (or a
// job meets an earlier test's GPUs and waits for it), submits one job of a
// whole node per node of both spokes, all at once, and waits until each
// runs.
func fillSpokes(t *testing.T, prefix, runtime string) []*trainer.TrainJob {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var list v1alpha1.TargetList
		g.Expect(env.fleet.Hub.Client.List(context.Background(), &list)).To(Succeed())
		for _, tg := range list.Items {
			g.Expect(tg.Status.FreeGPUs).To(Equal(int64(nodesPerSpoke*gpusPerNode)), "target %s", tg.Name)
		}
	}, util.Timeout, util.Interval).Should(Succeed())
	var jobs []*trainer.TrainJob
	for i := 0; i < 2*nodesPerSpoke; i++ {
		jobs = append(jobs, submit(t, trainJob(fmt.Sprintf("%s-%d", prefix, i), runtime, 1, gpusPerNode)))
	}
	for _, tj := range jobs {
		waitRunning(t, tj)
	}
	return jobs
}
