// Package util holds the polling intervals and helpers shared by
// trainyard's integration suites.
package util

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

const (
	// Timeout bounds waits for controllers to converge; the 2-core CI
	// machine runs three control planes at once.
	Timeout = 90 * time.Second
	// Interval is the polling period of Eventually.
	Interval = 250 * time.Millisecond
)

// ConditionTrue reports whether obj's condition of type t is True; it
// returns an error naming the condition's state otherwise, which Eventually
// prints on timeout.
func ConditionTrue(ctx context.Context, c client.Client, obj client.Object, conds func() []metav1.Condition, t string) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	cond := meta.FindStatusCondition(conds(), t)
	if cond == nil {
		return fmt.Errorf("%s has no %s condition yet", obj.GetName(), t)
	}
	if cond.Status != metav1.ConditionTrue {
		return fmt.Errorf("%s condition %s is %s: %s: %s", obj.GetName(), t, cond.Status, cond.Reason, cond.Message)
	}
	return nil
}

// DumpLogsOnFailure prints the tail of every component log of the
// clusters when a suite failed, so CI output shows why.
func DumpLogsOnFailure(code int, clusters ...*kube.Cluster) {
	if code == 0 {
		return
	}
	for _, c := range clusters {
		if c == nil {
			continue
		}
		for _, p := range c.Processes() {
			fmt.Fprintf(os.Stderr, "----- %s/%s (%s) -----\n%s\n", c.Name, p.Name, p.LogPath, p.LogTail(4000))
		}
	}
}

// LogSink is where a suite's in-process hub and agents log: the file name
// in $TRAINYARD_ARTIFACTS when set, else nowhere.
func LogSink(name string) io.Writer {
	dir := os.Getenv("TRAINYARD_ARTIFACTS")
	if dir == "" {
		return io.Discard
	}
	_ = os.MkdirAll(dir, 0o755)
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return io.Discard
	}
	return f
}

// WorkloadOf waits for the Kueue Workload owned by tj and returns it.
func WorkloadOf(g gomega.Gomega, c client.Client, tj *trainer.TrainJob) *kueue.Workload {
	var wl *kueue.Workload
	g.Eventually(func(g gomega.Gomega) {
		var list kueue.WorkloadList
		g.Expect(c.List(context.Background(), &list, client.InNamespace(tj.Namespace))).To(gomega.Succeed())
		for i := range list.Items {
			for _, o := range list.Items[i].OwnerReferences {
				if o.UID == tj.UID {
					wl = &list.Items[i]
				}
			}
		}
		g.Expect(wl).NotTo(gomega.BeNil(), "no Workload for TrainJob %s yet", tj.Name)
	}, Timeout, Interval).Should(gomega.Succeed())
	return wl
}

// WorkloadEnded reports whether Kueue has stopped wl for good after a
// rejection: either its workload controller deactivated it, or its job
// reconciler finished it first because the TrainJob already failed (then
// the deactivation is never applied). Both release the quota.
func WorkloadEnded(wl *kueue.Workload) bool {
	return (wl.Spec.Active != nil && !*wl.Spec.Active) || meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished)
}

// WaitNodesReady waits until n nodes of c report Ready.
func WaitNodesReady(ctx context.Context, c client.Client, n int) error {
	return wait.PollUntilContextTimeout(ctx, Interval, Timeout, true, func(ctx context.Context) (bool, error) {
		var list corev1.NodeList
		if err := c.List(ctx, &list); err != nil {
			return false, err
		}
		ready := 0
		for _, node := range list.Items {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == n, nil
	})
}

// CancelUntilGone cancels d's remote work on b until b reports it gone.
func CancelUntilGone(g gomega.Gomega, b backends.Backend, d *v1alpha1.Dispatch) {
	g.Eventually(func(g gomega.Gomega) {
		gone, err := b.Cancel(context.Background(), d)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(gone).To(gomega.BeTrue())
	}, Timeout, Interval).Should(gomega.Succeed())
}
