package spoke

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// logsBackend is a fakeBackend that can read logs.
type logsBackend struct {
	*fakeBackend
	logs  backends.Logs
	err   error
	calls []backends.LogOptions
}

func (b *logsBackend) Logs(_ context.Context, _ *v1alpha1.Dispatch, o backends.LogOptions) (*backends.Logs, error) {
	b.calls = append(b.calls, o)
	if b.err != nil {
		return nil, b.err
	}
	l := b.logs
	return &l, nil
}

func logsRequest(t *testing.T, r v1alpha1.LogsRequest) string {
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestLogsReconciler(t *testing.T) {
	remote := &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "jobs", Name: "j"}
	running := func() *tytesting.DispatchWrapper {
		return tytesting.MakeDispatch("d", "agent-ns", "spoke1").Phase(v1alpha1.DispatchRunning).Remote(remote)
	}
	cases := map[string]struct {
		dispatch *tytesting.DispatchWrapper
		request  string // annotation value; "" leaves it unset
		answered string // request id a stored answer already carries
		backend  func() backends.Backend
		// want* describe the answer; wantAnswer false: no ConfigMap.
		wantAnswer    bool
		wantData      string
		wantError     string
		wantTruncated string
		wantCalls     int
		wantOptions   backends.LogOptions
	}{
		"answers with the output": {
			dispatch: running(), request: logsRequest(t, v1alpha1.LogsRequest{ID: "r1", Replica: "node-0-1", TailLines: 10}),
			backend: func() backends.Backend {
				return &logsBackend{fakeBackend: newFakeBackend(), logs: backends.Logs{Source: "pod jobs/p", Data: []byte("hello\n"), Truncated: true}}
			},
			wantAnswer: true, wantData: "hello\n", wantTruncated: "true", wantCalls: 1,
			wantOptions: backends.LogOptions{Replica: "node-0-1", TailLines: 10, LimitBytes: v1alpha1.MaxLogsBytes},
		},
		"a limit above the maximum is capped": {
			dispatch: running(), request: logsRequest(t, v1alpha1.LogsRequest{ID: "r1", LimitBytes: 10 << 20}),
			backend:    func() backends.Backend { return &logsBackend{fakeBackend: newFakeBackend()} },
			wantAnswer: true, wantTruncated: "false", wantCalls: 1,
			wantOptions: backends.LogOptions{LimitBytes: v1alpha1.MaxLogsBytes},
		},
		"invalid UTF-8 is made storable": {
			dispatch: running(), request: logsRequest(t, v1alpha1.LogsRequest{ID: "r1"}),
			backend: func() backends.Backend {
				return &logsBackend{fakeBackend: newFakeBackend(), logs: backends.Logs{Data: []byte("a\xffb\n")}}
			},
			wantAnswer: true, wantData: "a\uFFFDb\n", wantTruncated: "false", wantCalls: 1,
			wantOptions: backends.LogOptions{LimitBytes: v1alpha1.MaxLogsBytes},
		},
		"a backend error is the answer": {
			dispatch: running(), request: logsRequest(t, v1alpha1.LogsRequest{ID: "r1"}),
			backend: func() backends.Backend {
				return &logsBackend{fakeBackend: newFakeBackend(), err: errors.New("pod p has not started")}
			},
			wantAnswer: true, wantError: "pod p has not started", wantCalls: 1,
			wantOptions: backends.LogOptions{LimitBytes: v1alpha1.MaxLogsBytes},
		},
		"a backend without logs says so": {
			dispatch: running(), request: logsRequest(t, v1alpha1.LogsRequest{ID: "r1"}),
			backend:    func() backends.Backend { return newFakeBackend() },
			wantAnswer: true, wantError: "cannot read logs",
		},
		"no remote work yet": {
			dispatch:   tytesting.MakeDispatch("d", "agent-ns", "spoke1").Phase(v1alpha1.DispatchPending),
			request:    logsRequest(t, v1alpha1.LogsRequest{ID: "r1"}),
			backend:    func() backends.Backend { return &logsBackend{fakeBackend: newFakeBackend()} },
			wantAnswer: true, wantError: "no remote work yet",
		},
		"an answered request is not read again": {
			dispatch: running(), request: logsRequest(t, v1alpha1.LogsRequest{ID: "r1"}), answered: "r1",
			backend:    func() backends.Backend { return &logsBackend{fakeBackend: newFakeBackend()} },
			wantAnswer: true, wantData: "old\n",
		},
		"a new request replaces the old answer": {
			dispatch: running(), request: logsRequest(t, v1alpha1.LogsRequest{ID: "r2"}), answered: "r1",
			backend: func() backends.Backend {
				return &logsBackend{fakeBackend: newFakeBackend(), logs: backends.Logs{Data: []byte("new\n")}}
			},
			wantAnswer: true, wantData: "new\n", wantTruncated: "false", wantCalls: 1,
			wantOptions: backends.LogOptions{LimitBytes: v1alpha1.MaxLogsBytes},
		},
		"a malformed request is not answered": {
			dispatch: running(), request: "{not json",
			backend: func() backends.Backend { return &logsBackend{fakeBackend: newFakeBackend()} },
		},
		"a request without an id is not answered": {
			dispatch: running(), request: `{"tailLines": 3}`,
			backend: func() backends.Backend { return &logsBackend{fakeBackend: newFakeBackend()} },
		},
		"no request": {
			dispatch: running(),
			backend:  func() backends.Backend { return &logsBackend{fakeBackend: newFakeBackend()} },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.dispatch.Obj()
			if tc.request != "" {
				d.Annotations = map[string]string{v1alpha1.AnnotationLogsRequest: tc.request}
			}
			objs := []client.Object{d}
			if tc.answered != "" {
				objs = append(objs, &corev1.ConfigMap{
					ObjectMeta: ctrlObjectMeta(d, tc.answered),
					Data:       map[string]string{v1alpha1.LogsDataKey: "old\n"},
				})
			}
			hub := newHub(&hubRecorder{}, objs...)
			backend := tc.backend()
			r := &LogsReconciler{Hub: hub, Answers: hub, Backend: backend}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			var cm corev1.ConfigMap
			err := hub.Get(context.Background(), client.ObjectKey{Namespace: d.Namespace, Name: v1alpha1.LogsAnswerName(d.Name)}, &cm)
			if !tc.wantAnswer {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("answer = %v, %v; want none", cm.Annotations, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if got := cm.Data[v1alpha1.LogsDataKey]; got != tc.wantData {
				t.Errorf("data = %q, want %q", got, tc.wantData)
			}
			if got := cm.Annotations[v1alpha1.AnnotationLogsError]; (tc.wantError == "") != (got == "") || !contains(got, tc.wantError) {
				t.Errorf("error = %q, want %q", got, tc.wantError)
			}
			if got := cm.Annotations[v1alpha1.AnnotationLogsTruncated]; tc.answered == "" && got != tc.wantTruncated {
				t.Errorf("truncated = %q, want %q", got, tc.wantTruncated)
			}
			if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Name != d.Name {
				t.Errorf("owner references = %v, want the Dispatch", cm.OwnerReferences)
			}
			if lb, ok := backend.(*logsBackend); ok {
				if len(lb.calls) != tc.wantCalls || (tc.wantCalls > 0 && lb.calls[0] != tc.wantOptions) {
					t.Errorf("backend calls = %+v, want %d with %+v", lb.calls, tc.wantCalls, tc.wantOptions)
				}
			}
		})
	}
}

// ctrlObjectMeta is the metadata of an answer to request id, owned by d.
func ctrlObjectMeta(d *v1alpha1.Dispatch, id string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: d.Namespace, Name: v1alpha1.LogsAnswerName(d.Name),
		Annotations:     map[string]string{v1alpha1.AnnotationLogsRequestID: id},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Dispatch", Name: d.Name, UID: d.UID}},
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
