package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// answerLogs plays the agent of the live Dispatch d once: it waits for a
// logs request on d and answers it with body (or errMsg). It returns the
// request it saw.
func answerLogs(t *testing.T, d client.ObjectKey, body, errMsg string) <-chan v1alpha1.LogsRequest {
	seen := make(chan v1alpha1.LogsRequest, 1)
	var before v1alpha1.Dispatch
	if err := hub.Client.Get(context.Background(), d, &before); err != nil {
		t.Fatal(err)
	}
	old := before.Annotations[v1alpha1.AnnotationLogsRequest] // an earlier test's request
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			var disp v1alpha1.Dispatch
			if err := hub.Client.Get(ctx, d, &disp); err == nil && disp.Annotations[v1alpha1.AnnotationLogsRequest] != old {
				var req v1alpha1.LogsRequest
				if err := json.Unmarshal([]byte(disp.Annotations[v1alpha1.AnnotationLogsRequest]), &req); err == nil {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: v1alpha1.LogsAnswerName(d.Name),
						Annotations: map[string]string{v1alpha1.AnnotationLogsRequestID: req.ID, v1alpha1.AnnotationLogsSource: "pod p",
							v1alpha1.AnnotationLogsTruncated: "true"}},
						Data: map[string]string{v1alpha1.LogsDataKey: body}}
					if errMsg != "" {
						cm.Annotations[v1alpha1.AnnotationLogsError] = errMsg
					}
					err := hub.Client.Create(ctx, cm)
					if apierrors.IsAlreadyExists(err) {
						err = hub.Client.Update(ctx, cm)
					}
					if err != nil {
						t.Errorf("answer: %v", err)
					}
					seen <- req
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		close(seen)
	}()
	return seen
}

// llamaDispatch is the seeded live Dispatch of TrainJob llama.
var llamaDispatch = client.ObjectKey{Namespace: "trainyard-spoke-1", Name: "llama-2"}

func TestLogsPrintsTheAgentsAnswer(t *testing.T) {
	seen := answerLogs(t, llamaDispatch, "step 99 loss 0.1\n", "")
	r := runCLI(t, false, "logs", "llama", "-n", "team-a", "--tail", "5", "--replica", "node-0-1")
	if r.code != 0 || r.out != "step 99 loss 0.1\n" {
		t.Fatalf("logs = %d, %q, %q; want the answer on stdout", r.code, r.out, r.errOut)
	}
	if !strings.Contains(r.errOut, "older output left out; from pod p") {
		t.Errorf("stderr %q does not say the output was cut", r.errOut)
	}
	if req := <-seen; req.TailLines != 5 || req.Replica != "node-0-1" || req.ID == "" {
		t.Errorf("request = %+v, want tail 5 of node-0-1 with an id", req)
	}
	// The CLI removes the answer it has read.
	var cm corev1.ConfigMap
	err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: llamaDispatch.Namespace, Name: v1alpha1.LogsAnswerName(llamaDispatch.Name)}, &cm)
	if !apierrors.IsNotFound(err) {
		t.Errorf("answer left behind: %v", err)
	}
}

func TestLogsReportsTheAgentsError(t *testing.T) {
	answerLogs(t, llamaDispatch, "", "pod p has not started")
	r := runCLI(t, false, "logs", "llama", "-n", "team-a")
	if r.code != 1 || r.errOut != "error: target spoke-1: pod p has not started\n" || r.out != "" {
		t.Fatalf("logs = %d, %q, %q; want exit 1 with the agent's error", r.code, r.out, r.errOut)
	}
}
