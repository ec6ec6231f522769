package spoke

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestStatusLeaderLabel: a standby's pod loses the label it kept from an
// earlier lead, so the Service sends it no report; once elected, its pod
// is the only one labelled (a former leader's label goes); when it stops,
// its pod's label goes too.
func TestStatusLeaderLabel(t *testing.T) {
	pod := func(name string, leader bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "trainyard-agent", Labels: map[string]string{"app": "agent"}}}
		if leader {
			p.Labels[LabelStatusLeader] = "true"
		}
		return p
	}
	c := fake.NewClientBuilder().WithScheme(SpokeScheme()).WithObjects(pod("me", true), pod("former", true), pod("other", false)).Build()
	elected := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = (&statusLeaderLabel{Spoke: c, Namespace: "trainyard-agent", Pod: "me", Elected: elected, Log: logr.Discard()}).Start(ctx)
	}()
	waitLabelled := func(step string, want map[string]bool) {
		t.Helper()
		var got map[string]bool
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace("trainyard-agent")); err != nil {
				return false, err
			}
			got = map[string]bool{}
			for _, p := range pods.Items {
				got[p.Name] = p.Labels[LabelStatusLeader] == "true"
			}
			for k, v := range want {
				if got[k] != v {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: labelled %v, want %v", step, got, want)
		}
	}
	waitLabelled("standby", map[string]bool{"me": false, "former": true, "other": false})
	close(elected)
	waitLabelled("elected", map[string]bool{"me": true, "former": false, "other": false})
	cancel()
	<-done
	waitLabelled("stopped", map[string]bool{"me": false, "former": false, "other": false})
}
