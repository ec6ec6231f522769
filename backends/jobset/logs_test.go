package jobset

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/backends"
)

func testPod(js, name, rjob, jobIndex, podIndex string, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: map[string]string{
			jobsetv1alpha2.JobSetNameKey:               js,
			jobsetv1alpha2.ReplicatedJobNameKey:        rjob,
			jobsetv1alpha2.JobIndexKey:                 jobIndex,
			"batch.kubernetes.io/job-completion-index": podIndex,
		}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar"}, {Name: "node"}}},
		Status: corev1.PodStatus{Phase: phase},
	}
	if phase == corev1.PodRunning {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	return p
}

func TestLogsPicksReplica(t *testing.T) {
	d := testDispatch("d1")
	name := backends.RemoteName(d)
	other := testPod("other-jobset", "other-node-0-0", "node", "0", "0", corev1.PodRunning)
	pods := []client.Object{
		testPod(name, "p-node-0-1", "node", "0", "1", corev1.PodRunning),
		testPod(name, "p-node-0-0", "node", "0", "0", corev1.PodRunning),
		testPod(name, "p-node-0-2", "node", "0", "2", corev1.PodPending),
		other,
	}
	cases := []struct {
		replica, wantSource, wantErr string
	}{
		{replica: "", wantSource: "pod " + testNS + "/p-node-0-0 container node"},
		{replica: "node-0-0", wantSource: "pod " + testNS + "/p-node-0-0 container node"},
		{replica: "node-0-1", wantSource: "pod " + testNS + "/p-node-0-1 container node"},
		{replica: "node-0-2", wantErr: "p-node-0-2 container node has not started yet"},
		{replica: "node-1-0", wantErr: `no replica "node-1-0"; replicas: node-0-0, node-0-1, node-0-2`},
		{replica: "launcher-0-0", wantErr: `replicas: node-0-0, node-0-1, node-0-2`},
	}
	ctx, c := context.Background(), newFakeClient(pods...)
	b := New(c, Options{Namespace: testPrefix, Logs: kubefake.NewClientset()})
	if _, err := b.Submit(ctx, d); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.replica, func(t *testing.T) {
			got, err := b.Logs(ctx, d, backends.LogOptions{Replica: tc.replica, TailLines: 5})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Logs(%q) error = %v, want one containing %q", tc.replica, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Logs(%q): %v", tc.replica, err)
			}
			if got.Source != tc.wantSource {
				t.Errorf("Logs(%q) source = %q, want %q", tc.replica, got.Source, tc.wantSource)
			}
			if string(got.Data) != "fake logs" {
				t.Errorf("Logs(%q) data = %q, want the fake clientset's %q", tc.replica, got.Data, "fake logs")
			}
		})
	}
}

func TestLogsErrors(t *testing.T) {
	ctx, d := context.Background(), testDispatch("d1")
	if _, err := New(newFakeClient(), Options{Namespace: testPrefix}).Logs(ctx, d, backends.LogOptions{}); err == nil ||
		!strings.Contains(err.Error(), "logs are not configured") {
		t.Errorf("without a clientset: error = %v", err)
	}
	b := New(newFakeClient(), Options{Namespace: testPrefix, Logs: kubefake.NewClientset()})
	if _, err := b.Logs(ctx, d, backends.LogOptions{}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("without a jobset: error = %v", err)
	}
	if _, err := b.Submit(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Logs(ctx, d, backends.LogOptions{}); err == nil || !strings.Contains(err.Error(), "no pods yet") {
		t.Errorf("without pods: error = %v", err)
	}
}
